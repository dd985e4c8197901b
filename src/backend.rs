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
        "wgpu" | "cuda" => Err(Error::Backend(format!(
            "this build has no `{name}` backend: rebuild with `cargo build --release --features {name}`"
        ))),
        other => Err(Error::Backend(format!(
            "unknown backend `{other}`: choose one of {}",
            BACKENDS.join(", ")
        ))),
    }
}

#[cfg(feature = "flex")]
fn cpu() -> Result<Device> {
    Ok(Device::flex())
}

#[cfg(not(feature = "flex"))]
fn cpu() -> Result<Device> {
    Err(Error::Backend(
        "this build has no CPU backend: rebuild with `--features flex`".into(),
    ))
}
