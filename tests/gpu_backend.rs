//! The same model code on the wgpu backend: every oracle fixture's prompt logits on wgpu against
//! the CPU backend's, in f32 and in f16. Built with `--features wgpu` only; CI runs it on
//! lavapipe (Debian's `mesa-vulkan-drivers`, a software Vulkan device).
#![cfg(feature = "wgpu")]

#[path = "it/common/mod.rs"]
mod common;

use std::path::Path;

use common::{max_abs_diff, oracle_fixtures, prompt_logits};

use burn::tensor::{Device, Tensor, TensorData};
use gemma_engine::session::Session;
use gemma_model::backend;
use gemma_model::checkpoint::load;
use gemma_model::model::{ComputeDtype, KvDtype};
use gemma_model::sampling::{NUCLEUS_PROBE, NextLogits, Sampler, SamplingParams};
use safetensors::SafeTensors;

fn prompt(dir: &Path) -> Vec<u32> {
    let bytes = std::fs::read(dir.join("reference.safetensors")).expect("reference");
    let st = SafeTensors::deserialize(&bytes).expect("reference parses");
    st.tensor("prompt_ids")
        .expect("prompt_ids")
        .data()
        .chunks_exact(8)
        .map(|b| i64::from_le_bytes(b.try_into().expect("8 bytes")) as u32)
        .collect()
}

/// f32 on wgpu equals f32 on the CPU to 2e-3. f16 cannot be held to a fixed bound against the
/// CPU's f16: each backend rounds to 11 bits at different points, and the random fixtures
/// amplify that (measured 0.008–0.11 apart; each is 0.02–0.13 from the f32 result). So f16 on
/// wgpu must stay within twice the CPU's own f16 error of the f32 result (at least 2e-2).
#[test]
fn fixture_logits_on_wgpu_equal_the_cpu_ones() {
    let gpu = backend::device("wgpu").expect("a wgpu device (lavapipe in CI)");
    let mut failures = Vec::new();
    // The CPU's cache in f32, as the device's f32 one (the host default, f16, is held to f32 in
    // `it`'s kv_oracle).
    let load_on = |dir: &Path, device: &Device, dtype: ComputeDtype| {
        let mut lm = load(dir, device, dtype, &mut |_, _| {}).expect("load");
        lm.model.set_kv_dtype(KvDtype::F32);
        lm
    };
    let run = |dir: &Path, device: &Device, dtype: ComputeDtype, ids: &[u32]| {
        prompt_logits(&load_on(dir, device, dtype), ids, 5)
    };
    for dir in oracle_fixtures(1) {
        let ids = prompt(&dir);
        let cpu32 = run(&dir, &Device::flex(), ComputeDtype::F32, &ids);
        let gpu32 = run(&dir, &gpu, ComputeDtype::F32, &ids);
        // The whole prompt in one step as well: a MoE block gathers its experts on the device
        // for a few tokens (the chunks of 5) and routes on the host for many.
        let lm = load_on(&dir, &gpu, ComputeDtype::F32);
        let whole = max_abs_diff(&prompt_logits(&lm, &ids, ids.len()), &cpu32);
        let cpu16 = run(&dir, &Device::flex(), ComputeDtype::F16, &ids);
        let gpu16 = run(&dir, &gpu, ComputeDtype::F16, &ids);
        let d32 = max_abs_diff(&gpu32, &cpu32);
        let (e_cpu, e_gpu) = (max_abs_diff(&cpu16, &cpu32), max_abs_diff(&gpu16, &cpu32));
        println!(
            "{}: f32 wgpu vs cpu {d32:.1e} (one step {whole:.1e}); f16 vs f32: cpu {e_cpu:.1e}, wgpu {e_gpu:.1e} \
             (wgpu f16 vs cpu f16 {:.1e})",
            dir.display(),
            max_abs_diff(&gpu16, &cpu16)
        );
        if d32 > 2e-3 || whole > 2e-3 || e_gpu > (2.0 * e_cpu).max(2e-2) {
            failures.push(dir.display().to_string());
        }
    }
    assert!(
        failures.is_empty(),
        "wgpu differs from the CPU: {failures:?}"
    );
}

