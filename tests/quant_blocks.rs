//! Dequantization of random blocks of every supported GGML type against
//! `gguf.quants.dequantize` (references from `tests/fixtures/make_demo_reference.py` and
//! `tests/fixtures/make_quant_fixtures.py`), covering the types the demo file does not use.

use gemma_chat::loader::quant::GgmlType;
use safetensors::SafeTensors;

#[test]
fn every_supported_type_matches_the_reference() {
    check(
        "demo/quant_blocks.safetensors",
        &[
            (1, "F16"),
            (30, "BF16"),
            (2, "Q4_0"),
            (3, "Q4_1"),
            (6, "Q5_0"),
            (7, "Q5_1"),
            (8, "Q8_0"),
            (12, "Q4_K"),
            (13, "Q5_K"),
            (14, "Q6_K"),
        ],
    );
}

/// Every type the engine reads, random blocks and the extremes (every byte 0x00, 0xFF or 0xAA
/// with huge and tiny scales), from `tests/fixtures/make_quant_fixtures.py`.
#[test]
fn every_type_and_its_extremes_match_gguf_py_bit_for_bit() {
    check(
        "quant/blocks.safetensors",
        &[
            (1, "F16"),
            (30, "BF16"),
            (2, "Q4_0"),
            (3, "Q4_1"),
            (6, "Q5_0"),
            (7, "Q5_1"),
            (8, "Q8_0"),
            (10, "Q2_K"),
            (11, "Q3_K"),
            (12, "Q4_K"),
            (13, "Q5_K"),
            (14, "Q6_K"),
            (20, "IQ4_NL"),
            (23, "IQ4_XS"),
        ],
    );
}

fn check(file: &str, types: &[(u32, &str)]) {
    let path = format!("{}/tests/fixtures/{file}", env!("CARGO_MANIFEST_DIR"));
    let bytes = std::fs::read(path).expect("reference");
    let st = SafeTensors::deserialize(&bytes).expect("parses");
    for &(id, name) in types {
        let ty = GgmlType::from_id(id).expect("supported");
        let raw = st.tensor(&format!("{name}.bytes")).expect("bytes");
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
}

#[test]
fn unknown_types_are_named() {
    assert!(GgmlType::from_id(16).is_none());
    assert_eq!(GgmlType::name_of(16), "IQ2_XXS");
    assert_eq!(GgmlType::name_of(99), "type 99");
}
