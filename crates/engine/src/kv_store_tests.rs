//! The warm-restart store's refusals and round trips on the tiny Gemma 4 fixture.

use std::path::Path;

use burn::tensor::Device;

use super::*;
use gemma_model::backend::ComputeDtype;
use gemma_model::checkpoint::load;
use gemma_protocol::Named;

/// `bytes` with `edit` applied to its tensors and the data checksum recomputed, as someone
/// who wanted the file accepted would.
fn reseal(bytes: &[u8], edit: impl Fn(&str, &mut Vec<u8>) -> bool) -> Vec<u8> {
    let (_, meta) = SafeTensors::read_metadata(bytes).expect("metadata");
    let mut meta = meta.metadata().clone().expect("metadata map");
    let st = SafeTensors::deserialize(bytes).expect("tensors");
    let mut kept: Vec<(String, StDtype, Vec<usize>, Vec<u8>)> = Vec::new();
    for (name, v) in st.tensors() {
        let mut data = v.data().to_vec();
        if edit(&name, &mut data) {
            kept.push((name, v.dtype(), v.shape().to_vec(), data));
        }
    }
    let views: Vec<(String, TensorView)> = kept
        .iter()
        .map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).expect("view")))
        .collect();
    let sha = data_hash(views.iter().map(|(n, v)| (n.as_str(), v.data())));
    meta.insert("data_sha256".into(), sha);
    safetensors::serialize(views, Some(meta)).expect("serialize")
}

#[test]
fn a_snapshot_restores_exactly_in_its_kv_type_and_is_refused_in_another() {
    let dir =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/oracle/gemma4_e2b_style");
    let lm = load(&dir, &Device::flex(), ComputeDtype::F32, &mut |_, _| {}).expect("load");
    let tmp = tempfile::tempdir().expect("tmp");
    let convo: Vec<u32> = (0..20).map(|i| 3 + i * 7 % 500).collect();
    for &t in KvDtype::ALL {
        let mut m = lm.model.clone();
        m.set_kv_dtype(t);
        let store = KvStore::new(tmp.path().to_path_buf(), &dir, &m, 1 << 30);
        let mut s = Session::new(&m);
        s.prefill(&m, &convo, 8).expect("prefill");
        store.save(&convo, &s, 0).expect("save");
        let mut back = Session::new(&m);
        assert!(store.load(&convo, &m, &mut back), "{t}: restored");
        let (a, b) = (s.export().expect("held").0, back.export().expect("held").0);
        assert_eq!((a.host_dtype(), b.host_dtype()), (Some(t), Some(t)));
        let raw = |h: &HostKv| -> Vec<(Vec<u8>, Vec<u8>, DType, usize)> {
            h.layers()
                .iter()
                .flatten()
                .map(|(k, v, start)| (k.bytes().to_vec(), v.bytes().to_vec(), k.dtype(), *start))
                .collect()
        };
        assert_eq!(raw(&a), raw(&b), "{t}: the same bytes back");
        // The same file for a model whose cache keeps another type: refused, re-prefilled.
        for other in KvDtype::ALL.iter().copied().filter(|o| *o != t) {
            let mut o = lm.model.clone();
            o.set_kv_dtype(other);
            let theirs = KvStore::new(tmp.path().to_path_buf(), &dir, &o, 1 << 30);
            assert!(
                !theirs.load(&convo, &o, &mut Session::new(&o)),
                "{t} read as {other}"
            );
        }
    }
}

#[test]
fn a_resealed_snapshot_with_a_layer_missing_or_nans_is_refused() {
    let dir =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/oracle/gemma4_e2b_style");
    let lm = load(&dir, &Device::flex(), ComputeDtype::F32, &mut |_, _| {}).expect("load");
    let m = &lm.model;
    let tmp = tempfile::tempdir().expect("tmp");
    let store = KvStore::new(tmp.path().to_path_buf(), &dir, m, 1 << 30);
    let convo: Vec<u32> = (0..20).map(|i| 3 + i * 7 % 500).collect();
    let mut s = Session::new(m);
    s.prefill(m, &convo, 8).expect("prefill");
    store.save(&convo, &s, 0).expect("save");
    let path = store.file(&convo);
    let good = std::fs::read(&path).expect("read");
    // Resealed unchanged: still accepted (the test's resealing is faithful).
    std::fs::write(&path, reseal(&good, |_, _| true)).expect("write");
    assert!(store.load(&convo, m, &mut Session::new(m)));
    // One value NaN.
    let nan = reseal(&good, |name, data| {
        if name.starts_with("0.k.") {
            data[..4].copy_from_slice(&f32::NAN.to_le_bytes());
        }
        true
    });
    std::fs::write(&path, nan).expect("write");
    assert!(
        !store.load(&convo, m, &mut Session::new(m)),
        "a NaN is refused"
    );
    // A layer's keys and values gone.
    let missing = reseal(&good, |name, _| !name.starts_with("1."));
    std::fs::write(&path, missing).expect("write");
    assert!(
        !store.load(&convo, m, &mut Session::new(m)),
        "a missing layer is refused"
    );
}

#[test]
fn parking_makes_room_by_removing_the_oldest_snapshots_only() {
    let dir =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/oracle/gemma4_e2b_style");
    let lm = load(&dir, &Device::flex(), ComputeDtype::F32, &mut |_, _| {}).expect("load");
    let m = &lm.model;
    let tmp = tempfile::tempdir().expect("tmp");
    let convo = |k: u32| -> Vec<u32> { (0..20).map(|i| 3 + (i * 7 + k) % 500).collect() };
    let session = |c: &[u32]| {
        let mut s = Session::new(m);
        s.prefill(m, c, 8).expect("prefill");
        s
    };
    let (a, b, c) = (convo(1), convo(2), convo(3));
    // Room for two snapshots, not three.
    let probe = KvStore::new(tmp.path().to_path_buf(), &dir, m, 1 << 30);
    let one = probe.park(&a, &session(&a)).expect("parks");
    let store = KvStore::new(tmp.path().to_path_buf(), &dir, m, 2 * one + one / 2);
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(store.park(&b, &session(&b)).expect("parks"), one);
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(store.park(&c, &session(&c)).expect("parks"), one);
    let back = |cv: &[u32]| store.load(cv, m, &mut Session::new(m));
    assert!(!back(&a), "the oldest made room");
    assert!(back(&b) && back(&c), "the newer two stay");
    // One larger than the whole cap is not written, and removes nothing.
    let tiny = KvStore::new(tmp.path().to_path_buf(), &dir, m, one / 2);
    assert_eq!(tiny.park(&a, &session(&a)).expect("skips"), 0);
    assert!(back(&b) && back(&c));
}
