//! The merge order, byte fallback, special pieces and decoding of [`Spm`] on small vocabularies.

use super::*;

const NORMAL: u8 = 1;
const BYTE: u8 = 6;

/// A vocabulary of `(piece, score, kind)`, with the 256 byte pieces after it.
fn spm(pieces: &[(&str, f32, u8)]) -> Spm {
    let bytes: Vec<String> = (0..256).map(|b| format!("<0x{b:02X}>")).collect();
    let mut all: Vec<&str> = pieces.iter().map(|p| p.0).collect();
    all.extend(bytes.iter().map(String::as_str));
    let mut score: Vec<f32> = pieces.iter().map(|p| p.1).collect();
    score.extend([0.0; 256]);
    let mut kind: Vec<u8> = pieces.iter().map(|p| p.2).collect();
    kind.extend([BYTE; 256]);
    Spm::new(&all, score, kind).expect("builds")
}

fn ids(s: &Spm, pieces: &[&str]) -> Vec<u32> {
    pieces.iter().map(|p| s.id(p).expect(p)).collect()
}

#[test]
fn the_best_scored_merge_goes_first_then_the_longer_left_half_then_the_leftmost() {
    let s = spm(&[
        ("<unk>", 0.0, 2),
        ("a", -1.0, NORMAL),
        ("b", -1.0, NORMAL),
        ("c", -1.0, NORMAL),
        ("ab", -5.0, NORMAL),
        ("bc", -2.0, NORMAL),
        ("abc", -3.0, NORMAL),
        ("aa", -4.0, NORMAL),
    ]);
    // "bc" outscores "ab": a + bc, then abc.
    assert_eq!(s.encode("abc"), ids(&s, &["abc"]));
    assert_eq!(s.encode("ab"), ids(&s, &["ab"]));
    // Equal pairs: the leftmost merges first.
    assert_eq!(s.encode("aaa"), ids(&s, &["aa", "a"]));
    // "cab": c + ab (no "ca").
    assert_eq!(s.encode("cab"), ids(&s, &["c", "ab"]));
}

#[test]
fn spaces_become_the_sentencepiece_marker_and_unknown_characters_bytes() {
    let s = spm(&[
        ("<unk>", 0.0, 2),
        ("▁", -1.0, NORMAL),
        ("x", -1.0, NORMAL),
        ("▁x", -0.5, NORMAL),
    ]);
    assert_eq!(s.encode(" x"), ids(&s, &["▁x"]));
    // "é" is not a piece: its two UTF-8 bytes.
    assert_eq!(s.encode("é"), ids(&s, &["<0xC3>", "<0xA9>"]));
    assert_eq!(s.decode(&s.encode(" xé x"), false), " xé x");
    // A byte run that is not UTF-8 decodes to one U+FFFD per byte.
    assert_eq!(
        s.decode(&ids(&s, &["x", "<0xC3>", "x"]), false),
        "x\u{FFFD}x"
    );
}

#[test]
fn special_pieces_match_whole_on_the_raw_text_longest_first() {
    let s = spm(&[
        ("<unk>", 0.0, 2),
        ("<bos>", 0.0, CONTROL),
        ("<turn>", 0.0, CONTROL),
        ("<turn>x", 0.0, USER_DEFINED),
        ("▁▁", 0.0, USER_DEFINED),
        ("t", -1.0, NORMAL),
        ("x", -1.0, NORMAL),
        ("▁", -1.0, NORMAL),
    ]);
    assert_eq!(
        s.encode("<turn>xt<turn>"),
        ids(&s, &["<turn>x", "t", "<turn>"])
    );
    // User-defined pieces match the text as written, and are merge targets too (score 0, the
    // best): two spaces merge into "▁▁", as the written "▁▁" matches it.
    assert_eq!(s.encode("  "), ids(&s, &["▁▁"]));
    assert_eq!(s.encode("▁▁"), ids(&s, &["▁▁"]));
    assert_eq!(s.encode("t t"), ids(&s, &["t", "▁", "t"]));
    let text = ids(&s, &["<bos>", "t", "<turn>x"]);
    assert_eq!(s.decode(&text, true), "t<turn>x");
    assert_eq!(s.decode(&text, false), "<bos>t<turn>x");
    // Ids past the vocabulary are left out.
    assert_eq!(s.decode(&[u32::MAX, text[1]], false), "t");
}
