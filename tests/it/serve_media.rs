//! `gemma-chat serve` with pictures, on the tiny Gemma 4 vision checkpoint over HTTP: a picture
//! sent as a data: URL is seen as the engine's own picture path sees it and stays resident for
//! the follow-up (and gemma-chat's remote engine sends it the same way), and a picture URL is
//! fetched where the server is told to, a fetch that fails naming its field.

use std::time::Duration;

use gemma_engine::protocol::{Event, TabSettings};
use serde_json::json;

use crate::common::chat::first_after_loading;
use crate::serve::{content, options, post, serve};

#[test]
fn a_picture_sent_as_a_data_url_is_seen_and_kept_warm_and_the_remote_engine_sends_it_too() {
    use base64::Engine as _;
    let dir = crate::vision_chat::vision_fixture();
    let picture = crate::common::chat::root().join("tests/fixtures/vision/e2b_style/a.png");
    let h = crate::common::chat::engine(dir.path());
    let running = serve(h, 1024, (1, 4), None, 1 << 20);
    let addr = running.addr();
    let png =
        base64::engine::general_purpose::STANDARD.encode(std::fs::read(&picture).expect("png"));
    let message = json!({"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{png}"),
                                            "detail": "low"}},
        {"type": "text", "text": "What is it?"},
    ]});
    let (status, v) = post(addr, &json!({"messages": [message], "max_tokens": 6}));
    assert_eq!(status, 200, "{v}");
    // The same answer as the engine's own path to the same picture (70 soft tokens) and text.
    let (prompt, answer) = crate::vision_chat::by_hand(dir.path(), &[&picture], "What is it?");
    assert_eq!(content(&v).trim(), answer.trim());
    assert_eq!(v["usage"]["prompt_tokens"], prompt);
    // A follow-up that sends the picture again: it is resident, not encoded again.
    let follow = json!({"messages": [message, {"role": "assistant", "content": content(&v)},
                                     {"role": "user", "content": "And the colours?"}],
                        "max_tokens": 6});
    let (status, v) = post(addr, &follow);
    assert_eq!(status, 200, "{v}");
    let cached = v["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .expect("cached");
    assert!(cached as usize >= prompt, "{cached} of {prompt}: {v}");
    // gemma-chat's remote engine sends the same picture (as its data: URL) and follows up warm.
    let h = gemma_engine::spawn_remote(crate::common::remote_tools::options(
        format!("http://{addr}"),
        None,
    ));
    assert!(matches!(first_after_loading(&h), Event::Ready { .. }));
    let settings = TabSettings {
        max_new_tokens: 6,
        ..TabSettings::default()
    };
    crate::common::chat::configure(&h, 1, settings);
    let turn = |text: &str, images: Vec<gemma_engine::protocol::Attachment>| {
        h.send(gemma_engine::protocol::Command::Submit {
            tab: 1,
            text: text.into(),
            images,
        });
        loop {
            match h
                .events
                .recv_timeout(Duration::from_secs(120))
                .expect("an event")
            {
                Event::Finished { stats, .. } => return stats,
                Event::Failed { error, .. } => panic!("{error}"),
                _ => {}
            }
        }
    };
    let first = turn(
        "What is it?",
        vec![gemma_engine::protocol::Attachment::image(
            picture.clone(),
            70,
        )],
    );
    assert_eq!(first.generated_tokens, 6);
    let next = turn("And the colours?", Vec::new());
    let held = first.reused_tokens + first.prefilled_tokens;
    assert!(
        next.reused_tokens >= held,
        "{next:?} after a prompt of {held}"
    );
}

#[test]
fn a_picture_url_is_fetched_where_the_server_is_told_to() {
    let dir = crate::vision_chat::vision_fixture();
    let picture = crate::common::chat::root().join("tests/fixtures/vision/e2b_style/a.png");
    let h = crate::common::chat::engine(dir.path());
    let mut o = options(1024, (1, 4), None, 1 << 20);
    // The binary's fetcher reaches public addresses only: here one that serves the picture
    // from memory, and tells what it was asked.
    let bytes = std::fs::read(&picture).expect("png");
    let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = asked.clone();
    o.fetch = Some(gemma_serve::Fetcher(std::sync::Arc::new(
        move |url: String| {
            seen.lock().expect("asked").push(url.clone());
            let bytes = bytes.clone();
            Box::pin(async move {
                match url.ends_with("/a.png") {
                    true => Ok(bytes),
                    false => Err("404 Not Found".to_string()),
                }
            })
        },
    )));
    let running = gemma_serve::bind(o).expect("bound").spawn(h);
    let addr = running.addr();
    let ask = |url: &str| {
        let message = json!({"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": url, "detail": "low"}},
            {"type": "text", "text": "What is it?"}]});
        post(addr, &json!({"messages": [message], "max_tokens": 6}))
    };
    let (status, v) = ask("https://pictures.example/a.png");
    assert_eq!(status, 200, "{v}");
    let (prompt, answer) = crate::vision_chat::by_hand(dir.path(), &[&picture], "What is it?");
    assert_eq!(content(&v).trim(), answer.trim());
    assert_eq!(v["usage"]["prompt_tokens"], prompt);
    let (status, e) = ask("https://pictures.example/gone.png");
    assert_eq!(status, 400, "{e}");
    assert_eq!(e["error"]["param"], "messages[0].content[0].image_url.url");
    assert!(
        e["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("404")),
        "{e}"
    );
    assert_eq!(asked.lock().expect("asked").len(), 2);
}