/// On the GPU a token is chosen on the device: greedy reads back one id, top-k its k
/// candidates, and every setting draws what the host sampler draws from the same logits.
#[test]
fn sampling_on_wgpu_reads_back_the_token_and_matches_the_host() {
    let gpu = backend::device("wgpu").expect("a wgpu device (lavapipe in CI)");
    let dir = oracle_fixtures(1).remove(0);
    let lm = load(&dir, &gpu, ComputeDtype::F32, &mut |_, _| {}).expect("load");
    let mut s = Session::new(&lm.model);
    let next = s.prefill(&lm.model, &prompt(&dir), 4).expect("prefill");
    assert!(!next.on_host());
    // The model's logits stay on the device, and greedy reads back one id: the host's argmax.
    let host = next.clone().to_vec().expect("read back");
    let mut greedy = Sampler::new(SamplingParams::greedy());
    assert_eq!(
        greedy.pick(next.clone()).expect("pick"),
        gemma_model::sampling::argmax(&host)
    );
    assert_eq!(greedy.read_back(), 1);
    // A row on the device shaped for the nucleus probe: one token far ahead, ten close behind,
    // then a flat tail. At temperature 3 the 0.9 nucleus is those eleven (inside the probe); at
    // 5 it reaches into the tail, and the whole row is read.
    let vocab = 512;
    let row: Vec<f32> = (0..vocab)
        .map(|i| match i {
            0 => 30.0,
            1..=10 => 21.0 - i as f32 * 0.01,
            _ => (i % 7) as f32 * 0.01,
        })
        .collect();
    let host = row.clone();
    let next = NextLogits::last_of(Tensor::<2>::from_data(
        TensorData::new(row, [1, vocab]),
        &gpu,
    ));
    assert!(!next.on_host());
    let probe = 2 * NUCLEUS_PROBE + 1;
    let settings = [
        (0.0, 64, 1.0, 1),
        (5.0, 8, 0.95, 16),
        (3.0, 0, 0.9, probe),
        (5.0, 0, 0.9, probe + vocab),
    ];
    for (temperature, top_k, top_p, read) in settings {
        let p = SamplingParams {
            temperature,
            top_k,
            top_p,
            min_p: 0.0,
            seed: 3,
        };
        let (mut a, mut b) = (Sampler::new(p.clone()), Sampler::new(p.clone()));
        let on_host: Vec<u32> = (0..20).map(|_| a.sample(&host)).collect();
        let on_gpu: Vec<u32> = (0..20)
            .map(|_| b.pick(next.clone()).expect("pick"))
            .collect();
        assert_eq!(on_gpu, on_host, "{p:?}");
        assert_eq!(b.read_back(), read, "{p:?}");
    }
}

/// bf16 runs where the device computes in it (CUDA GPUs); WebGPU has no bf16, and asking for
/// it is a clear error at load, not a failure in a shader.
#[test]
fn bf16_on_wgpu_runs_or_says_why_not() {
    let gpu = backend::device("wgpu").expect("a wgpu device (lavapipe in CI)");
    let dir = oracle_fixtures(1).remove(0);
    // `dtype = "auto"` picks what the device computes in.
    let bf16 = gpu.supports_dtype(burn::tensor::DType::BF16);
    let auto = backend::preferred_dtype(&gpu);
    assert_eq!(
        auto,
        if bf16 {
            ComputeDtype::BF16
        } else {
            ComputeDtype::F16
        }
    );
    match load(&dir, &gpu, ComputeDtype::BF16, &mut |_, _| {}) {
        Ok(lm) => {
            assert!(bf16);
            let ids = prompt(&dir);
            let cpu = load(&dir, &Device::flex(), ComputeDtype::F32, &mut |_, _| {}).expect("load");
            let d = max_abs_diff(&prompt_logits(&lm, &ids, 5), &prompt_logits(&cpu, &ids, 5));
            // The CPU's bf16 moves this fixture's logits by at most 0.015 (tests/oracle.rs); a
            // device computing in bf16 rounds as coarsely, so about twice that holds it (no
            // device here computes in bf16: lavapipe takes the branch below).
            println!("bf16 on wgpu vs f32 on the CPU: {d:.3e}");
            assert!(d < 0.03, "bf16 on wgpu differs from f32 by {d}");
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(
                msg.contains("cannot compute in bf16") && msg.contains("f16"),
                "{msg}"
            );
        }
    }
}
