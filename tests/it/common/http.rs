//! The request side of the scripted HTTP servers the remote tests stand up on 127.0.0.1.

use std::io::{BufRead, BufReader, Read};
use std::net::TcpStream;

/// One request read off `conn`: its head's lines (the request line first, each with its CRLF)
/// and its body (by `Content-Length`); `None` when the client went away.
pub fn request(conn: &TcpStream) -> Option<(Vec<String>, String)> {
    let mut reader = BufReader::new(conn.try_clone().ok()?);
    let mut head = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if line == "\r\n" {
            break;
        }
        head.push(line);
    }
    let len: usize = head
        .iter()
        .find_map(|h| {
            h.to_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().to_string())
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    reader.read_exact(&mut body).ok()?;
    Some((head, String::from_utf8_lossy(&body).into_owned()))
}
