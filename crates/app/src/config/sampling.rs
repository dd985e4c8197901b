//! The sampling settings, each written once: its key, the values it allows, Gemma's default and
//! the step the settings popup (F4) moves it by ([`Knob`]); and which layer wins for each: a
//! tab's own override (F4, a preset) > a command-line flag > a `GEMMA_CHAT_*` environment
//! variable > the config file > the model's `generation_config.json` > Gemma's defaults
//! ([`resolve`]). The config file's check, the clap parsers, F4 and presets all read these.

pub use gemma_protocol::SamplingLayer;
use gemma_protocol::SamplingParams;

/// One numeric setting: what it allows, its default and F4's step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Knob {
    /// The key in `[sampling]` and presets.
    pub key: &'static str,
    /// The lowest value allowed (excluded when `min_open`).
    pub min: f64,
    /// Whether `min` itself is refused (top_p must be above 0).
    pub min_open: bool,
    /// The highest value allowed.
    pub max: f64,
    /// Gemma's default, where no layer sets it.
    pub default: f64,
    /// How far one press in F4 moves it.
    pub step: f64,
    /// Whole numbers only.
    pub integer: bool,
    /// The rule as users read it.
    pub rule: &'static str,
}

/// 0 to 2; 0 is greedy.
pub const TEMPERATURE: Knob = Knob {
    key: "temperature",
    min: 0.0,
    min_open: false,
    max: 2.0,
    default: 1.0,
    step: 0.1,
    integer: false,
    rule: "0 to 2 (0 is greedy)",
};

/// 0 or more; 0 is off.
pub const TOP_K: Knob = Knob {
    key: "top_k",
    min: 0.0,
    min_open: false,
    max: u32::MAX as f64,
    default: 64.0,
    step: 8.0,
    integer: true,
    rule: "0 or more (0 is off)",
};

/// In (0, 1].
pub const TOP_P: Knob = Knob {
    key: "top_p",
    min: 0.0,
    min_open: true,
    max: 1.0,
    default: 0.95,
    step: 0.05,
    integer: false,
    rule: "in (0, 1]",
};

/// In [0, 1].
pub const MIN_P: Knob = Knob {
    key: "min_p",
    min: 0.0,
    min_open: false,
    max: 1.0,
    default: 0.0,
    step: 0.05,
    integer: false,
    rule: "in [0, 1]",
};

/// Any u64; 0 is a random seed.
pub const SEED: Knob = Knob {
    key: "seed",
    min: 0.0,
    min_open: false,
    max: u64::MAX as f64,
    default: 0.0,
    step: 1.0,
    integer: true,
    rule: "0 or more (0 is a random seed)",
};

/// 1 or more tokens per answer.
pub const MAX_NEW_TOKENS: Knob = Knob {
    key: "max_new_tokens",
    min: 1.0,
    min_open: false,
    max: u32::MAX as f64,
    default: 1024.0,
    step: 256.0,
    integer: true,
    rule: "1 or more",
};

impl Knob {
    /// Whether `v` is allowed.
    pub fn allows(&self, v: f64) -> bool {
        let above = if self.min_open {
            v > self.min
        } else {
            v >= self.min
        };
        above && v <= self.max && (!self.integer || v.fract() == 0.0)
    }

    /// `v`, or why it is refused ("3 is out of range: allowed 0 to 2 (0 is greedy)").
    pub fn check(&self, v: f64) -> Result<f64, String> {
        if self.allows(v) {
            Ok(v)
        } else {
            Err(format!("{v} is out of range: allowed {}", self.rule))
        }
    }

    /// Reads a command-line value as a float in range (clap's `value_parser`).
    pub fn parse_f32(self) -> impl Fn(&str) -> Result<f32, String> + Clone + Send + Sync {
        move |s: &str| {
            let v: f64 = s
                .trim()
                .parse()
                .map_err(|_| format!("`{s}` is not a number"))?;
            self.check(v).map(|v| v as f32)
        }
    }

    /// Reads a command-line value as a whole number in range (clap's `value_parser`).
    pub fn parse_u64(self) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync {
        move |s: &str| {
            let v: u64 = s
                .trim()
                .parse()
                .map_err(|_| format!("`{s}` is not a whole number of 0 or more"))?;
            self.check(v as f64).map(|_| v)
        }
    }

    /// `v` moved into range for the settings popup, rounded to hundredths (an open end stays one
    /// step inside).
    pub fn clamp(&self, v: f64) -> f64 {
        let lo = if self.min_open {
            self.min + self.step
        } else {
            self.min
        };
        let v = v.clamp(lo, self.max);
        if self.integer {
            v.round()
        } else {
            (v * 100.0).round() / 100.0
        }
    }
}

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

/// Resolves `layers`, highest precedence first, over Gemma's defaults. A seed of 0 (or none)
/// becomes `random_seed`.
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
    let (temperature, st) = pick(layers, |l| l.temperature, TEMPERATURE.default as f32);
    let (top_k, sk) = pick(layers, |l| l.top_k, TOP_K.default as usize);
    let (top_p, sp) = pick(layers, |l| l.top_p, TOP_P.default as f32);
    let (min_p, sm) = pick(layers, |l| l.min_p, MIN_P.default as f32);
    let (seed, ss) = pick(layers, |l| l.seed, SEED.default as u64);
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

    #[test]
    fn each_knob_refuses_what_its_rule_says() {
        assert!(TEMPERATURE.allows(0.0) && TEMPERATURE.allows(2.0) && !TEMPERATURE.allows(2.01));
        assert!(!TOP_P.allows(0.0) && TOP_P.allows(1e-6) && TOP_P.allows(1.0));
        assert!(MIN_P.allows(0.0) && !MIN_P.allows(-0.1));
        assert!(TOP_K.allows(0.0) && !TOP_K.allows(1.5) && !TOP_K.allows(-1.0));
        assert!(!MAX_NEW_TOKENS.allows(0.0) && MAX_NEW_TOKENS.allows(1.0));
        let e = TEMPERATURE.check(3.0).expect_err("out of range");
        assert!(e.contains("0 to 2"), "{e}");
        assert_eq!(TEMPERATURE.parse_f32()("1.5"), Ok(1.5));
        assert!(TOP_P.parse_f32()("0").is_err());
        assert!(SEED.parse_u64()("-1").is_err());
        assert_eq!(SEED.parse_u64()("7"), Ok(7));
        // F4 keeps an open end one step inside, and rounds.
        assert_eq!(TOP_P.clamp(0.0), 0.05);
        assert_eq!(TEMPERATURE.clamp(2.345), 2.0);
        assert_eq!(TOP_K.clamp(-8.0), 0.0);
    }
}
