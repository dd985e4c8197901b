//! Settings the config, the command line and the engine all name, owned here once: each a plain
//! enum with the names files and flags write ([`Named`]), read by the app's config and the
//! binary's flags, and used as they are by the model and the engine — no copy per crate, no
//! round trip through strings.

use std::fmt;

/// A setting whose values have names: the config's, the flags' and the messages'.
pub trait Named: Sized + Copy + PartialEq + 'static {
    /// The setting, as messages name it.
    const WHAT: &'static str;
    /// Every value, in the order messages list them.
    const ALL: &'static [Self];
    /// Their names, in the same order.
    const NAMES: &'static [&'static str];

    /// Its name, as files and flags write it.
    fn name(self) -> &'static str;

    /// Every value's name, in order.
    fn names() -> Vec<&'static str> {
        Self::ALL.iter().map(|v| v.name()).collect()
    }

    /// The value named `s` (case and surrounding blanks aside), or what is wrong with it.
    fn parse_name(s: &str) -> Result<Self, UnknownName> {
        Self::ALL
            .iter()
            .copied()
            .find(|v| v.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| UnknownName {
                what: Self::WHAT,
                name: s.to_string(),
                expected: Self::names(),
            })
    }
}

/// A name that is none of a setting's values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownName {
    /// The setting.
    pub what: &'static str,
    /// The name given.
    pub name: String,
    /// The names it takes.
    pub expected: Vec<&'static str>,
}

impl fmt::Display for UnknownName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (last, rest) = self.expected.split_last().unwrap_or((&"", &[]));
        let list = match rest {
            [] => last.to_string(),
            _ => format!("{} or {last}", rest.join(", ")),
        };
        write!(f, "unknown {} {:?}: expected {list}", self.what, self.name)
    }
}

impl std::error::Error for UnknownName {}

/// `FromStr` and `Display` by name for each setting.
macro_rules! by_name {
    ($t:ty) => {
        impl std::str::FromStr for $t {
            type Err = UnknownName;
            fn from_str(s: &str) -> Result<Self, UnknownName> {
                <$t as Named>::parse_name(s)
            }
        }

        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

/// What happens to a turn's thought once the turn is over (`sessions.thinking_policy`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ThinkingPolicy {
    /// Rewind to the start of the model turn and re-prefill the answer without its thought, as
    /// the chat template renders history: the context holds what the model will see next time.
    #[default]
    Strip,
    /// Keep the thought resident: no re-prefill, but the context grows by the thought.
    Keep,
}

impl Named for ThinkingPolicy {
    const WHAT: &'static str = "thinking policy";
    const ALL: &'static [Self] = &[Self::Strip, Self::Keep];
    const NAMES: &'static [&'static str] = &["strip", "keep"];
    fn name(self) -> &'static str {
        match self {
            Self::Strip => "strip",
            Self::Keep => "keep",
        }
    }
}
by_name!(ThinkingPolicy);

/// How a tab's answers are sped up by speculative decoding (`[speculate] kind`, `--speculate`):
/// drafts proposed cheaply and checked by the model in one step, the answer's tokens the same.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Speculate {
    /// Plain decoding, a token per step.
    #[default]
    Off,
    /// Prompt lookup: the continuation of the latest earlier match of the last few ids in the
    /// conversation (its prompt, attachments and answer so far).
    Lookup,
    /// A drafter model beside the target (Gemma 4's assistant drafters).
    Drafter,
    /// The drafter where one is loaded, else prompt lookup.
    Auto,
}

impl Named for Speculate {
    const WHAT: &'static str = "speculation kind";
    const ALL: &'static [Self] = &[Self::Off, Self::Lookup, Self::Drafter, Self::Auto];
    const NAMES: &'static [&'static str] = &["off", "lookup", "drafter", "auto"];
    fn name(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Lookup => "lookup",
            Self::Drafter => "drafter",
            Self::Auto => "auto",
        }
    }
}
by_name!(Speculate);

