//! Which value wins for each sampling setting, and where it came from: a tab's own override >
//! a command-line flag > a `GEMMA_CHAT_*` environment variable > the config file > the model's
//! `generation_config.json` > Gemma's defaults (temperature 1.0, top_k 64, top_p 0.95).

pub use crate::sampling::SamplingLayer;
use crate::sampling::SamplingParams;

/// Where a value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Source {
    /// Gemma's defaults.
    Builtin,
    /// The checkpoint's `generation_config.json`.
    Model,
    /// The config file.
    File,
    /// An environment variable.
    Env,
    /// A command-line flag.
    Flag,
    /// The tab's own setting.
    Tab,
}

impl Source {
    /// How the UI names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Builtin => "built-in",
            Source::Model => "model",
            Source::File => "file",
            Source::Env => "env",
            Source::Flag => "flag",
            Source::Tab => "tab",
        }
    }
}

/// The resolved values and the source of each.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    /// The values.
    pub params: SamplingParams,
    /// Sources of temperature, top_k, top_p, min_p, seed.
    pub sources: [Source; 5],
}

/// Resolves `layers`, highest precedence first, over Gemma's defaults. A seed of 0 becomes
/// `random_seed`.
pub fn resolve(layers: &[(Source, SamplingLayer)], random_seed: u64) -> Resolved {
    fn pick<T: Copy>(
        layers: &[(Source, SamplingLayer)],
        get: impl Fn(&SamplingLayer) -> Option<T>,
        default: T,
    ) -> (T, Source) {
        layers
            .iter()
            .find_map(|(s, l)| get(l).map(|v| (v, *s)))
            .unwrap_or((default, Source::Builtin))
    }
    let (temperature, st) = pick(layers, |l| l.temperature, 1.0);
    let (top_k, sk) = pick(layers, |l| l.top_k, 64);
    let (top_p, sp) = pick(layers, |l| l.top_p, 0.95);
    let (min_p, sm) = pick(layers, |l| l.min_p, 0.0);
    let (seed, ss) = pick(layers, |l| l.seed, 0);
    Resolved {
        params: SamplingParams {
            temperature,
            top_k,
            top_p,
            min_p,
            seed: if seed == 0 { random_seed } else { seed },
        },
        sources: [st, sk, sp, sm, ss],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(v: f32) -> SamplingLayer {
        SamplingLayer {
            temperature: Some(v),
            ..SamplingLayer::default()
        }
    }

    #[test]
    fn the_highest_layer_that_sets_a_value_wins() {
        let all = [
            (Source::Tab, SamplingLayer::default()),
            (Source::Flag, t(0.1)),
            (Source::Env, t(0.2)),
            (Source::File, t(0.3)),
            (Source::Model, t(0.4)),
        ];
        // Dropping the layers one by one from the top: flag > env > file > model > built-in.
        for (k, want) in [0.1, 0.2, 0.3, 0.4, 1.0].into_iter().enumerate() {
            let r = resolve(&all[k + 1..], 9);
            assert_eq!(
                r.params.temperature,
                want,
                "without the top {} layers",
                k + 1
            );
        }
        let r = resolve(&[], 9);
        assert_eq!(
            (r.params.top_k, r.params.top_p, r.params.seed),
            (64, 0.95, 9)
        );
        assert_eq!(r.sources, [Source::Builtin; 5]);
        let r = resolve(&[(Source::Tab, t(0.7)), (Source::File, t(0.3))], 9);
        assert_eq!((r.params.temperature, r.sources[0]), (0.7, Source::Tab));
    }
}
