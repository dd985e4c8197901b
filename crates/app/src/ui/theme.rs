//! Colours and text styles, built from the config's `ui.theme`.

use ratatui::style::{Color, Modifier, Style};

/// Every style the UI uses.
#[derive(Debug, Clone, PartialEq)]
pub struct Theme {
    /// The user's name line.
    pub user: Style,
    /// The model's name line.
    pub model: Style,
    /// Markdown headings.
    pub heading: Style,
    /// Fenced code.
    pub code: Style,
    /// Inline code.
    pub inline_code: Style,
    /// Thoughts.
    pub thought: Style,
    /// Secondary text.
    pub dim: Style,
    /// Errors.
    pub error: Style,
    /// Warnings.
    pub warn: Style,
    /// Highlights.
    pub accent: Style,
    /// The active tab.
    pub tab_active: Style,
    /// The status bar.
    pub status: Style,
}

impl Theme {
    /// The styles of the config's `ui.theme`.
    pub fn named(name: crate::config::Theme) -> Self {
        if name == crate::config::Theme::Light {
            Self::light()
        } else {
            Self::dark()
        }
    }

    /// For dark terminals.
    pub fn dark() -> Self {
        Self {
            user: Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD),
            model: Style::new().fg(Color::Magenta).add_modifier(Modifier::BOLD),
            heading: Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
            code: Style::new().fg(Color::Green),
            inline_code: Style::new().fg(Color::Green),
            thought: Style::new()
                .fg(Color::DarkGray)
                .add_modifier(Modifier::ITALIC),
            dim: Style::new().fg(Color::DarkGray),
            error: Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
            warn: Style::new().fg(Color::Yellow),
            accent: Style::new().fg(Color::Cyan),
            tab_active: Style::new().fg(Color::Black).bg(Color::Cyan),
            status: Style::new().fg(Color::White).bg(Color::DarkGray),
        }
    }

    /// For light terminals.
    pub fn light() -> Self {
        Self {
            user: Style::new().fg(Color::Blue).add_modifier(Modifier::BOLD),
            model: Style::new().fg(Color::Magenta).add_modifier(Modifier::BOLD),
            heading: Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
            code: Style::new().fg(Color::Blue),
            inline_code: Style::new().fg(Color::Blue),
            thought: Style::new().fg(Color::Gray).add_modifier(Modifier::ITALIC),
            dim: Style::new().fg(Color::Gray),
            error: Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
            warn: Style::new().fg(Color::Magenta),
            accent: Style::new().fg(Color::Blue),
            tab_active: Style::new().fg(Color::White).bg(Color::Blue),
            status: Style::new().fg(Color::Black).bg(Color::Gray),
        }
    }
}
