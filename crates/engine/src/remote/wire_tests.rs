use super::*;

#[test]
fn a_turn_resends_the_conversation_with_the_tabs_settings() {
    let history = [Exchange {
        calls: Vec::new(),
        media: Vec::new(),
        user: "Hi".into(),
        answer: " Hello! ".into(),
    }];
    let sampling = SamplingParams {
        temperature: 0.5,
        top_k: 40,
        top_p: 0.9,
        min_p: 0.05,
        seed: 7,
    };
    let stop = ["END".to_string()];
    let r = TurnRequest {
        model: "gemma",
        system: Some("Be brief."),
        history: &history,
        pictures: &[],
        replies: &[],
        tools: None,
        tool_choice: "auto",
        user: ("Why?", &[]),
        sampling: &sampling,
        max_tokens: 64,
        stop: &stop,
        thinking: true,
        thought_budget: (Some(512), Some("Enough.")),
        slot: Some(1),
        kind: ServerKind::LlamaServer,
    };
    let b = body(&r);
    assert_eq!(
        b["messages"],
        json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": " Hello! "},
            {"role": "user", "content": "Why?"},
        ])
    );
    assert_eq!(b["stream"], json!(true));
    assert_eq!(b["stream_options"]["include_usage"], json!(true));
    assert_eq!(b["max_tokens"], json!(64));
    assert_eq!(b["top_k"], json!(40));
    assert_eq!(b["seed"], json!(7));
    assert_eq!(b["stop"], json!(["END"]));
    assert_eq!(b["chat_template_kwargs"]["enable_thinking"], json!(true));
    assert_eq!(b["id_slot"], json!(1));
    assert_eq!(b["cache_prompt"], json!(true));
    // llama-server enforces the thought budget itself.
    assert_eq!(b["reasoning_budget_tokens"], json!(512));
    assert_eq!(b["thinking_budget_tokens"], json!(512));
    assert_eq!(b["reasoning_budget_message"], json!("Enough."));
    let unbounded = body(&TurnRequest {
        thought_budget: (None, None),
        ..r
    });
    assert!(unbounded.get("reasoning_budget_tokens").is_none());
    let off = body(&TurnRequest {
        thinking: false,
        ..r
    });
    assert!(off.get("reasoning_budget_tokens").is_none());
    // Other servers get no llama.cpp extras.
    let b = body(&TurnRequest {
        kind: ServerKind::OpenAi,
        ..r
    });
    assert!(b.get("id_slot").is_none() && b.get("cache_prompt").is_none());
    assert!(b.get("reasoning_budget_tokens").is_none());
    assert!(b.get("tools").is_none() && b.get("tool_choice").is_none());
    // gemma-chat serve takes the budget, and has no slots to pin.
    let g = body(&TurnRequest {
        kind: ServerKind::GemmaChat,
        ..r
    });
    assert!(g.get("id_slot").is_none() && g.get("cache_prompt").is_none());
    assert!(g.get("reasoning_budget_tokens").is_some(), "{g}");
}

#[test]
fn tools_and_earlier_round_trips_go_as_the_chat_api_says() {
    let history = [
        Exchange {
            calls: Vec::new(),
            media: Vec::new(),
            user: "Weather?".into(),
            answer: "Let me look. Sunny.".into(),
        },
        Exchange {
            calls: Vec::new(),
            media: Vec::new(),
            user: "Thanks".into(),
            answer: "You're welcome.".into(),
        },
    ];
    let replies = vec![vec![
        json!({"role": "assistant", "content": "Let me look.", "tool_calls": [{"id": "c"}]}),
        json!({"role": "tool", "tool_call_id": "c", "content": "sunny"}),
        json!({"role": "assistant", "content": " Sunny."}),
    ]];
    let tools = json!([{"type": "function", "function": {"name": "forecast"}}]);
    let b = body(&TurnRequest {
        model: "gemma",
        system: None,
        history: &history,
        pictures: &[],
        replies: &replies,
        tools: Some(&tools),
        tool_choice: "required",
        user: ("More?", &[]),
        sampling: &SamplingParams::greedy(),
        max_tokens: 8,
        stop: &[],
        thinking: false,
        thought_budget: (None, None),
        slot: None,
        kind: ServerKind::OpenAi,
    });
    assert_eq!(b["tools"], tools);
    assert_eq!(b["tool_choice"], "required");
    let roles: Vec<&str> = b["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["role"].as_str().expect("a role"))
        .collect();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "tool",
            "assistant",
            "user",
            "assistant",
            "user"
        ]
    );
    assert_eq!(b["messages"][3]["content"], " Sunny.");
    assert_eq!(b["messages"][5]["content"], "You're welcome.");
}

#[test]
fn tool_call_deltas_and_their_finish_are_read() {
    let p = parse(
        r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[
            {"index":0,"id":"call_1","type":"function","function":{"name":"forecast","arguments":""}}]}}]}"#,
    )
    .expect("parses");
    assert_eq!(
        p,
        [Piece::ToolCall(CallDelta {
            index: Some(0),
            id: Some("call_1".into()),
            name: Some("forecast".into()),
            arguments: Some(String::new()),
        })]
    );
    let p = parse(
        r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\""}}]},
            "finish_reason":"tool_calls"}]}"#,
    )
    .expect("parses");
    assert_eq!(
        p,
        [
            Piece::ToolCall(CallDelta {
                index: Some(0),
                arguments: Some("{\"city\"".into()),
                ..CallDelta::default()
            }),
            Piece::Finish(Finish::ToolCalls)
        ]
    );
    // Calls of the wrong shape are passed over, not an error.
    let p = parse(r#"{"choices":[{"delta":{"tool_calls":42}}]}"#).expect("parses");
    assert!(p.is_empty());
}

