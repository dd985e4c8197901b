//! A stdio server's output as the protocol reads it, a message (a line) at a time, with the two
//! limits rmcp's line transport would otherwise enforce silently: a message over
//! [`MAX_MESSAGE`] bytes is dropped, and one nested deeper than serde_json reads is discarded —
//! either way the request it answered waits for its whole time-out, and a dropped `tools/list`
//! loses the server. Here a `tools/list` answer too deep is made readable, the tools too deep
//! marked so that only they are skipped (`mcp/prune.rs`); any other message over a limit ends
//! the stream at once, and the reason joins the server's messages (through its
//! [`StderrTail`]): the call fails now, saying why.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

use super::MAX_MESSAGE;
use super::prune::prune_tools;
use super::stdio::StderrTail;

/// Deepest nesting of a message: serde_json's own limit (it refuses deeper ones).
pub const MAX_DEPTH: usize = 128;

const TOO_DEEP: &str = "the server sent a message nested deeper than 128 levels, which \
    gemma-chat does not read";

/// `inner`, passed on a whole message at a time, ended at the first message over a limit.
pub struct Guarded<R> {
    inner: R,
    scan: Scan,
    /// The message read so far.
    line: Vec<u8>,
    /// Whether it goes deeper than [`MAX_DEPTH`].
    deep: bool,
    /// Whole messages not yet read by the transport.
    out: VecDeque<u8>,
    tail: Arc<Mutex<StderrTail>>,
    ended: bool,
}

impl<R> Guarded<R> {
    /// Reads `inner`; a refusal is told to `tail`.
    pub fn new(inner: R, tail: Arc<Mutex<StderrTail>>) -> Self {
        Self {
            inner,
            scan: Scan::default(),
            line: Vec::new(),
            deep: false,
            out: VecDeque::new(),
            tail,
            ended: false,
        }
    }

    fn refuse(&mut self, why: &'static str) {
        self.ended = true;
        self.line = Vec::new();
        if let Ok(mut tail) = self.tail.lock() {
            tail.refuse(why);
        }
    }

    /// Takes the bytes read; false once the stream is ended.
    fn take(&mut self, bytes: &[u8]) -> bool {
        for &b in bytes {
            self.line.push(b);
            match self.scan.byte(b) {
                Some(Refusal::TooLong(why)) => {
                    self.refuse(why);
                    return false;
                }
                Some(Refusal::TooDeep) => self.deep = true,
                None => {}
            }
            if b == b'\n' {
                let line = std::mem::take(&mut self.line);
                if std::mem::take(&mut self.deep) {
                    match prune_tools(&line) {
                        Some(pruned) => self.out.extend(pruned),
                        None => {
                            self.refuse(TOO_DEEP);
                            return false;
                        }
                    }
                } else {
                    self.out.extend(line);
                }
            }
        }
        true
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Guarded<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let me = self.get_mut();
        loop {
            if !me.out.is_empty() {
                let n = me.out.len().min(buf.remaining());
                let chunk: Vec<u8> = me.out.drain(..n).collect();
                buf.put_slice(&chunk);
                return Poll::Ready(Ok(()));
            }
            if me.ended {
                return Poll::Ready(Ok(()));
            }
            let mut bytes = [0u8; 8192];
            let mut read = ReadBuf::new(&mut bytes);
            match Pin::new(&mut me.inner).poll_read(cx, &mut read) {
                Poll::Ready(Ok(())) if read.filled().is_empty() => {
                    // The end: a last message without its newline goes as it is.
                    me.ended = true;
                    if !me.deep {
                        let line = std::mem::take(&mut me.line);
                        me.out.extend(line);
                    }
                }
                Poll::Ready(Ok(())) => {
                    let filled = read.filled().to_vec();
                    me.take(&filled);
                }
                other => return other,
            }
        }
    }
}

/// Why a message is refused, or marked.
#[derive(Debug, PartialEq)]
enum Refusal {
    /// Over [`MAX_MESSAGE`]: the stream ends.
    TooLong(&'static str),
    /// Deeper than [`MAX_DEPTH`]: made readable if it can be, else the stream ends.
    TooDeep,
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
    /// Takes one byte; why the message must be refused, when it must (said once for depth).
    fn byte(&mut self, b: u8) -> Option<Refusal> {
        if b == b'\n' {
            *self = Self::default();
            return None;
        }
        self.len += 1;
        if self.len > MAX_MESSAGE {
            return Some(Refusal::TooLong(
                "the server sent a message over 8 MiB, which gemma-chat does not read",
            ));
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
                if self.depth == MAX_DEPTH + 1 {
                    return Some(Refusal::TooDeep);
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

    fn first_refusal(text: &[u8]) -> Option<(usize, Refusal)> {
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
        assert_eq!((at, why), (MAX_DEPTH, Refusal::TooDeep));
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
        assert!(matches!(s.byte(b'a'), Some(Refusal::TooLong(w)) if w.contains("8 MiB")));
    }

    /// What the transport reads through the guard from `sent`, and the refusal told.
    fn through(sent: Vec<u8>) -> (Vec<u8>, Option<&'static str>) {
        use tokio::io::AsyncReadExt;
        let tail = Arc::new(Mutex::new(StderrTail::default()));
        let mut g = Guarded::new(std::io::Cursor::new(sent), Arc::clone(&tail));
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let mut got = Vec::new();
        rt.block_on(g.read_to_end(&mut got)).expect("reads");
        let refused = tail.lock().expect("tail").refused;
        (got, refused)
    }

    #[test]
    fn a_deep_tool_list_keeps_its_other_tools_and_a_deep_answer_ends_the_stream() {
        let schema = |n: usize| {
            format!(
                r#"{{"type":"object","x":{}1{}}}"#,
                "[".repeat(n),
                "]".repeat(n)
            )
        };
        let list = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{{\"tools\":[{{\"name\":\"deep\",\"inputSchema\":{}}},{{\"name\":\"probe\",\"inputSchema\":{}}}]}}}}\n",
            schema(1000),
            schema(2)
        );
        let before = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/x\"}\n";
        let (got, refused) = through(format!("{before}{list}").into_bytes());
        assert_eq!(refused, None);
        let text = String::from_utf8(got).expect("utf-8");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], before.trim_end());
        let v: serde_json::Value = serde_json::from_str(lines[1]).expect("readable now");
        assert_eq!(v["result"]["tools"][1]["name"], "probe");
        assert_eq!(
            v["result"]["tools"][0]["inputSchema"][crate::mcp::TOO_DEEP_KEY],
            true
        );
        // A deep call result: nothing of it is passed on, and the reason is told.
        let deep = format!("{{\"id\":2,\"result\":{}}}\n", "[".repeat(300));
        let (got, refused) = through(format!("{before}{deep}{before}").into_bytes());
        assert_eq!(got, before.as_bytes());
        assert!(refused.expect("refused").contains("nested deeper"));
    }
}
