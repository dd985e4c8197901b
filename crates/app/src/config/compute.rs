//! `model.dtype`, `model.backend` and `model.gpu_weights`: the compute dtype, the device and how
//! quantized weights sit on a GPU, as the file and the flags write them.

use serde::Deserialize;

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
