//! `model.dtype`, `model.backend` and `model.gpu_weights`: the compute dtype, the device and how
//! quantized weights sit on a GPU, as the file and the flags write them.

use serde::Deserialize;

/// `model.dtype`: the compute dtype.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// f32 on the CPU; on a GPU bf16 where it computes in bf16, else f16.
    Auto,
    /// f32.
    F32,
    /// f16.
    F16,
    /// bf16.
    Bf16,
}

impl Dtype {
    /// The name as the file writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Dtype::Auto => "auto",
            Dtype::F32 => "f32",
            Dtype::F16 => "f16",
            Dtype::Bf16 => "bf16",
        }
    }
}

/// `model.backend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// burn-flex on the CPU.
    Cpu,
    /// wgpu (Vulkan, Metal, DX12).
    Wgpu,
    /// CUDA.
    Cuda,
}

impl Backend {
    /// The name as the file and `--backend` write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Cpu => "cpu",
            Backend::Wgpu => "wgpu",
            Backend::Cuda => "cuda",
        }
    }
}
