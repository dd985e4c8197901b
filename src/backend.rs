//! Compute-device selection: turns a backend name from the config or `--backend` into a burn
//! [`Device`], with an error that names the cargo feature when this build lacks it.

use burn::tensor::Device;

use crate::error::{Error, Result};

/// Backends gemma-chat knows about.
pub const BACKENDS: [&str; 3] = ["cpu", "wgpu", "cuda"];

/// The device for `name` (`cpu`, `wgpu` or `cuda`).
pub fn device(name: &str) -> Result<Device> {
    match name {
        "cpu" | "flex" => cpu(),
        "wgpu" => wgpu(),
        "cuda" => cuda(),
        other => Err(Error::Backend(format!(
            "unknown backend `{other}`: choose one of {}",
            BACKENDS.join(", ")
        ))),
    }
}

/// Whether `device` is the CPU backend, where weights may stay in host memory for the
/// quantized kernels.
pub fn is_host(device: &Device) -> bool {
    cpu().is_ok_and(|cpu| &cpu == device)
}

fn missing(name: &str) -> Error {
    Error::Backend(format!(
        "this build has no `{name}` backend: rebuild with `cargo build --release --features {name}`"
    ))
}

#[cfg(feature = "wgpu")]
fn wgpu() -> Result<Device> {
    Ok(Device::wgpu(Default::default()))
}

#[cfg(not(feature = "wgpu"))]
fn wgpu() -> Result<Device> {
    Err(missing("wgpu"))
}

#[cfg(feature = "cuda")]
fn cuda() -> Result<Device> {
    Ok(Device::cuda(0))
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
