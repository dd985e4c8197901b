//! Compute-device selection and the compute dtype ([`ComputeDtype`]): turns a backend name from
//! the config or `--backend` into a burn [`Device`], with an error that names the cargo feature
//! when this build lacks it.

use burn::tensor::{DType, Device};

use crate::error::{Error, Result};

pub use gemma_protocol::Backend;

/// The device for `name` (`cpu`, `wgpu` or `cuda`; `flex`, burn's name, for the CPU too).
pub fn device(name: &str) -> Result<Device> {
    if name == "flex" {
        return cpu();
    }
    let backend: Backend = name
        .parse()
        .map_err(|e: gemma_protocol::UnknownName| Error::Backend(e.to_string()))?;
    device_of(backend)
}

/// The device of `backend`.
pub fn device_of(backend: Backend) -> Result<Device> {
    match backend {
        Backend::Cpu => cpu(),
        Backend::Wgpu => wgpu(),
        Backend::Cuda => cuda(),
    }
}

/// Whether `device` is the CPU backend, where weights may stay in host memory for the
/// quantized kernels.
pub fn is_host(device: &Device) -> bool {
    cpu().is_ok_and(|cpu| &cpu == device)
}

/// The compute dtype for `device` when the config says `auto`: f32 on the CPU (the quantized
/// kernels take f32 activations, and its f16 and bf16 are slower), bf16 on a GPU that computes
/// in it (f32's range: Gemma's activations can overflow f16), f16 on one that does not (WebGPU).
pub fn preferred_dtype(device: &Device) -> ComputeDtype {
    if is_host(device) {
        ComputeDtype::F32
    } else if device.supports_dtype(DType::BF16) {
        ComputeDtype::BF16
    } else {
        ComputeDtype::F16
    }
}

fn missing(name: &str) -> Error {
    Error::Backend(format!(
        "this build has no `{name}` backend: rebuild with `cargo build --release --features {name}`"
    ))
}

/// The default wgpu adapter, set up once: an adapter that is missing is an error here, not a
/// panic at the first tensor.
#[cfg(feature = "wgpu")]
fn wgpu() -> Result<Device> {
    static DEVICE: std::sync::OnceLock<std::result::Result<Device, String>> =
        std::sync::OnceLock::new();
    DEVICE
        .get_or_init(|| Device::wgpu_options().init().map_err(|e| e.to_string()))
        .clone()
        .map_err(|e| {
            Error::Backend(format!(
                "no wgpu device: wgpu looked for a GPU adapter through the graphics APIs of this \
                 platform (Vulkan, Metal, DX12 or GL) and got: {e}. Install a GPU driver (on \
                 Debian, `mesa-vulkan-drivers` gives a software Vulkan device), pick an adapter \
                 with CUBECL_WGPU_DEFAULT_DEVICE, or use backend = \"cpu\""
            ))
        })
}

#[cfg(not(feature = "wgpu"))]
fn wgpu() -> Result<Device> {
    Err(missing("wgpu"))
}

/// CUDA device 0, once the driver and a device are found: burn's CUDA runtime panics at the
/// first tensor without them, so they are probed first.
#[cfg(feature = "cuda")]
fn cuda() -> Result<Device> {
    static PROBE: std::sync::OnceLock<std::result::Result<(), String>> = std::sync::OnceLock::new();
    PROBE.get_or_init(probe_cuda).clone().map_err(|e| {
        Error::Backend(format!(
            "no CUDA device: {e}. Install the NVIDIA driver (`nvidia-smi` should list the GPU), \
             check CUDA_VISIBLE_DEVICES, or use backend = \"wgpu\" or \"cpu\""
        ))
    })?;
    Ok(Device::cuda(0))
}

