//! The host cache in each [`KvDtype`]: what it reads back against f32, and that rewinds, trims,
//! clones and saved copies change nothing.

use burn::tensor::{DType, Device, TensorData};

use super::dtype::{KvDtype, Q8_BLOCK};
use super::host_buf::Rows;
use super::layer::LayerKv;
use crate::model::host_math::{Group, attend};

const HEADS: usize = 2;

/// `n` position-major positions of `HEADS × dim` values, spread over a few orders of magnitude.
fn values(n: usize, dim: usize, seed: f32) -> Vec<f32> {
    (0..n * HEADS * dim)
        .map(|i| {
            let x = i as f32 * 0.37 + seed;
            x.sin() * (1.0 + 8.0 * (x * 0.13).cos().abs())
        })
        .collect()
}

/// A host layer in `t` with `n` positions appended in two goes.
fn layer(t: KvDtype, dim: usize, n: usize) -> (LayerKv, Vec<f32>, Vec<f32>) {
    let (k, v) = (values(n, dim, 0.5), values(n, dim, 2.0));
    let mut kv = LayerKv::empty_host(HEADS, dim, &Device::flex(), 0, t);
    let cut = n / 3 * HEADS * dim;
    kv.append_host(&k[..cut], &v[..cut]);
    kv.append_host(&k[cut..], &v[cut..]);
    (kv, k, v)
}

/// Every live key and value, widened, position-major.
fn read(kv: &LayerKv) -> (Vec<f32>, Vec<f32>) {
    let h = kv.host().expect("a host layer");
    let all = |r: Rows| {
        let mut out = vec![0f32; r.len()];
        r.read_into(0, &mut out);
        out
    };
    (all(h.k), all(h.v))
}

/// The largest error `t` may make on `want` (per q8_0 block: half a step, plus the f16 scale's
/// own rounding over the 127 steps).
fn bounds(t: KvDtype, want: &[f32]) -> Vec<f32> {
    match t {
        KvDtype::F32 => vec![0.0; want.len()],
        KvDtype::F16 => want.iter().map(|x| x.abs() * 2f32.powi(-11)).collect(),
        KvDtype::Q8_0 => want
            .chunks(Q8_BLOCK)
            .flat_map(|b| {
                let d = b.iter().fold(0f32, |m, x| m.max(x.abs())) / 127.0;
                vec![d / 2.0 + 127.0 * d * 2f32.powi(-11); b.len()]
            })
            .collect(),
    }
}

fn bytes_of(d: &(TensorData, TensorData)) -> (Vec<u8>, Vec<u8>, DType) {
    (
        d.0.as_bytes().to_vec(),
        d.1.as_bytes().to_vec(),
        d.0.dtype(),
    )
}

#[test]
fn each_type_reads_back_within_its_bound_and_holds_its_bytes() {
    let (dim, n) = (64, 9);
    for (t, per_value) in [
        (KvDtype::F32, 4.0),
        (KvDtype::F16, 2.0),
        (KvDtype::Q8_0, 34.0 / 32.0),
    ] {
        let (kv, k, v) = layer(t, dim, n);
        let (gk, gv) = read(&kv);
        for (got, want) in [(&gk, &k), (&gv, &v)] {
            let bound = bounds(t, want);
            for i in 0..want.len() {
                let err = (got[i] - want[i]).abs();
                assert!(err <= bound[i], "{t} value {i}: {} vs {}", got[i], want[i]);
            }
        }
        assert_eq!(
            kv.bytes() as f64,
            (2 * n * HEADS * dim) as f64 * per_value,
            "{t}"
        );
        // The tensor view reads the same values back, `[heads, len, dim]`.
        let (tk, _) = kv.view();
        let tk = tk.into_data().try_to_vec::<f32>().expect("f32");
        assert_eq!(tk[dim], gk[HEADS * dim], "{t}: position 1 of head 0");
    }
}

#[test]
fn q8_0_with_heads_not_a_multiple_of_32_keeps_f16() {
    let (kv, k, _) = layer(KvDtype::Q8_0, 48, 5);
    assert_eq!(kv.data(0..5).0.dtype(), DType::F16);
    assert_eq!(kv.bytes(), 2 * 5 * HEADS * 48 * 2);
    let (gk, _) = read(&kv);
    let bound = bounds(KvDtype::F16, &k);
    assert!(
        gk.iter()
            .zip(&k)
            .zip(&bound)
            .all(|((g, w), b)| (g - w).abs() <= *b)
    );
}

#[test]
fn rewinds_trims_clones_and_saved_copies_are_exact_in_every_type() {
    for (t, dim) in [
        (KvDtype::F32, 64),
        (KvDtype::F16, 64),
        (KvDtype::Q8_0, 64),
        (KvDtype::Q8_0, 48),
    ] {
        let n = 12;
        let (kv, k, v) = layer(t, dim, n);
        let whole = bytes_of(&kv.data(0..n));
        // Saved and rebuilt: the same bytes.
        let (dk, dv) = kv.data(0..n);
        let back = LayerKv::from_data(dk, dv, 0, &Device::flex(), Some(t));
        assert_eq!(bytes_of(&back.data(0..n)), whole, "{t}/{dim} saved");
        assert_eq!(read(&back), read(&kv), "{t}/{dim} saved");
        // Cloned, then the original rewound to 7 and extended again: the clone is untouched,
        // and the rewound layer equals one that only ever held those positions.
        let snapshot = kv.clone();
        let mut rewound = kv;
        rewound.truncate(7);
        let per = HEADS * dim;
        let (short, _, _) = layer(t, dim, 7);
        assert_eq!(read(&rewound), read(&short), "{t}/{dim} truncate");
        rewound.append_host(&k[7 * per..], &v[7 * per..]);
        assert_eq!(bytes_of(&rewound.data(0..n)), whole, "{t}/{dim} re-append");
        assert_eq!(bytes_of(&snapshot.data(0..n)), whole, "{t}/{dim} clone");
        // Trimmed to the last 5: those positions, their bytes unchanged, from position 7.
        let mut trimmed = snapshot.clone();
        trimmed.keep_last(5);
        assert_eq!((trimmed.start, trimmed.len()), (7, 5));
        let last = bytes_of(&snapshot.data(7..n));
        assert_eq!(bytes_of(&trimmed.data(0..5)), last, "{t}/{dim} keep_last");
    }
}

#[test]
fn attention_over_f16_and_q8_0_keys_stays_near_f32() {
    let (dim, n) = (64, 40);
    let (f32s, _, _) = layer(KvDtype::F32, dim, n);
    let q: Vec<f32> = (0..2 * dim)
        .map(|i| (i as f32 * 0.21).cos() * 0.3)
        .collect();
    let run = |kv: &LayerKv| {
        let h = kv.host().expect("host");
        let g = Group {
            q: &q,
            dim,
            k: h.k,
            v: h.v,
            stride: HEADS * dim,
            offset: dim,
            keys: 3..n,
            scale: 0.125,
            softcap: Some(30.0),
        };
        let mut out = vec![0f32; q.len()];
        attend(&g, &mut out);
        out
    };
    let want = run(&f32s);
    // Measured: f16 7.1e-4 and q8_0 1.6e-2 here (values up to 9); bounds at about 2.5×.
    for (t, bound) in [(KvDtype::F16, 2e-3), (KvDtype::Q8_0, 4e-2)] {
        let got = run(&layer(t, dim, n).0);
        let err = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        println!("{t}: max |Δ| {err}");
        assert!(err <= bound, "{t}: {err}");
        assert!(err > 0.0, "{t} differs from f32 at all");
    }
}
