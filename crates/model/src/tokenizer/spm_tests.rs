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

/// The `tokenizers` BPE that GGUF vocabularies were built into before [`Spm`]: the reference.
fn reference(
    pieces: &[String],
    kinds: &[u8],
    merges: Vec<(String, String)>,
) -> tokenizers::Tokenizer {
    use tokenizers::decoders::{byte_fallback::ByteFallback, fuse::Fuse, sequence::Sequence};
    use tokenizers::models::bpe::BPE;
    use tokenizers::normalizers::replace::Replace;
    use tokenizers::{AddedToken, DecoderWrapper};
    let vocab: tokenizers::models::bpe::Vocab = pieces
        .iter()
        .enumerate()
        .map(|(i, p)| (p.clone(), i as u32))
        .collect();
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .unk_token("<unk>".into())
        .fuse_unk(true)
        .byte_fallback(true)
        .build()
        .expect("builds");
    let mut tok = tokenizers::Tokenizer::new(bpe);
    tok.with_normalizer(Some(Replace::new(" ", "▁").expect("replace")));
    tok.with_decoder(Some(Sequence::new(vec![
        DecoderWrapper::Replace(Replace::new("▁", " ").expect("replace")),
        DecoderWrapper::ByteFallback(ByteFallback::new()),
        DecoderWrapper::Fuse(Fuse::new()),
    ])));
    let added: Vec<AddedToken> = pieces
        .iter()
        .zip(kinds)
        .filter(|(_, k)| matches!(**k, CONTROL | USER_DEFINED))
        .map(|(p, &k)| AddedToken::from(p.clone(), k == CONTROL).normalized(false))
        .collect();
    tok.add_tokens(&added);
    tok
}

/// Hugging Face's merges for a SentencePiece vocabulary: every split of a piece into two
/// pieces, by the merged piece's score, then the left half's length, then the right half's
/// (descending); ties in vocabulary order.
fn derived(pieces: &[String], score: &[f32]) -> Vec<(String, String)> {
    let has = |s: &str| pieces.iter().any(|p| p == s);
    let mut m = Vec::new();
    for (i, p) in pieces.iter().enumerate() {
        let n = p.chars().count();
        for (k, (at, _)) in p.char_indices().skip(1).enumerate() {
            let (l, r) = p.split_at(at);
            if has(l) && has(r) {
                m.push((score[i], k + 1, n - k - 1, l.to_string(), r.to_string()));
            }
        }
    }
    m.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)).then(b.2.cmp(&a.2)));
    m.into_iter().map(|(_, _, _, l, r)| (l, r)).collect()
}

/// A random vocabulary over a small alphabet: single characters, random longer pieces with
/// scores that tie now and then, two special pieces and the byte pieces.
fn random_vocab(rng: &mut rand::rngs::StdRng) -> (Vec<String>, Vec<f32>, Vec<u8>) {
    use rand::Rng;
    let alphabet = ["a", "b", "c", "d", "▁", "é"];
    let mut pieces: Vec<String> = vec!["<unk>".into(), "<bos>".into(), "<sp>".into()];
    let mut kinds = vec![2, CONTROL, USER_DEFINED];
    pieces.extend(alphabet.iter().map(|s| s.to_string()));
    kinds.extend([NORMAL; 6]);
    while pieces.len() < 80 {
        let n = rng.random_range(2..6);
        let p: String = (0..n).map(|_| alphabet[rng.random_range(0..4)]).collect();
        if !pieces.contains(&p) {
            pieces.push(p);
            kinds.push(NORMAL);
        }
    }
    let mut score: Vec<f32> = pieces
        .iter()
        .map(|_| -(rng.random_range(0..12) as f32) / 4.0)
        .collect();
    score[..3].fill(0.0);
    for b in 0..256 {
        pieces.push(format!("<0x{b:02X}>"));
        kinds.push(BYTE);
        score.push(0.0);
    }
    (pieces, score, kinds)
}

fn random_text(rng: &mut rand::rngs::StdRng) -> String {
    use rand::Rng;
    let parts = [
        "a", "b", "c", "d", " ", "é", "z", "<bos>", "<sp>", "ab", "  ",
    ];
    (0..rng.random_range(0..30))
        .map(|_| parts[rng.random_range(0..parts.len())])
        .collect()
}

fn agree(spm: &Spm, hf: &tokenizers::Tokenizer, rng: &mut rand::rngs::StdRng) {
    for _ in 0..300 {
        let text = random_text(rng);
        let want = hf
            .encode(text.as_str(), false)
            .expect("encodes")
            .get_ids()
            .to_vec();
        let got = spm.encode(&text);
        assert_eq!(got, want, "ids of {text:?}");
        for skip in [false, true] {
            assert_eq!(
                spm.decode(&got, skip),
                hf.decode(&got, skip).expect("decodes"),
                "{text:?}"
            );
        }
    }
}

#[test]
fn ranked_by_score_it_encodes_and_decodes_as_tokenizers_does() {
    use rand::SeedableRng;
    let mut rng = rand::rngs::StdRng::seed_from_u64(4);
    for _ in 0..20 {
        let (pieces, score, kinds) = random_vocab(&mut rng);
        let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
        let spm = Spm::new(&refs, score.clone(), kinds.clone()).expect("builds");
        let hf = reference(&pieces, &kinds, derived(&pieces, &score));
        agree(&spm, &hf, &mut rng);
    }
}

#[test]
fn ranked_by_a_listed_merge_order_it_encodes_as_tokenizers_does() {
    use rand::SeedableRng;
    use rand::seq::SliceRandom;
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    for _ in 0..20 {
        let (pieces, score, kinds) = random_vocab(&mut rng);
        // Some of the possible merges, in a random order, one of them listed twice.
        let mut merges = derived(&pieces, &score);
        merges.shuffle(&mut rng);
        merges.truncate(merges.len() * 3 / 4);
        if let Some(first) = merges.first().cloned() {
            merges.push(first);
        }
        let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
        let spm = Spm::new(&refs, score, kinds.clone())
            .expect("builds")
            .with_merges(merges.iter().map(|(l, r)| (l.as_str(), r.as_str())));
        let hf = reference(&pieces, &kinds, merges);
        agree(&spm, &hf, &mut rng);
    }
}
