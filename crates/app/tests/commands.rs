//! The typed commands come from one table (`app::slash::COMMANDS`): each one dispatches, the
//! help lists each one, and an unknown command names them all.

mod common;

use common::{key, ready_app, type_text};
use crossterm::event::KeyCode;
use gemma_app::app::slash::{COMMANDS, help_lines};

#[test]
fn every_command_dispatches_and_is_listed() {
    let help = help_lines(92).join("\n");
    for c in COMMANDS {
        let mut app = ready_app();
        type_text(&mut app, &format!("/{}", c.name));
        app.update(key(KeyCode::Enter));
        let flash = app.flash.clone().unwrap_or_default();
        assert!(!flash.contains("unknown command"), "/{}: {flash}", c.name);
        assert!(
            help.contains(&c.usage(true)),
            "{} missing from {help}",
            c.name
        );
    }
    assert!(help_lines(92).iter().all(|l| l.chars().count() <= 92));
    let mut app = ready_app();
    type_text(&mut app, "/nope");
    app.update(key(KeyCode::Enter));
    let flash = app.flash.clone().unwrap_or_default();
    for c in COMMANDS {
        assert!(flash.contains(&format!("/{}", c.name)), "{flash}");
    }
    // A command refused keeps what was typed.
    let mut app = ready_app();
    type_text(&mut app, "/think lots");
    app.update(key(KeyCode::Enter));
    assert_eq!(app.tab().expect("tab").editor.text(), "/think lots");
}
