//! The scripted HTTP servers the remote tests stand up on 127.0.0.1: reading a request, and a
//! chat server that answers each request as the test's script says; and a client of one request
//! at a time ([`http`]) for `gemma-chat serve`'s tests.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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

/// A scripted OpenAI-compatible server on 127.0.0.1, until the test ends: `/v1/models` lists
/// `m` (with `max_model_len` 4096), there is no `/props` or `/tokenize`, and each chat request's
/// body is kept, in order, and answered as a stream of the `data` events `respond` gives for it
/// (then `[DONE]`). Returns its port and the bodies.
pub fn chat_server(
    respond: impl Fn(&serde_json::Value) -> Vec<String> + Send + Sync + 'static,
) -> (u16, Arc<Mutex<Vec<serde_json::Value>>>) {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let (kept, respond) = (bodies.clone(), Arc::new(respond));
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let (kept, respond) = (kept.clone(), respond.clone());
            std::thread::spawn(move || chat_answer(conn, &kept, &*respond));
        }
    });
    (port, bodies)
}

fn chat_answer(
    mut conn: TcpStream,
    kept: &Mutex<Vec<serde_json::Value>>,
    respond: &dyn Fn(&serde_json::Value) -> Vec<String>,
) {
    let Some((head, body)) = request(&conn) else {
        return;
    };
    let line = head.first().cloned().unwrap_or_default();
    let json = |status: &str, text: &str| {
        format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
            text.len()
        )
    };
    if line.starts_with("GET /v1/models") {
        let list = r#"{"object":"list","data":[{"id":"m","max_model_len":4096}]}"#;
        let _ = conn.write_all(json("200 OK", list).as_bytes());
        return;
    }
    if !line.starts_with("POST /v1/chat/completions") {
        let _ = conn.write_all(json("404 Not Found", r#"{"error":"no such endpoint"}"#).as_bytes());
        return;
    }
    let body: serde_json::Value = serde_json::from_str(&body).expect("a JSON request");
    let events = respond(&body);
    kept.lock().expect("bodies").push(body);
    let _ = conn.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n",
    );
    for e in events.iter().map(String::as_str).chain(["[DONE]"]) {
        let _ = conn.write_all(format!("data: {e}\n\n").as_bytes());
        let _ = conn.flush();
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// What a [`proxy`] passed on: each request's first line and body (JSON, or `null`), in order.
pub type Passed = Arc<Mutex<Vec<(String, serde_json::Value)>>>;

/// A proxy on 127.0.0.1 in front of the server on 127.0.0.1:`upstream`, until the test ends:
/// each request goes on over a connection of its own (with `Connection: close`), is kept, and
/// its answer comes back byte for byte. Returns its port and what it passed on.
pub fn proxy(upstream: u16) -> (u16, Passed) {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let passed = Passed::default();
    let kept = passed.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let kept = kept.clone();
            std::thread::spawn(move || pass(conn, upstream, &kept));
        }
    });
    (port, passed)
}

fn pass(mut conn: TcpStream, upstream: u16, kept: &Passed) {
    let Some((head, body)) = request(&conn) else {
        return;
    };
    let json = serde_json::from_str(&body).unwrap_or(serde_json::Value::Null);
    let line = head.first().cloned().unwrap_or_default();
    kept.lock()
        .expect("passed")
        .push((line.trim().to_string(), json));
    let Ok(mut up) = TcpStream::connect(("127.0.0.1", upstream)) else {
        return;
    };
    let mut out: String = head
        .iter()
        .filter(|h| !h.to_lowercase().starts_with("connection:"))
        .map(String::as_str)
        .collect();
    out.push_str("Connection: close\r\n\r\n");
    out.push_str(&body);
    if up.write_all(out.as_bytes()).is_ok() {
        let _ = std::io::copy(&mut up, &mut conn);
    }
}

/// One HTTP/1.1 request; the status, the headers (lower-case) and the body, de-chunked.
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[&str],
    body: &[u8],
) -> (u16, String, String) {
    let mut c = TcpStream::connect(addr).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(300)))
        .expect("timeout");
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for h in headers {
        head.push_str(h);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    c.write_all(head.as_bytes()).expect("write");
    c.write_all(body).expect("write");
    let mut raw = Vec::new();
    c.read_to_end(&mut raw).expect("read");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("a response");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status");
    let head = head.to_lowercase();
    let body = if head.contains("transfer-encoding: chunked") {
        dechunk(body)
    } else {
        body.to_string()
    };
    (status, head, body)
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}
