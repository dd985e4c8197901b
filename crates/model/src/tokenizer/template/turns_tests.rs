//! New turns through the checkpoint's template and the built-in layouts: headers, turns,
//! tools, fallbacks, slow templates.

use super::*;

fn format(family: Builtin, own: Option<&str>) -> ChatFormat {
    let own = own.map(|text| TemplateSource {
        text: text.into(),
        origin: "test.jinja".into(),
    });
    ChatFormat::new(own.as_ref(), family, "<bos>", "<eos>")
}

fn turn(f: &ChatFormat, system: Option<&str>, thinking: bool, continues: bool) -> TurnText {
    let c = Conversation {
        system,
        thinking,
        continues,
        media: &[],
        tools: None,
    };
    let (t, err) = f
        .next_turn(&c, "  Why is the sky blue? \n")
        .expect("renders");
    assert_eq!(err, None);
    t
}

#[test]
fn a_slow_template_is_reported_then_refused() {
    let own = include_str!("../../../../../assets/templates/gemma3.jinja");
    let mut f = format(Builtin::Gemma3, Some(own));
    // Every render counts as slow here (a real one is over a second).
    f.slow_after = std::time::Duration::ZERO;
    let c = Conversation {
        system: None,
        thinking: false,
        continues: false,
        media: &[],
        tools: None,
    };
    for n in 1..SLOW_STRIKES {
        let (_, err) = f.next_turn(&c, "hi").expect("renders");
        assert_eq!(err, None);
        let note = f.take_slow().expect("a note");
        assert!(note.contains(&format!("slow {n} of 3")), "{note}");
        assert_eq!(f.take_slow(), None, "said once");
    }
    let (_, err) = f.next_turn(&c, "hi").expect("renders");
    assert_eq!(err, None, "the slow render's turn is still its own");
    let note = f.take_slow().expect("a note");
    assert!(note.contains("stands in from the next turn"), "{note}");
    let (_, err) = f.next_turn(&c, "hi").expect("renders");
    let err = err.expect("the template is refused now").to_string();
    assert!(err.contains("was slow 3 times"), "{err}");
    assert_eq!(f.take_slow(), None, "it is not rendered again");
}

#[test]
fn gemma4_builtin_turns() {
    let f = format(Builtin::Gemma4, None);
    let t = turn(&f, None, false, false);
    assert_eq!(t.header, "<|turn>user\n");
    assert_eq!(
        t.turn,
        "Why is the sky blue?<turn|>\n<|turn>model\n<|channel>thought\n<channel|>"
    );
    let t = turn(&f, Some(" Be brief. "), true, true);
    assert_eq!(
        t.header,
        "<|turn>system\n<|think|>\nBe brief.<turn|>\n<|turn>user\n"
    );
    assert_eq!(
        t.turn,
        "<turn|>\n<|turn>user\nWhy is the sky blue?<turn|>\n<|turn>model\n"
    );
}

#[test]
fn gemma3_builtin_folds_the_system_prompt_into_the_first_turn() {
    let f = format(Builtin::Gemma3, None);
    let t = turn(&f, Some("Be brief."), false, false);
    assert_eq!(t.header, "<start_of_turn>user\nBe brief.\n\n");
    assert_eq!(
        t.turn,
        "Why is the sky blue?<end_of_turn>\n<start_of_turn>model\n"
    );
    let t = turn(&f, None, false, true);
    assert_eq!(t.header, "<start_of_turn>user\n");
    assert_eq!(
        t.turn,
        "<end_of_turn>\n<start_of_turn>user\nWhy is the sky blue?<end_of_turn>\n<start_of_turn>model\n"
    );
}

#[test]
fn a_failing_template_falls_back_to_the_builtin_layout_with_its_error() {
    let c = Conversation {
        system: None,
        thinking: false,
        continues: false,
        media: &[],
        tools: None,
    };
    for bad in [
        "{{ messages[0].nope.deeper }}",
        "{% if %}",
        "{{ 'no user text' }}",
        // Grows with the conversation: a probe render would pass it, every turn is bounded.
        "{% set ns = namespace(s='') %}{% for m in messages %}{% for i in range(64) %}\
         {% set ns.s = ns.s ~ m.content ~ ns.s %}{% endfor %}{% endfor %}{{ ns.s }}",
    ] {
        let f = format(Builtin::Gemma3, Some(bad));
        let (t, err) = f.next_turn(&c, "hi").expect("the built-in layout renders");
        assert_eq!(t.turn, "hi<end_of_turn>\n<start_of_turn>model\n");
        let err = err.expect("the template's error comes back");
        assert!(err.to_string().contains("test.jinja"), "{err}");
        assert_eq!(err.limit, bad.contains("namespace"), "{err}");
        // A limit refuses the template: the next turn does not run it again.
        let started = std::time::Instant::now();
        let (_, again) = f.next_turn(&c, "hi").expect("renders");
        if err.limit {
            assert_eq!(again.as_ref(), Some(&err));
            assert!(started.elapsed() < std::time::Duration::from_millis(200));
        }
    }
}

#[test]
fn tools_are_declared_in_the_header() {
    let tools = serde_json::json!([{"type": "function", "function": {
        "name": "get_time", "description": "The time.",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}}}}]);
    let declared = "<|tool>declaration:get_time{description:<|\"|>The time.<|\"|>,parameters:\
                    {properties:{zone:{type:<|\"|>STRING<|\"|>}},type:<|\"|>OBJECT<|\"|>}}<tool|>";
    let official =
        include_str!("../../../../../tests/fixtures/templates/official/gemma4-31b-it.jinja");
    for f in [
        format(Builtin::Gemma4, None),
        format(Builtin::Gemma4, Some(official)),
    ] {
        for (system, thinking, continues) in [(None, false, false), (Some("Be brief."), true, true)]
        {
            let c = Conversation {
                system,
                thinking,
                continues,
                media: &[],
                tools: Some(&tools),
            };
            let (t, err) = f.next_turn(&c, "What time is it?").expect("renders");
            assert_eq!(err, None);
            let think = if thinking { "<|think|>\n" } else { "" };
            let system = system.unwrap_or_default();
            assert_eq!(
                t.header,
                format!("<|turn>system\n{think}{system}{declared}<turn|>\n<|turn>user\n")
            );
            // Only the header changes with the tools: the engine rewinds to it.
            let plain = Conversation { tools: None, ..c };
            let (plain, _) = f.next_turn(&plain, "What time is it?").expect("renders");
            assert_ne!(plain.header, t.header);
            assert_eq!(plain.turn, t.turn);
        }
    }
}
