//! The thinking level ([`Thinking`]): off, a named budget (low, medium, high), unbounded or a
//! number of thought tokens per turn, as `[model] thinking`, a preset's `thinking`, `/think`,
//! F3, `--thinking` and the chat file write it; and the named levels' budgets ([`Budgets`],
//! `[model] thinking_budgets`). The old `true`/`false` still read: medium and off.

use serde::{Deserialize, Deserializer};

/// How much a tab thinks per turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Thinking {
    /// No thought.
    #[default]
    Off,
    /// [`Budgets::low`] thought tokens.
    Low,
    /// [`Budgets::medium`] thought tokens.
    Medium,
    /// [`Budgets::high`] thought tokens.
    High,
    /// No limit.
    Unbounded,
    /// This many thought tokens.
    Tokens(usize),
}

/// Most thought tokens per turn a number may say (a million: far past any context).
pub const MAX_TOKENS: usize = 1 << 20;

/// The named levels' budgets, in thought tokens per turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budgets {
    /// `low`.
    pub low: usize,
    /// `medium`.
    pub medium: usize,
    /// `high`.
    pub high: usize,
}

impl Default for Budgets {
    fn default() -> Self {
        Self {
            low: 512,
            medium: 2048,
            high: 8192,
        }
    }
}

impl Thinking {
    /// The levels F3 steps through, in order.
    const CYCLE: [Thinking; 5] = [
        Thinking::Off,
        Thinking::Low,
        Thinking::Medium,
        Thinking::High,
        Thinking::Unbounded,
    ];

    /// Reads `off`, `low`, `medium`, `high`, `unbounded`, `on` (medium) or a number of tokens
    /// (0 is off); what to say otherwise.
    pub fn parse(text: &str) -> Result<Self, String> {
        let t = text.trim().to_ascii_lowercase();
        Ok(match t.as_str() {
            "off" | "false" => Thinking::Off,
            "low" => Thinking::Low,
            "medium" | "on" | "true" => Thinking::Medium,
            "high" => Thinking::High,
            "unbounded" => Thinking::Unbounded,
            n => match n.replace(['_', ','], "").parse::<usize>() {
                Ok(n) => Self::tokens(n)?,
                Err(_) => {
                    return Err(format!(
                        "thinking = {text:?}: use off, low, medium, high, unbounded or a number \
                         of thought tokens"
                    ));
                }
            },
        })
    }

    /// `n` thought tokens (0: off), within [`MAX_TOKENS`].
    fn tokens(n: usize) -> Result<Self, String> {
        match n {
            0 => Ok(Thinking::Off),
            n if n <= MAX_TOKENS => Ok(Thinking::Tokens(n)),
            n => Err(format!(
                "thinking = {n} is out of range: allowed 0 to {MAX_TOKENS} thought tokens"
            )),
        }
    }

    /// Whether the model thinks at all.
    pub fn is_on(self) -> bool {
        self != Thinking::Off
    }

    /// Most thought tokens per turn (`None`: unbounded, or off).
    pub fn budget(self, b: &Budgets) -> Option<usize> {
        match self {
            Thinking::Off | Thinking::Unbounded => None,
            Thinking::Low => Some(b.low),
            Thinking::Medium => Some(b.medium),
            Thinking::High => Some(b.high),
            Thinking::Tokens(n) => Some(n),
        }
    }

    /// The next level F3 gives: off, low, medium, high, unbounded, off; a number goes to the
    /// first named level above it (else unbounded).
    pub fn next(self, b: &Budgets) -> Self {
        match self {
            Thinking::Tokens(n) => [Thinking::Low, Thinking::Medium, Thinking::High]
                .into_iter()
                .find(|l| l.budget(b).is_some_and(|m| m > n))
                .unwrap_or(Thinking::Unbounded),
            l => {
                let i = Self::CYCLE.iter().position(|c| *c == l).unwrap_or(0);
                Self::CYCLE[(i + 1) % Self::CYCLE.len()]
            }
        }
    }

    /// The level as the config writes it (`off`, `low`, …, a number).
    pub fn name(self) -> String {
        match self {
            Thinking::Off => "off".into(),
            Thinking::Low => "low".into(),
            Thinking::Medium => "medium".into(),
            Thinking::High => "high".into(),
            Thinking::Unbounded => "unbounded".into(),
            Thinking::Tokens(n) => n.to_string(),
        }
    }

    /// The level for people: its name and, for a named level, its budget
    /// (`medium, 2,048 tokens`).
    pub fn describe(self, b: &Budgets) -> String {
        match (self, self.budget(b)) {
            (Thinking::Tokens(n), _) => format!("{} tokens", grouped(n)),
            (l, Some(n)) => format!("{}, {} tokens", l.name(), grouped(n)),
            (l, None) => l.name(),
        }
    }
}

