//! Server-sent event framing, linear in its input and bounded: bytes are pushed as they arrive,
//! each byte is looked at once, and what an event's `data` field says comes out as one string
//! per event. A line longer than the limit, or data that is not UTF-8, is an error that says so
//! (and never "connection lost"). Only `data` matters to the chat API: comments (`: ping`),
//! `event`, `id` and `retry` fields are read past.

/// A stream that breaks the framing's bounds or encoding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// One line (or one event's data) over the limit.
    #[error("it sent an event line over {limit} bytes; the stream was cut off there")]
    LineTooLong {
        /// The limit, in bytes.
        limit: usize,
    },
    /// An event's data is not UTF-8.
    #[error("it sent an event whose data is not UTF-8 text (at byte {at} of the event)")]
    NotUtf8 {
        /// Where the first bad byte is.
        at: usize,
    },
}

/// Frames events from pushed bytes.
#[derive(Debug)]
pub struct Framer {
    line: Vec<u8>,
    data: Vec<u8>,
    has_data: bool,
    after_cr: bool,
    limit: usize,
}

impl Framer {
    /// A framer whose lines, and whose events' data, are at most `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Self {
            line: Vec::new(),
            data: Vec::new(),
            has_data: false,
            after_cr: false,
            limit,
        }
    }

    /// Takes `bytes`; the data of every event they complete, in order, and the error that
    /// stopped them, if one did (the events before it stand).
    pub fn push(&mut self, bytes: &[u8]) -> (Vec<String>, Option<SseError>) {
        let mut out = Vec::new();
        match self.frame(bytes, &mut out) {
            Ok(()) => (out, None),
            Err(e) => (out, Some(e)),
        }
    }

    fn frame(&mut self, bytes: &[u8], out: &mut Vec<String>) -> Result<(), SseError> {
        let mut rest = bytes;
        while !rest.is_empty() {
            // A line ends at CR, LF or CRLF: the LF of a CRLF split across pushes is skipped.
            if self.after_cr && rest[0] == b'\n' {
                rest = &rest[1..];
                self.after_cr = false;
                continue;
            }
            self.after_cr = false;
            match rest.iter().position(|&b| b == b'\n' || b == b'\r') {
                Some(end) => {
                    self.extend(&rest[..end])?;
                    self.after_cr = rest[end] == b'\r';
                    rest = &rest[end + 1..];
                    if let Some(event) = self.end_line()? {
                        out.push(event);
                    }
                }
                None => {
                    self.extend(rest)?;
                    rest = &[];
                }
            }
        }
        Ok(())
    }

    /// What is left when the stream ends: the last event, if its blank line never came.
    pub fn finish(&mut self) -> Result<Option<String>, SseError> {
        if !self.line.is_empty() {
            self.end_line()?;
        }
        self.dispatch()
    }

    fn extend(&mut self, bytes: &[u8]) -> Result<(), SseError> {
        if self.line.len() + bytes.len() > self.limit {
            return Err(SseError::LineTooLong { limit: self.limit });
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    /// One whole line: a blank one ends the event.
    fn end_line(&mut self) -> Result<Option<String>, SseError> {
        let line = std::mem::take(&mut self.line);
        if line.is_empty() {
            return self.dispatch();
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(0) => return Ok(None),
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (&line[..], &[][..]),
        };
        if field == b"data" {
            if self.data.len() + value.len() + 1 > self.limit {
                return Err(SseError::LineTooLong { limit: self.limit });
            }
            if self.has_data {
                self.data.push(b'\n');
            }
            self.data.extend_from_slice(value);
            self.has_data = true;
        }
        self.line = line;
        self.line.clear();
        Ok(None)
    }

    fn dispatch(&mut self) -> Result<Option<String>, SseError> {
        if !std::mem::take(&mut self.has_data) {
            return Ok(None);
        }
        let data = std::mem::take(&mut self.data);
        String::from_utf8(data)
            .map(Some)
            .map_err(|e| SseError::NotUtf8 {
                at: e.utf8_error().valid_up_to(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(f: &mut Framer, parts: &[&[u8]]) -> Vec<String> {
        let mut out = Vec::new();
        for p in parts {
            let (events, error) = f.push(p);
            assert_eq!(error, None);
            out.extend(events);
        }
        out
    }

    #[test]
    fn events_are_framed_however_the_bytes_are_split() {
        let stream =
            b": ping\r\ndata: {\"a\":1}\r\n\r\nevent: x\ndata:two\ndata: lines\n\ndata: [DONE]\r\r";
        let want = vec!["{\"a\":1}", "two\nlines", "[DONE]"];
        assert_eq!(all(&mut Framer::new(1 << 20), &[stream]), want);
        for cut in 0..stream.len() {
            let (a, b) = stream.split_at(cut);
            assert_eq!(
                all(&mut Framer::new(1 << 20), &[a, b]),
                want,
                "cut at {cut}"
            );
        }
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(all(&mut Framer::new(1 << 20), &bytes), want);
    }

    #[test]
    fn an_unterminated_last_event_is_kept_at_the_end() {
        let mut f = Framer::new(100);
        assert_eq!(f.push(b"data: last"), (vec![], None));
        assert_eq!(f.finish().expect("utf-8").as_deref(), Some("last"));
        assert_eq!(f.finish().expect("utf-8"), None);
    }

    #[test]
    fn a_long_line_is_refused_without_being_kept() {
        let mut f = Framer::new(64);
        let chunk = [b'x'; 40];
        assert_eq!(f.push(b"data: "), (vec![], None));
        assert_eq!(f.push(&chunk), (vec![], None));
        let too_long = Some(SseError::LineTooLong { limit: 64 });
        assert_eq!(f.push(&chunk), (vec![], too_long.clone()));
        // Many data lines that add up over the limit are refused too.
        let mut f = Framer::new(64);
        let line = b"data: 0123456789012345678901234567890123456789\n";
        assert_eq!(f.push(line), (vec![], None));
        assert_eq!(f.push(line), (vec![], too_long));
    }

    #[test]
    fn bytes_that_are_not_utf8_are_named() {
        // The event before the bad one stands.
        let mut f = Framer::new(64);
        assert_eq!(
            f.push(b"data: ok\n\ndata: ab\xff\xfe\n\n"),
            (vec!["ok".to_string()], Some(SseError::NotUtf8 { at: 2 }))
        );
    }

    #[test]
    fn a_long_line_in_many_pieces_is_one_event() {
        // 8 MiB in 4 KiB pieces (each push scans only its own bytes: no rescanning of the line).
        let mut f = Framer::new(16 << 20);
        f.push(b"data: ");
        let piece = vec![b'a'; 4096];
        for _ in 0..2048 {
            assert_eq!(f.push(&piece), (vec![], None));
        }
        assert_eq!(f.push(b"\n\n").0[0].len(), 8 << 20);
    }
}
