//! The SIMD level the host kernels run at: the best this CPU has, capped by the environment
//! variable `GEMMA_CHAT_SIMD` (`avx512`, `avx2` or `scalar`), so that one machine can measure
//! and test what an older CPU runs. Read once.

use std::sync::OnceLock;

/// A SIMD level, lowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Simd {
    /// Portable Rust: the reference.
    Scalar,
    /// AVX2 with FMA and F16C.
    Avx2,
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
            Ok("avx512") => Simd::Avx512,
            _ => Simd::Avx512Vnni,
        };
        detected().min(cap)
    })
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
            (true, false, _) => Simd::Avx2,
            _ => Simd::Scalar,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    Simd::Scalar
}