/// Loads the CUDA driver library, initializes it and counts the devices.
#[cfg(feature = "cuda")]
#[allow(unsafe_code)]
fn probe_cuda() -> std::result::Result<(), String> {
    use cudarc::driver::{result, sys};
    // SAFETY: only tries to open the driver library by its usual names and drops the handle.
    if !unsafe { sys::is_culib_present() } {
        return Err("the CUDA driver library (libcuda.so) is not on the library path".into());
    }
    result::init().map_err(|e| format!("the CUDA driver did not initialize ({e})"))?;
    match result::device::get_count() {
        Ok(n) if n > 0 => Ok(()),
        Ok(_) => Err("the CUDA driver sees no device".into()),
        Err(e) => Err(format!("the CUDA driver cannot count its devices ({e})")),
    }
}

#[cfg(not(feature = "cuda"))]
fn cuda() -> Result<Device> {
    Err(missing("cuda"))
}

#[cfg(feature = "flex")]
fn cpu() -> Result<Device> {
    Ok(Device::flex())
}

#[cfg(not(feature = "flex"))]
fn cpu() -> Result<Device> {
    Err(missing("flex"))
}

#[cfg(all(test, feature = "flex"))]
mod tests {
    use super::*;

    #[test]
    fn auto_is_f32_on_the_cpu_and_unknown_names_are_listed() {
        let cpu = device("cpu").expect("the CPU backend");
        assert!(is_host(&cpu));
        assert_eq!(preferred_dtype(&cpu), ComputeDtype::F32);
        let err = device("metal").expect_err("unknown").to_string();
        assert!(
            err.contains("unknown backend") && err.contains("cpu, wgpu or cuda"),
            "{err}"
        );
    }
}

/// The dtype the model computes in. Norms, softmax and the router always run in f32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ComputeDtype {
    /// 32-bit floats everywhere: the reference precision.
    #[default]
    F32,
    /// 16-bit floats for weights and activations; f32 for norms and softmax.
    F16,
    /// bfloat16 (f32's range, 8 bits of mantissa) for weights and activations; f32 for norms
    /// and softmax. For GPUs: the CPU backend computes it slowly.
    BF16,
}

impl ComputeDtype {
    /// The dtype `asked` names; `None` for `auto` (the device chooses: [`preferred_dtype`]).
    pub fn of(asked: gemma_protocol::Dtype) -> Option<Self> {
        use gemma_protocol::Dtype;
        match asked {
            Dtype::Auto => None,
            Dtype::F32 => Some(Self::F32),
            Dtype::F16 => Some(Self::F16),
            Dtype::Bf16 => Some(Self::BF16),
        }
    }

    /// The burn dtype.
    pub fn dtype(self) -> DType {
        match self {
            ComputeDtype::F32 => DType::F32,
            ComputeDtype::F16 => DType::F16,
            ComputeDtype::BF16 => DType::BF16,
        }
    }

    /// Its name, as the config and `--dtype` write it.
    pub fn as_str(self) -> &'static str {
        match self {
            ComputeDtype::F32 => "f32",
            ComputeDtype::F16 => "f16",
            ComputeDtype::BF16 => "bf16",
        }
    }
}

impl std::str::FromStr for ComputeDtype {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "f32" | "float32" => Ok(ComputeDtype::F32),
            "f16" | "float16" => Ok(ComputeDtype::F16),
            "bf16" | "bfloat16" => Ok(ComputeDtype::BF16),
            other => Err(format!("unknown dtype `{other}`: use f32, f16 or bf16")),
        }
    }
}

/// How a GGUF's quantized weights sit on a GPU backend (owned by the protocol: the config and
/// the flags name it too).
pub use gemma_protocol::GpuWeights;

/// Asks the allocator to keep large buffers in its heap instead of mapping each one afresh.
/// A prefill chunk allocates and frees megabytes of activations per layer; past glibc's mapping
/// threshold every one was a fresh mapping, faulted in page by page and unmapped again (a tenth
/// of a 512-token prefill's time went to the kernel). With the thresholds raised to 64 MiB the
/// same pages are reused; buffers larger than that (a long history's KV cache) are still mapped.
/// Peak memory is unchanged: freed pages stay resident for the next chunk instead. Call once, at
/// start-up, before the threads allocate. Elsewhere than glibc it does nothing.
#[allow(unsafe_code)]
pub fn reuse_large_buffers() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets two of glibc's tunables; it takes no pointer.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 64 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 128 << 20);
    }
}
