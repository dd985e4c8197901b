//! `[sessions]` keys for a full context: `context_overflow` (stop, compact or slide),
//! `compact_at` (the share of the context that sets it off) and `compact_prompt` (the request for
//! the summary), read into the protocol's [`Overflow`] that every front end sends its tabs.

use serde::{Deserialize, Deserializer};

use gemma_protocol::{DEFAULT_COMPACT_PROMPT, Overflow, OverflowMode};

use super::SessionsConfig;

/// Reads `context_overflow`: one of the mode names, or the names there are.
pub(super) fn mode<'de, D: Deserializer<'de>>(d: D) -> Result<OverflowMode, D::Error> {
    let name = String::deserialize(d)?;
    OverflowMode::parse(&name).ok_or_else(|| {
        serde::de::Error::custom(format!(
            "\"{name}\" is not a context_overflow: allowed \"stop\", \"compact\" or \"slide\""
        ))
    })
}

/// Reads `compact_at`: a share of the context from 0.1 to 1.0.
pub(super) fn share<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let v = f64::deserialize(d)?;
    if !(0.1..=1.0).contains(&v) {
        return Err(serde::de::Error::custom(format!(
            "{v} is out of range: allowed 0.1 to 1.0 (a share of the context)"
        )));
    }
    Ok(v)
}

impl SessionsConfig {
    /// What tabs do when their context fills up.
    pub fn overflow(&self) -> Overflow {
        let prompt = self.compact_prompt.trim();
        Overflow {
            mode: self.context_overflow,
            at: self.compact_at,
            prompt: if prompt.is_empty() {
                DEFAULT_COMPACT_PROMPT.to_string()
            } else {
                prompt.to_string()
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    #[test]
    fn the_default_compacts_at_nine_tenths_with_the_built_in_request() {
        let o = Config::builtin().expect("valid").sessions.overflow();
        assert_eq!(o.mode, gemma_protocol::OverflowMode::Compact);
        assert_eq!(o.at, 0.9);
        assert_eq!(o.prompt, gemma_protocol::DEFAULT_COMPACT_PROMPT);
    }

    #[test]
    fn bad_values_are_refused_with_the_rule() {
        let load = |text: &str| {
            Config::from_layers(Some((std::path::Path::new("u.toml"), text)))
                .expect_err("invalid")
                .to_string()
        };
        let e = load("[sessions]\ncontext_overflow = \"shrink\"\n");
        assert!(
            e.contains("u.toml:2") && e.contains("\"stop\", \"compact\" or \"slide\""),
            "{e}"
        );
        let e = load("[sessions]\ncompact_at = 1.5\n");
        assert!(e.contains("allowed 0.1 to 1.0"), "{e}");
        let c = Config::from_layers(Some((
            std::path::Path::new("u.toml"),
            "[sessions]\ncontext_overflow = \"slide\"\ncompact_at = 0.75\ncompact_prompt = \" Brief. \"\n",
        )))
        .expect("valid");
        let o = c.sessions.overflow();
        assert_eq!(
            (o.mode, o.at, o.prompt.as_str()),
            (gemma_protocol::OverflowMode::Slide, 0.75, "Brief.")
        );
    }
}
