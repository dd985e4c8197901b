//! A stdio server's output as the protocol reads it, with the two limits rmcp's line transport
//! would otherwise enforce silently: a message over [`MAX_MESSAGE`] bytes is dropped, and one
//! nested deeper than serde_json reads is discarded — either way the request it answered waits
//! for its whole time-out, and a dropped `tools/list` loses the server. Here the first such
//! message ends the stream at once, and the reason joins the server's messages (through its
//! [`StderrTail`]): the call fails now, saying why.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

use super::MAX_MESSAGE;
use super::stdio::StderrTail;

/// Deepest nesting of a message: serde_json's own limit (it refuses deeper ones).
pub const MAX_DEPTH: usize = 128;

/// `inner`, ended at the first message over a limit.
pub struct Guarded<R> {
    inner: R,
    scan: Scan,
    tail: Arc<Mutex<StderrTail>>,
    ended: bool,
}

impl<R> Guarded<R> {
    /// Reads `inner`; a refusal is told to `tail`.
    pub fn new(inner: R, tail: Arc<Mutex<StderrTail>>) -> Self {
        Self {
            inner,
            scan: Scan::default(),
            tail,
            ended: false,
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Guarded<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let me = self.get_mut();
        if me.ended {
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        match Pin::new(&mut me.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {}
            other => return other,
        }
        let refused = buf.filled()[before..]
            .iter()
            .enumerate()
            .find_map(|(i, &b)| me.scan.byte(b).map(|why| (i, why)));
        if let Some((i, why)) = refused {
            buf.set_filled(before + i);
            me.ended = true;
            if let Ok(mut tail) = me.tail.lock() {
                tail.refuse(why);
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// Where a message's bytes stand: its length so far, its nesting, inside a string or not.
#[derive(Debug, Default)]
struct Scan {
    len: usize,
    depth: usize,
    in_string: bool,
    escaped: bool,
}

impl Scan {
    /// Takes one byte; why the message must be refused, when it must.
    fn byte(&mut self, b: u8) -> Option<&'static str> {
        if b == b'\n' {
            *self = Self::default();
            return None;
        }
        self.len += 1;
        if self.len > MAX_MESSAGE {
            return Some("the server sent a message over 8 MiB, which gemma-chat does not read");
        }
        if self.in_string {
            match (self.escaped, b) {
                (true, _) => self.escaped = false,
                (false, b'\\') => self.escaped = true,
                (false, b'"') => self.in_string = false,
                _ => {}
            }
            return None;
        }
        match b {
            b'"' => self.in_string = true,
            b'{' | b'[' => {
                self.depth += 1;
                if self.depth > MAX_DEPTH {
                    return Some(
                        "the server sent a message nested deeper than 128 levels, which \
                         gemma-chat does not read",
                    );
                }
            }
            b'}' | b']' => self.depth = self.depth.saturating_sub(1),
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn first_refusal(text: &[u8]) -> Option<(usize, &'static str)> {
        let mut s = Scan::default();
        text.iter()
            .enumerate()
            .find_map(|(i, &b)| s.byte(b).map(|w| (i, w)))
    }

    #[test]
    fn deep_or_huge_messages_are_refused_and_strings_do_not_count() {
        let ok = format!("{}{}\n", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert_eq!(first_refusal(ok.as_bytes()), None);
        let deep = "[".repeat(MAX_DEPTH + 1);
        let (at, why) = first_refusal(deep.as_bytes()).expect("too deep");
        assert_eq!(at, MAX_DEPTH);
        assert!(why.contains("nested deeper"));
        let quoted = format!(
            "{{\"a\": \"{}\\\"{}\"}}\n",
            "[".repeat(500),
            "{".repeat(500)
        );
        assert_eq!(first_refusal(quoted.as_bytes()), None);
        // Each line is a message of its own.
        let lines = format!("{}\n", "[".repeat(100)).repeat(3);
        assert_eq!(first_refusal(lines.as_bytes()), None);
        let mut s = Scan::default();
        assert!((0..MAX_MESSAGE).all(|_| s.byte(b'a').is_none()));
        assert!(s.byte(b'a').expect("too long").contains("8 MiB"));
    }
}
