//! Fenced code blocks in a message's text: how many there are, and the code of one of them (what
//! "copy code block N" copies). The renderer numbers the fences it draws the same way.

/// The code of fence `n` (1-based) in `text`.
pub fn code_block(text: &str, n: usize) -> Option<String> {
    let mut count = 0;
    let mut body: Option<Vec<&str>> = None;
    for line in text.split('\n') {
        if line.trim_start().starts_with("```") {
            match body.take() {
                Some(b) if count == n => return Some(b.join("\n")),
                Some(_) => {}
                None => {
                    count += 1;
                    body = Some(Vec::new());
                }
            }
        } else if let Some(b) = body.as_mut() {
            b.push(line);
        }
    }
    body.filter(|_| count == n).map(|b| b.join("\n"))
}

/// The number of code fences in `text`.
pub fn count_fences(text: &str) -> usize {
    text.split('\n')
        .filter(|l| l.trim_start().starts_with("```"))
        .count()
        .div_ceil(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fences_are_found_by_number() {
        let md = "a\n```\none\n```\nb\n```py\ntwo\nthree\n```";
        assert_eq!(code_block(md, 1).as_deref(), Some("one"));
        assert_eq!(code_block(md, 2).as_deref(), Some("two\nthree"));
        assert_eq!(code_block(md, 3), None);
        assert_eq!(count_fences(md), 2);
        assert_eq!(count_fences("```\nopen"), 1);
    }
}