/// What the host KV cache (the CPU backend in f32) keeps keys and values in (`model.kv_dtype`,
/// `--kv-dtype`). The device cache (GPU, or a CPU model computing in f16/bf16) keeps the
/// compute dtype whatever this says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KvDtype {
    /// 4 bytes a value, exact.
    F32,
    /// 2 bytes a value, relative error at most 2⁻¹¹ (llama.cpp's default).
    #[default]
    F16,
    /// 34 bytes per 32 values: an f16 scale `d = amax / 127` and 32 `round(x / d)` as i8; error
    /// at most `d / 2`. Layers whose head width is not a multiple of 32 keep f16.
    Q8_0,
}

impl Named for KvDtype {
    const WHAT: &'static str = "KV cache type";
    const ALL: &'static [Self] = &[Self::F32, Self::F16, Self::Q8_0];
    const NAMES: &'static [&'static str] = &["f32", "f16", "q8_0"];
    fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::Q8_0 => "q8_0",
        }
    }
}
by_name!(KvDtype);

/// How a GGUF's quantized weights sit on a GPU backend (`model.gpu_weights`, `--gpu-weights`):
/// the CPU backend always reads them in their blocks; float weights are dense either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GpuWeights {
    /// In their blocks: the file's integer codes in burn's block-scaled tensors, each type
    /// exactly (4.5 to 9 bits a weight instead of 16).
    #[default]
    Quantized,
    /// Dequantized at load to the compute dtype (bf16, or f16 on WebGPU): the reference.
    Bf16,
}

impl Named for GpuWeights {
    const WHAT: &'static str = "gpu_weights";
    const ALL: &'static [Self] = &[Self::Quantized, Self::Bf16];
    const NAMES: &'static [&'static str] = &["quantized", "bf16"];
    fn name(self) -> &'static str {
        match self {
            Self::Quantized => "quantized",
            Self::Bf16 => "bf16",
        }
    }
}
by_name!(GpuWeights);

/// The compute dtype a config or a flag asks for (`model.dtype`): `auto` lets the device choose
/// (f32 on the CPU; on a GPU bf16 where it computes in bf16, else f16).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Dtype {
    /// The device's choice.
    #[default]
    Auto,
    /// f32.
    F32,
    /// f16.
    F16,
    /// bf16.
    Bf16,
}

impl Named for Dtype {
    const WHAT: &'static str = "dtype";
    const ALL: &'static [Self] = &[Self::Auto, Self::F32, Self::F16, Self::Bf16];
    const NAMES: &'static [&'static str] = &["auto", "f32", "f16", "bf16"];
    fn name(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::Bf16 => "bf16",
        }
    }
}
by_name!(Dtype);

/// The compute device (`model.backend`, `--backend`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backend {
    /// burn-flex on the CPU.
    #[default]
    Cpu,
    /// wgpu (Vulkan, Metal, DX12).
    Wgpu,
    /// CUDA.
    Cuda,
}

impl Named for Backend {
    const WHAT: &'static str = "backend";
    const ALL: &'static [Self] = &[Self::Cpu, Self::Wgpu, Self::Cuda];
    const NAMES: &'static [&'static str] = &["cpu", "wgpu", "cuda"];
    fn name(self) -> &'static str {
        match self {
            Self::Cpu => "cpu",
            Self::Wgpu => "wgpu",
            Self::Cuda => "cuda",
        }
    }
}
by_name!(Backend);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_an_unknown_one_lists_them() {
        for t in KvDtype::ALL {
            assert_eq!(t.name().parse::<KvDtype>(), Ok(*t));
        }
        assert_eq!(" BF16 ".parse::<GpuWeights>(), Ok(GpuWeights::Bf16));
        assert_eq!(
            "q4_0".parse::<KvDtype>().map_err(|e| e.to_string()),
            Err("unknown KV cache type \"q4_0\": expected f32, f16 or q8_0".into())
        );
        assert_eq!(ThinkingPolicy::Keep.to_string(), "keep");
        assert_eq!(KvDtype::names(), KvDtype::NAMES);
        assert_eq!(GpuWeights::names(), GpuWeights::NAMES);
        assert_eq!(ThinkingPolicy::names(), ThinkingPolicy::NAMES);
        assert_eq!(Dtype::names(), Dtype::NAMES);
        assert_eq!(Speculate::names(), Speculate::NAMES);
        assert_eq!(Backend::names(), Backend::NAMES);
    }
}
