//! What a key can do: the [`Action`]s, their names in the config's `[ui.keys]` and the help text
//! the help overlay shows for each.

/// A user action, bound to keys in the config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Action {
    /// Quit the app.
    Quit,
    /// Stop the answer; twice on an idle app, quit.
    Interrupt,
    /// Open a tab.
    NewTab,
    /// Close the tab (asks while it generates).
    CloseTab,
    /// Next tab.
    NextTab,
    /// Previous tab.
    PrevTab,
    /// Jump to tab 1..9.
    GotoTab(u8),
    /// Rename the tab.
    RenameTab,
    /// Send the input.
    Send,
    /// Insert a newline in the input.
    Newline,
    /// Stop the answer.
    Stop,
    /// Answer the last message again.
    Regenerate,
    /// Copy the last answer (OSC 52).
    CopyAnswer,
    /// Expand or collapse thoughts.
    ToggleThoughts,
    /// Gemma 4 thinking on (medium) or off for the tab.
    ToggleThinking,
    /// The tab's next thinking level: off, low, medium, high, unbounded.
    CycleThinking,
    /// Start recording from the microphone, or stop and attach the recording.
    Record,
    /// Show the keys.
    Help,
    /// The tab's sampling settings.
    Settings,
    /// Search every chat.
    Search,
    /// Select the message above (to edit it, branch from it or switch its versions).
    SelectPrev,
    /// Select the message below.
    SelectNext,
    /// The previous version of the selected turn (else of the last turn that has several).
    PrevVersion,
    /// The next version of the selected turn (else of the last turn that has several).
    NextVersion,
    /// Copy the conversation up to the selected message (else all of it) into a new tab.
    BranchTab,
    /// Scroll a page up.
    ScrollUp,
    /// Scroll a page down.
    ScrollDown,
    /// Scroll half a page up.
    HalfPageUp,
    /// Scroll half a page down.
    HalfPageDown,
    /// Scroll to the start.
    ScrollTop,
    /// Scroll to the end and follow the output.
    ScrollBottom,
}

const SIMPLE: [(Action, &str, &str); 30] = [
    (Action::Quit, "quit", "quit"),
    (
        Action::Interrupt,
        "interrupt",
        "stop the answer; twice when idle: quit",
    ),
    (Action::NewTab, "new-tab", "new tab"),
    (Action::CloseTab, "close-tab", "close tab"),
    (Action::NextTab, "next-tab", "next tab"),
    (Action::PrevTab, "prev-tab", "previous tab"),
    (Action::RenameTab, "rename-tab", "rename tab"),
    (Action::Send, "send", "send the message"),
    (Action::Newline, "newline", "new line in the input"),
    (Action::Stop, "stop", "stop the answer"),
    (
        Action::Regenerate,
        "regenerate",
        "answer the last message again (a new version)",
    ),
    (Action::CopyAnswer, "copy-answer", "copy the last answer"),
    (
        Action::ToggleThoughts,
        "toggle-thoughts",
        "show or hide thoughts",
    ),
    (
        Action::ToggleThinking,
        "toggle-thinking",
        "thinking on (medium) or off (Gemma 4)",
    ),
    (
        Action::CycleThinking,
        "cycle-thinking",
        "thinking: off, low, medium, high, unbounded (Gemma 4)",
    ),
    (
        Action::Record,
        "record",
        "push-to-talk: record, again to stop and attach",
    ),
    (Action::Help, "help", "this help"),
    (Action::Settings, "settings", "this tab's sampling settings"),
    (Action::Search, "search", "search every chat"),
    (
        Action::SelectPrev,
        "select-prev",
        "select a message: Enter edits it, ←/→ versions, b new tab",
    ),
    (
        Action::SelectNext,
        "select-next",
        "select the message below",
    ),
    (
        Action::PrevVersion,
        "prev-version",
        "previous version of the turn ‹n/m›",
    ),
    (
        Action::NextVersion,
        "next-version",
        "next version of the turn ‹n/m›",
    ),
    (
        Action::BranchTab,
        "branch-tab",
        "copy the conversation up to the selection into a new tab",
    ),
    (Action::ScrollUp, "scroll-up", "scroll up a page"),
    (Action::ScrollDown, "scroll-down", "scroll down a page"),
    (Action::HalfPageUp, "half-page-up", "scroll up half a page"),
    (
        Action::HalfPageDown,
        "half-page-down",
        "scroll down half a page",
    ),
    (Action::ScrollTop, "scroll-top", "go to the start"),
    (
        Action::ScrollBottom,
        "scroll-bottom",
        "go to the end, follow output",
    ),
];

impl Action {
    /// The action a config name stands for.
    pub fn from_name(name: &str) -> Option<Self> {
        if let Some(n) = name.strip_prefix("goto-tab-") {
            return n
                .parse::<u8>()
                .ok()
                .filter(|n| (1..=9).contains(n))
                .map(Action::GotoTab);
        }
        SIMPLE
            .iter()
            .find(|(_, n, _)| *n == name)
            .map(|(a, _, _)| *a)
    }

    /// What the help overlay says it does.
    pub fn describe(self) -> String {
        match self {
            Action::GotoTab(n) => format!("go to tab {n}"),
            a => SIMPLE
                .iter()
                .find(|(x, _, _)| *x == a)
                .map_or_else(String::new, |(_, _, d)| d.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for (a, name, _) in SIMPLE {
            assert_eq!(Action::from_name(name), Some(a));
            assert!(!a.describe().is_empty());
        }
        assert_eq!(Action::from_name("goto-tab-3"), Some(Action::GotoTab(3)));
        assert_eq!(Action::from_name("goto-tab-0"), None);
        assert_eq!(Action::from_name("nope"), None);
    }
}