#[test]
fn deltas_thoughts_finish_and_usage_are_read() {
    let p =
        parse(r#"{"choices":[{"index":0,"delta":{"reasoning_content":"hmm"}}]}"#).expect("parses");
    assert_eq!(p, [Piece::Thought("hmm".into())]);
    // vLLM ≥ 0.18 says `reasoning`.
    let p = parse(r#"{"choices":[{"delta":{"reasoning":"so"}}]}"#).expect("parses");
    assert_eq!(p, [Piece::Thought("so".into())]);
    let p =
        parse(r#"{"choices":[{"delta":{"content":" a"},"finish_reason":null}]}"#).expect("parses");
    assert_eq!(p, [Piece::Answer(" a".into())]);
    let p = parse(r#"{"choices":[{"delta":{},"finish_reason":"length"}]}"#).expect("parses");
    assert_eq!(p, [Piece::Finish(Finish::Length)]);
    // llama-server's last chunk: usage with cached tokens, and its timings.
    let p = parse(
        r#"{"choices":[],"usage":{"completion_tokens":5,"prompt_tokens":40,"total_tokens":45,
            "prompt_tokens_details":{"cached_tokens":31}},
            "timings":{"cache_n":31,"prompt_n":9,"prompt_per_second":900.5,"predicted_per_second":55.0}}"#,
    )
    .expect("parses");
    assert_eq!(
        p,
        [Piece::Usage(Usage {
            prompt_tokens: 40,
            completion_tokens: 5,
            cached_tokens: Some(31),
            prompt_per_second: Some(900.5),
            predicted_per_second: Some(55.0),
        })]
    );
    // Without prompt_tokens_details, llama-server's timings say what was cached.
    let p = parse(r#"{"usage":{"prompt_tokens":8,"completion_tokens":1},"timings":{"cache_n":3}}"#)
        .expect("parses");
    assert!(matches!(&p[0], Piece::Usage(u) if u.cached_tokens == Some(3)));
    let p = parse(
        r#"{"choices":[],"prompt_progress":{"total":90,"cache":60,"processed":75,"time_ms":3}}"#,
    )
    .expect("parses");
    assert_eq!(
        p,
        [Piece::Progress {
            total: 90,
            cache: 60,
            processed: 75
        }]
    );
    assert_eq!(parse(" [DONE] ").expect("parses"), [Piece::Done]);
}

#[test]
fn an_error_mid_stream_and_nonsense_are_errors() {
    assert_eq!(
        parse(r#"{"error":{"code":500,"message":"slot unavailable","type":"server_error"}}"#),
        Err(WireError::Server("slot unavailable".into()))
    );
    assert_eq!(
        parse(r#"{"error":"bad things"}"#),
        Err(WireError::Server("bad things".into()))
    );
    assert!(matches!(parse("<html>"), Err(WireError::Malformed(_))));
    assert!(matches!(
        parse(r#"{"choices":7}"#),
        Err(WireError::Malformed(_))
    ));
}

#[test]
fn pictures_go_before_their_message_text_as_data_urls() {
    let history = [Exchange {
        calls: Vec::new(),
        media: Vec::new(),
        user: "What is it?".into(),
        answer: "A square.".into(),
    }];
    let urls = vec!["data:image/png;base64,AAAA".to_string()];
    let m = messages(
        None,
        &history,
        std::slice::from_ref(&urls),
        &[],
        Some(("And this?", &urls)),
    );
    let want = json!([
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        {"type": "text", "text": "What is it?"}
    ]);
    assert_eq!(m[0]["content"], want);
    assert_eq!(m[1]["content"], "A square.");
    assert_eq!(m[2]["content"][1]["text"], "And this?");
    // Without pictures, a message is its text.
    let m = messages(None, &history, &[], &[], Some(("And this?", &[])));
    assert_eq!(m[0]["content"], "What is it?");

    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    let url = data_url(&root.join("vision/e2b_style/a.png")).expect("a picture");
    assert!(
        url.starts_with("data:image/png;base64,iVBORw0KGgo"),
        "{url:.40}"
    );
    let err = data_url(&root.join("vision/e2b_style/config.json")).expect_err("not a picture");
    assert!(err.contains("not a PNG"), "{err}");
}

#[test]
fn recordings_go_as_input_audio_parts_of_16_khz_wav() {
    use base64::Engine;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    let clip = root.join("audio/features/chirp_44k_stereo.wav");
    let url = attachment_url(&crate::protocol::Attachment::audio(&clip)).expect("a recording");
    let picture = root.join("vision/e2b_style/a.png");
    let image =
        attachment_url(&crate::protocol::Attachment::image(&picture, 70)).expect("a picture");
    let m = messages(None, &[], &[], &[], Some(("Hear it", &[image, url][..])));
    let parts = &m[0]["content"];
    assert_eq!(parts[0]["type"], "image_url");
    assert_eq!(parts[1]["type"], "input_audio");
    assert_eq!(parts[1]["input_audio"]["format"], "wav");
    assert_eq!(parts[2], json!({"type": "text", "text": "Hear it"}));
    // The data is the recording decoded and resampled, as the local engine hears it.
    let b64 = parts[1]["input_audio"]["data"].as_str().expect("data");
    let wav = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .expect("base64");
    let sent = gemma_media::audio::Clip::decode(&wav, "sent").expect("a WAV file");
    let local = gemma_media::audio::Clip::open(&clip).expect("decodes");
    assert_eq!(sent.samples(), local.samples());
    assert_eq!(sent.source_rate(), 16_000);
    let err = attachment_url(&crate::protocol::Attachment::audio(&picture)).expect_err("no sound");
    assert!(err.contains("a.png"), "{err}");
}