/// `n` with a comma every three digits (`1,984`).
pub fn grouped(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl<'de> Deserialize<'de> for Thinking {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        /// `true`/`false` (the old setting), a level's name or a number.
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bool(bool),
            Number(i64),
            Huge(u64),
            Real(f64),
            Text(String),
        }
        let out_of_range = |n: &dyn std::fmt::Display| {
            format!(
                "thinking = {n} is out of range: allowed 0 to {MAX_TOKENS} thought tokens, or \
                 off, low, medium, high, unbounded"
            )
        };
        let level = match Raw::deserialize(d)? {
            Raw::Bool(true) => Ok(Thinking::Medium),
            Raw::Bool(false) => Ok(Thinking::Off),
            Raw::Number(n) if n < 0 => Err(out_of_range(&n)),
            Raw::Number(n) => Thinking::tokens(n as usize),
            Raw::Huge(n) => Err(out_of_range(&n)),
            Raw::Real(x) => Err(format!(
                "thinking = {x} is not a whole number of thought tokens (or off, low, medium, \
                 high, unbounded)"
            )),
            Raw::Text(t) => Thinking::parse(&t),
        };
        level.map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_read_from_names_numbers_and_the_old_switch() {
        for (text, want) in [
            ("off", Thinking::Off),
            ("Low", Thinking::Low),
            ("on", Thinking::Medium),
            ("high", Thinking::High),
            ("unbounded", Thinking::Unbounded),
            ("1,500", Thinking::Tokens(1500)),
            ("0", Thinking::Off),
        ] {
            assert_eq!(Thinking::parse(text), Ok(want), "{text}");
        }
        assert!(Thinking::parse("lots").is_err());
        assert!(Thinking::parse("99999999").is_err());
        #[derive(Deserialize)]
        struct M {
            thinking: Thinking,
        }
        let read = |t: &str| toml::from_str::<M>(t).map(|m| m.thinking);
        assert_eq!(read("thinking = true").ok(), Some(Thinking::Medium));
        assert_eq!(read("thinking = false").ok(), Some(Thinking::Off));
        assert_eq!(read("thinking = 300").ok(), Some(Thinking::Tokens(300)));
        assert_eq!(read("thinking = \"high\"").ok(), Some(Thinking::High));
        let e = read("thinking = \"lots\"")
            .expect_err("refused")
            .to_string();
        assert!(e.contains("unbounded"), "{e}");
        assert!(read("thinking = -3").is_err());
        // Past i64, or not whole: the range, not serde's "did not match any variant" (probe
        // 2026-12-06, F12).
        for t in [
            "thinking = 18446744073709551615",
            "thinking = 2.5",
            "thinking = -3",
        ] {
            let e = read(t).expect_err(t).to_string();
            assert!(
                !e.contains("variant") && e.contains("thinking = "),
                "{t}: {e}"
            );
        }
    }

    #[test]
    fn f3_cycles_and_budgets_follow_the_levels() {
        let b = Budgets::default();
        let mut l = Thinking::Off;
        let mut seen = Vec::new();
        for _ in 0..5 {
            l = l.next(&b);
            seen.push(l);
        }
        assert_eq!(
            seen,
            [
                Thinking::Low,
                Thinking::Medium,
                Thinking::High,
                Thinking::Unbounded,
                Thinking::Off
            ]
        );
        assert_eq!(Thinking::Tokens(1000).next(&b), Thinking::Medium);
        assert_eq!(Thinking::Tokens(9000).next(&b), Thinking::Unbounded);
        assert_eq!(Thinking::Medium.budget(&b), Some(2048));
        assert_eq!(Thinking::Unbounded.budget(&b), None);
        assert_eq!(Thinking::High.budget(&b), Some(8192));
        assert_eq!(Thinking::Medium.describe(&b), "medium, 2,048 tokens");
        assert_eq!(Thinking::Tokens(300).describe(&b), "300 tokens");
    }

    #[test]
    fn the_config_reads_levels_budgets_and_the_old_switch() {
        let read = |text: &str| {
            crate::config::Config::from_layers(Some((std::path::Path::new("c.toml"), text)))
        };
        let builtin = crate::config::Config::builtin().expect("built-in");
        assert_eq!(builtin.model.thinking, Thinking::Off);
        assert_eq!(builtin.model.thinking_budgets, Budgets::default());
        assert_eq!(builtin.model.thinking_message(), None);
        let c =
            read("[model]\nthinking = true\nthinking_budgets = { low = 256 }\n").expect("reads");
        assert_eq!(c.model.thinking, Thinking::Medium);
        let low = Budgets {
            low: 256,
            ..Budgets::default()
        };
        assert_eq!(c.model.thinking_budgets, low);
        let p = read("[presets.deep]\nthinking = \"high\"\n").expect("reads");
        assert_eq!(p.presets["deep"].thinking, Some(Thinking::High));
        let e = read("[model]\nthinking = \"lots\"\n")
            .expect_err("refused")
            .to_string();
        assert!(e.contains("c.toml:2") && e.contains("unbounded"), "{e}");
    }

    #[test]
    fn counts_are_grouped_by_thousands() {
        assert_eq!(grouped(7), "7");
        assert_eq!(grouped(1984), "1,984");
        assert_eq!(grouped(2048), "2,048");
        assert_eq!(grouped(1_234_567), "1,234,567");
    }
}
