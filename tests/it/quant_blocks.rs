//! Dequantization of random blocks of every supported GGML type against
//! `gguf.quants.dequantize` (references from `tests/fixtures/make_demo_reference.py` and
//! `tests/fixtures/make_quant_fixtures.py`), covering the types the demo file does not use.

use gemma_kernels::quant::{GgmlType, SUPPORTED};
use safetensors::SafeTensors;

#[test]
fn the_demo_references_match() {
    assert_eq!(check("demo/quant_blocks.safetensors"), 10);
}

/// Every type the engine reads, random blocks and the extremes (every byte 0x00, 0xFF or 0xAA
/// with huge and tiny scales), from `tests/fixtures/make_quant_fixtures.py`.
#[test]
fn every_type_and_its_extremes_match_gguf_py_bit_for_bit() {
    assert_eq!(check("quant/blocks.safetensors"), SUPPORTED.len() - 1);
}

/// Checks every type the file holds (all but F32 may be there); returns how many it held.
fn check(file: &str) -> usize {
    let path = format!("{}/tests/fixtures/{file}", env!("CARGO_MANIFEST_DIR"));
    let bytes = std::fs::read(path).expect("reference");
    let st = SafeTensors::deserialize(&bytes).expect("parses");
    let mut held = 0;
    for ty in SUPPORTED {
        let name = ty.name();
        let Ok(raw) = st.tensor(&format!("{name}.bytes")) else {
            continue;
        };
        held += 1;
        let want: Vec<f32> = st
            .tensor(&format!("{name}.values"))
            .expect("values")
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let got = ty.dequantize(raw.data());
        assert_eq!(got.len(), want.len(), "{name}");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.to_bits(), w.to_bits(), "{name}[{i}]: {g} vs {w}");
        }
    }
    held
}

#[test]
fn unknown_types_are_named() {
    assert!(GgmlType::from_id(16).is_none());
    assert_eq!(GgmlType::name_of(16), "IQ2_XXS");
    assert_eq!(GgmlType::name_of(99), "type 99");
}
