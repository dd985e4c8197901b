//! The sampling flags ([`SamplingArgs`]): each overrides its `GEMMA_CHAT_*` variable, which
//! overrides the config file, which overrides the model's `generation_config.json`.

use clap::parser::ValueSource;
use clap::{ArgMatches, Args};
use gemma_app::config::Config;
use gemma_app::config::sampling::{MIN_P, SEED, SamplingLayer, Source, TEMPERATURE, TOP_K, TOP_P};

/// Sampling flags; each overrides its environment variable, which overrides the config file,
/// which overrides the model's `generation_config.json`. Ranges: [`gemma_app::config::sampling`].
#[derive(Debug, Args, Clone, Default)]
pub struct SamplingArgs {
    /// Temperature, 0 to 2 (0 is greedy).
    #[arg(long, global = true, env = "GEMMA_CHAT_TEMPERATURE", value_parser = TEMPERATURE.parse_f32())]
    temperature: Option<f32>,
    /// Top-k (0 is off).
    #[arg(long, global = true, env = "GEMMA_CHAT_TOP_K", value_parser = TOP_K.parse_u64())]
    top_k: Option<u64>,
    /// Top-p, in (0, 1].
    #[arg(long, global = true, env = "GEMMA_CHAT_TOP_P", value_parser = TOP_P.parse_f32())]
    top_p: Option<f32>,
    /// Min-p, in [0, 1].
    #[arg(long, global = true, env = "GEMMA_CHAT_MIN_P", value_parser = MIN_P.parse_f32())]
    min_p: Option<f32>,
    /// Seed (unset or 0: a random seed each run).
    #[arg(long, global = true, env = "GEMMA_CHAT_SEED", value_parser = SEED.parse_u64())]
    seed: Option<u64>,
    /// The settings whose value came from the environment rather than the command line.
    #[arg(skip)]
    from_env: Vec<&'static str>,
}

/// Where the value of argument `id` came from, in the innermost subcommand that has it (clap
/// hands global arguments down to subcommands).
fn value_source(m: &ArgMatches, id: &str) -> Option<ValueSource> {
    let inner = m.subcommand().and_then(|(_, sub)| value_source(sub, id));
    inner.or_else(|| m.try_get_raw(id).ok().flatten().and(m.value_source(id)))
}

impl SamplingArgs {
    /// Notes which settings came from their environment variable (`ArgMatches::value_source`).
    pub fn note_sources(&mut self, m: &ArgMatches) {
        self.from_env = ["temperature", "top_k", "top_p", "min_p", "seed"]
            .into_iter()
            .filter(|id| value_source(m, id) == Some(ValueSource::EnvVariable))
            .collect();
    }

    /// The flag, environment and config-file layers, highest first.
    pub fn layers(&self, config: &Config) -> Vec<(Source, SamplingLayer)> {
        let mut layers = self.command_line_layers();
        layers.push((Source::File, config.sampling_layer()));
        layers
    }

    /// The flag and environment layers, highest first.
    pub fn command_line_layers(&self) -> Vec<(Source, SamplingLayer)> {
        let mut flag = SamplingLayer::default();
        let mut env = SamplingLayer::default();
        macro_rules! split {
            ($field:ident, $conv:expr) => {
                if let Some(v) = self.$field {
                    let to = if self.from_env.contains(&stringify!($field)) {
                        &mut env
                    } else {
                        &mut flag
                    };
                    to.$field = Some($conv(v));
                }
            };
        }
        split!(temperature, |v| v);
        split!(top_k, |v: u64| v as usize);
        split!(top_p, |v| v);
        split!(min_p, |v| v);
        split!(seed, |v| v);
        vec![(Source::Flag, flag), (Source::Env, env)]
    }
}
