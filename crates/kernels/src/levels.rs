//! One plain loop, compiled once per SIMD level: [`builds!`] declares its AVX-512 and AVX2
//! builds (the crate's baseline is SSE2, where the same loops stay scalar), and [`best!`] runs
//! the best one the level in use allows ([`crate::qmatmul::simd::level`]). For the loops that
//! vectorize by themselves once the features are on: dequantization, the input's digits, exp.

/// Declares `unsafe fn $avx512` and `unsafe fn $avx2`: `$plain` (an `#[inline(always)]` fn)
/// compiled with each level's target features. Callers check the level first ([`best!`]).
macro_rules! builds {
    ($plain:ident, $avx512:ident, $avx2:ident, ($($arg:ident: $ty:ty),*) $(-> $ret:ty)?) => {
        #[cfg(target_arch = "x86_64")]
        #[allow(unsafe_code)]
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
        unsafe fn $avx512($($arg: $ty),*) $(-> $ret)? {
            $plain($($arg),*)
        }

        #[cfg(target_arch = "x86_64")]
        #[allow(unsafe_code)]
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $avx2($($arg: $ty),*) $(-> $ret)? {
            $plain($($arg),*)
        }
    };
}

/// Returns `$plain(args)` from the best of its [`builds!`] the level in use allows: the whole
/// body of the function it ends.
macro_rules! best {
    ($plain:ident, $avx512:ident, $avx2:ident, ($($arg:expr),*)) => {{
        #[cfg(target_arch = "x86_64")]
        #[allow(unsafe_code)]
        {
            use crate::qmatmul::simd::{Simd, level};
            if level() >= Simd::Avx512 {
                // SAFETY: the level says the CPU has these features.
                return unsafe { $avx512($($arg),*) };
            } else if level() >= Simd::Avx2 {
                // SAFETY: as above.
                return unsafe { $avx2($($arg),*) };
            }
        }
        $plain($($arg),*)
    }};
}
