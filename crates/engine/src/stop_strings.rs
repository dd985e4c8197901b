//! Stop strings over streamed text: what may be shown now, and where a stop string begins. A stop
//! string that straddles token pieces never shows, not even in part.

/// Scans `pending` (text not yet shown) for the stop strings. Returns `(show, stop_at)`: the
/// length of the prefix that can be shown now, and the byte offset where a complete stop string
/// starts, if one does (then `show == stop_at`).
pub fn scan(pending: &str, stops: &[String]) -> (usize, Option<usize>) {
    let found = stops
        .iter()
        .filter(|s| !s.is_empty())
        .filter_map(|s| pending.find(s.as_str()))
        .min();
    if let Some(at) = found {
        return (at, Some(at));
    }
    // Hold back the longest tail that could still grow into a stop string.
    let mut hold = 0;
    for s in stops.iter().filter(|s| !s.is_empty()) {
        for (i, _) in s.char_indices().skip(1) {
            if pending.ends_with(&s[..i]) {
                hold = hold.max(i);
            }
        }
    }
    (pending.len() - hold, None)
}

#[cfg(test)]
mod tests {
    use super::scan;

    fn stops(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn text_without_stops_shows_at_once() {
        assert_eq!(scan("hello world", &stops(&["STOP"])), (11, None));
        assert_eq!(scan("hello", &[]), (5, None));
    }

    #[test]
    fn a_partial_stop_is_held_back() {
        assert_eq!(scan("hello ST", &stops(&["STOP"])), (6, None));
        assert_eq!(scan("hello S", &stops(&["STOP", "Sx"])), (6, None));
    }

    #[test]
    fn a_complete_stop_cuts_the_text() {
        assert_eq!(scan("hello STOP and more", &stops(&["STOP"])), (6, Some(6)));
        assert_eq!(scan("a\n\nUser:", &stops(&["User:", "\n\n"])), (1, Some(1)));
    }

    #[test]
    fn multibyte_prefixes_are_held_on_character_boundaries() {
        assert_eq!(scan("x é", &stops(&["éa"])), (2, None));
    }
}
