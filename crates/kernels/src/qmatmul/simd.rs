//! The SIMD level the host kernels run at: the best this CPU has, capped by the environment
//! variable `GEMMA_CHAT_SIMD` (`avx512`, `avx-vnni`, `avx2` or `scalar`), so that one machine
//! can measure and test what an older CPU runs. Read once.

use std::sync::OnceLock;

/// A SIMD level, lowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Simd {
    /// Portable Rust: the reference.
    Scalar,
    /// AVX2 with FMA and F16C.
    Avx2,
    /// AVX2 with AVX-VNNI (`vpdpwssd` on 256 bits): the CPUs that have it without AVX-512
    /// (Intel's since Alder Lake). An AVX-512 level does not imply it: its kernels also ask
    /// the CPU ([`avx_vnni`]).
    AvxVnni,
    /// AVX-512 F, BW and VL (with AVX2, FMA and F16C).
    Avx512,
    /// The same with VNNI (`vpdpwssd`).
    Avx512Vnni,
}

impl Simd {
    /// Its name, as `GEMMA_CHAT_SIMD` and `bench --json` write it.
    pub fn name(self) -> &'static str {
        match self {
            Simd::Scalar => "scalar",
            Simd::Avx2 => "avx2",
            Simd::AvxVnni => "avx-vnni",
            Simd::Avx512 => "avx512",
            Simd::Avx512Vnni => "avx512-vnni",
        }
    }
}

/// The level in use: the CPU's, capped by `GEMMA_CHAT_SIMD`.
pub fn level() -> Simd {
    static LEVEL: OnceLock<Simd> = OnceLock::new();
    *LEVEL.get_or_init(|| {
        let cap = match std::env::var("GEMMA_CHAT_SIMD").as_deref() {
            Ok("scalar") => Simd::Scalar,
            Ok("avx2") => Simd::Avx2,
            Ok("avx-vnni") => Simd::AvxVnni,
            Ok("avx512") => Simd::Avx512,
            _ => Simd::Avx512Vnni,
        };
        match detected().min(cap) {
            // An AVX-512 CPU capped at AVX-VNNI without having it runs AVX2.
            Simd::AvxVnni if !has_avx_vnni() => Simd::Avx2,
            l => l,
        }
    })
}

/// Whether the AVX-VNNI kernels run: the level allows them and the CPU has the instructions.
pub fn avx_vnni() -> bool {
    level() >= Simd::AvxVnni && has_avx_vnni()
}

fn has_avx_vnni() -> bool {
    #[cfg(target_arch = "x86_64")]
    return is_x86_feature_detected!("avxvnni");
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// The best level this CPU has.
fn detected() -> Simd {
    #[cfg(target_arch = "x86_64")]
    {
        let avx2 = is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c");
        let avx512 = is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vl");
        let vnni = is_x86_feature_detected!("avx512vnni");
        match (avx2, avx512, vnni) {
            (true, true, true) => Simd::Avx512Vnni,
            (true, true, false) => Simd::Avx512,
            (true, false, _) if has_avx_vnni() => Simd::AvxVnni,
            (true, false, _) => Simd::Avx2,
            _ => Simd::Scalar,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    Simd::Scalar
}
