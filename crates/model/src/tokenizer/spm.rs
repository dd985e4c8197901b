//! A compact SentencePiece BPE tokenizer for GGUF vocabularies that carry scores and no merges
//! (the Gemma files llama.cpp's converter writes). It encodes and decodes exactly as the
//! `tokenizers` BPE built from the same vocabulary with Hugging Face's derived merges (which
//! `gguf.rs` still builds for files that list their merges), in a quarter of the memory: the
//! pieces in one buffer with an open-addressing index (building it for Gemma's 262k pieces grows
//! RSS by 25 MB), where the `tokenizers` model held the vocabulary twice and 515k derived merges
//! (107 MB). That difference decided whether gemma-chat's peak memory stayed within llama.cpp's.
//!
//! Encoding: control and user-defined pieces match first, leftmost-longest, on the raw text;
//! each stretch between them has its spaces turned into `▁` and is merged from single
//! characters (unknown ones as `<0xXX>` byte pieces). The merge applied next is the adjacent
//! pair whose concatenation is a piece with the best rank, leftmost first. Without a merge list
//! the rank is the one of Hugging Face's derived merge list (the merged piece's score, then the
//! longer left half, then the longer right half, then the lower id); a file that lists its
//! merges (Gemma 4's, from a BPE `tokenizer.json`) ranks by that list, and only its pairs merge.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use aho_corasick::{AhoCorasick, MatchKind};

use crate::error::{Error, Result};

/// SentencePiece piece types as GGUF stores them.
pub(super) const CONTROL: u8 = 3;
pub(super) const USER_DEFINED: u8 = 4;
const UNKNOWN: u8 = 2;
const UNUSED: u8 = 5;

/// A SentencePiece BPE vocabulary.
pub struct Spm {
    text: String,
    ends: Vec<u32>,
    /// Merge priority per piece: its score (0 for control and user-defined pieces).
    score: Vec<f32>,
    /// Characters per piece.
    chars: Vec<u16>,
    kind: Vec<u8>,
    /// Open addressing: piece id + 1, 0 for empty; the length is a power of two.
    index: Vec<u32>,
    /// Control and user-defined pieces, matched on the raw text; the ids alongside.
    added: Option<(AhoCorasick, Vec<u32>)>,
    /// The ids of `<0x00>`..`<0xFF>`.
    bytes: Vec<Option<u32>>,
    unk: Option<u32>,
    /// A listed merge order: pair → rank. `None`: ranked by score.
    ranks: Option<HashMap<(u32, u32), u32>>,
}

fn hash(s: &str) -> u64 {
    // FNV-1a: short keys, no adversary (the vocabulary is the file's).
    s.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}

impl Spm {
    /// Builds the tokenizer from pieces, their scores and kinds. A space in a piece is read as
    /// `▁` (llama.cpp's converter writes spaces where SentencePiece has `▁` in a few pieces).
    pub fn new(pieces: &[&str], score: Vec<f32>, kind: Vec<u8>) -> Result<Self> {
        let n = pieces.len();
        let mut text = String::with_capacity(pieces.iter().map(|p| p.len()).sum());
        let mut ends = Vec::with_capacity(n);
        let mut chars = Vec::with_capacity(n);
        for p in pieces {
            let mut count = 0usize;
            for ch in p.chars() {
                text.push(if ch == ' ' { '▁' } else { ch });
                count += 1;
            }
            ends.push(text.len() as u32);
            chars.push(count.min(u16::MAX as usize) as u16);
        }
        let size = (2 * n).next_power_of_two().max(16);
        let mut s = Self {
            text,
            ends,
            score,
            chars,
            kind,
            index: vec![0; size],
            added: None,
            bytes: vec![None; 256],
            unk: None,
            ranks: None,
        };
        for id in 0..n as u32 {
            s.insert(id);
        }
        for b in 0..256usize {
            s.bytes[b] = s.id(&format!("<0x{b:02X}>"));
        }
        s.unk = s.id("<unk>");
        let added: Vec<u32> = (0..n as u32)
            .filter(|&i| matches!(s.kind[i as usize], CONTROL | USER_DEFINED))
            .filter(|&i| !s.piece(i).is_empty())
            .collect();
        if !added.is_empty() {
            let patterns: Vec<&str> = added.iter().map(|&i| s.piece(i)).collect();
            let ac = AhoCorasick::builder()
                .match_kind(MatchKind::LeftmostLongest)
                .build(&patterns)
                .map_err(|e| Error::Tokenizer(format!("cannot index the special pieces: {e}")))?;
            s.added = Some((ac, added));
        }
        Ok(s)
    }

    /// Ranks merges by a list of pairs (spaces written `▁`) instead of by score. A pair whose
    /// halves or concatenation are not pieces is skipped; a pair listed twice keeps its last
    /// rank (as `tokenizers` builds its merge map).
    pub fn with_merges<L: AsRef<str>, R: AsRef<str>>(
        mut self,
        merges: impl IntoIterator<Item = (L, R)>,
    ) -> Self {
        let mut ranks = HashMap::new();
        let mut joined = String::new();
        for (rank, (l, r)) in merges.into_iter().enumerate() {
            let (l, r) = (l.as_ref(), r.as_ref());
            let (Some(a), Some(b)) = (self.id(l), self.id(r)) else {
                continue;
            };
            joined.clear();
            joined.push_str(l);
            joined.push_str(r);
            if self.id(&joined).is_some() {
                ranks.insert((a, b), rank as u32);
            }
        }
        self.ranks = Some(ranks);
        self
    }

    fn insert(&mut self, id: u32) {
        let mask = self.index.len() - 1;
        let mut at = hash(self.piece(id)) as usize & mask;
        loop {
            match self.index[at] {
                0 => {
                    self.index[at] = id + 1;
                    return;
                }
                // A later duplicate replaces the earlier one (a map built in order).
                e if self.piece(e - 1) == self.piece(id) => {
                    self.index[at] = id + 1;
                    return;
                }
                _ => at = (at + 1) & mask,
            }
        }
    }

    /// The piece of `id`.
    pub fn piece(&self, id: u32) -> &str {
        let i = id as usize;
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.text[start..self.ends[i] as usize]
    }

    /// The id of a piece.
    pub fn id(&self, piece: &str) -> Option<u32> {
        let mask = self.index.len() - 1;
        let mut at = hash(piece) as usize & mask;
        loop {
            match self.index[at] {
                0 => return None,
                e if self.piece(e - 1) == piece => return Some(e - 1),
                _ => at = (at + 1) & mask,
            }
        }
    }

    /// The bytes `id` stands for in text: `▁` as a space, a `<0xXX>` piece as its byte; `None`
    /// for control, user-defined, unknown and unused pieces.
    pub fn piece_bytes(&self, id: u32) -> Option<Vec<u8>> {
        let kind = *self.kind.get(id as usize)?;
        if matches!(kind, CONTROL | USER_DEFINED | UNKNOWN | UNUSED) {
            return None;
        }
        let piece = self.piece(id).replace('▁', " ");
        Some(byte_of(&piece).map_or_else(|| piece.into_bytes(), |b| vec![b]))
    }

    /// Number of pieces.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether the vocabulary is empty.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Encodes `text` as is (no BOS).
    pub fn encode(&self, text: &str) -> Vec<u32> {
        self.encode_unless(text, &|_, _| false)
    }

    /// Encodes `text`, a control piece's text as plain text where `plain(start, end)` says so
    /// (its byte range lies in what a user wrote); user-defined pieces match as ever.
    pub fn encode_unless(&self, text: &str, plain: &dyn Fn(usize, usize) -> bool) -> Vec<u32> {
        let mut out = Vec::new();
        let mut last = 0;
        if let Some((ac, ids)) = &self.added {
            for m in ac.find_iter(text) {
                let id = ids[m.pattern().as_usize()];
                if self.kind[id as usize] == CONTROL && plain(m.start(), m.end()) {
                    continue;
                }
                self.encode_plain(&text[last..m.start()], &mut out);
                out.push(id);
                last = m.end();
            }
        }
        self.encode_plain(&text[last..], &mut out);
        out
    }

    /// One stretch without special pieces.
    fn encode_plain(&self, text: &str, out: &mut Vec<u32>) {
        if text.is_empty() {
            return;
        }
        let text = text.replace(' ', "▁");
        let mut syms: Vec<Sym> = Vec::with_capacity(text.len());
        let mut buf = [0u8; 4];
        for ch in text.chars() {
            match self.id(ch.encode_utf8(&mut buf)) {
                Some(id) => syms.push(Sym::new(id)),
                None => {
                    let b = ch.encode_utf8(&mut buf).as_bytes();
                    let ids: Option<Vec<u32>> = b.iter().map(|&x| self.bytes[x as usize]).collect();
                    match (ids, self.unk) {
                        (Some(ids), _) => syms.extend(ids.into_iter().map(Sym::new)),
                        // Consecutive unknowns fuse into one.
                        (None, Some(unk)) if syms.last().map(|s| s.id) == Some(unk) => {}
                        (None, Some(unk)) => syms.push(Sym::new(unk)),
                        (None, None) => {}
                    }
                }
            }
        }
        let n = syms.len();
        for (i, s) in syms.iter_mut().enumerate() {
            s.prev = i.checked_sub(1);
            s.next = (i + 1 < n).then_some(i + 1);
        }
        let mut queue = BinaryHeap::new();
        let mut joined = String::new();
        for i in 0..n.saturating_sub(1) {
            if let Some(c) = self.candidate(&syms, i, &mut joined) {
                queue.push(c);
            }
        }
        while let Some(c) = queue.pop() {
            let Some(next) = syms[c.pos].next else {
                continue;
            };
            if !syms[c.pos].alive {
                continue;
            }
            // A stale entry stands if the pair there now still makes the same piece.
            if self.merged(syms[c.pos].id, syms[next].id, &mut joined) != Some(c.id) {
                continue;
            }
            syms[c.pos].id = c.id;
            syms[next].alive = false;
            syms[c.pos].next = syms[next].next;
            if let Some(nn) = syms[next].next {
                syms[nn].prev = Some(c.pos);
            }
            if let Some(p) = syms[c.pos].prev
                && let Some(c) = self.candidate(&syms, p, &mut joined)
            {
                queue.push(c);
            }
            if let Some(c) = self.candidate(&syms, c.pos, &mut joined) {
                queue.push(c);
            }
        }
        out.extend(syms.iter().filter(|s| s.alive).map(|s| s.id));
    }

    /// The piece `a` and `b` make together, if they merge.
    fn merged(&self, a: u32, b: u32, joined: &mut String) -> Option<u32> {
        if let Some(ranks) = &self.ranks
            && !ranks.contains_key(&(a, b))
        {
            return None;
        }
        joined.clear();
        joined.push_str(self.piece(a));
        joined.push_str(self.piece(b));
        self.id(joined)
    }

    /// The merge of symbol `pos` with the next one, ranked.
    fn candidate(&self, syms: &[Sym], pos: usize, joined: &mut String) -> Option<Candidate> {
        let next = syms[pos].next?;
        let (a, b) = (syms[pos].id, syms[next].id);
        let id = self.merged(a, b, joined)?;
        let rank = match &self.ranks {
            Some(ranks) => Rank::Listed(ranks[&(a, b)]),
            None => Rank::Score {
                score: self.score[id as usize],
                left: self.chars[a as usize],
                right: self.chars[b as usize],
                id,
            },
        };
        Some(Candidate { rank, id, pos })
    }

    /// Decodes ids: `▁` as spaces, runs of `<0xXX>` pieces as UTF-8 (each byte of an invalid run
    /// as U+FFFD); control pieces left out with `skip_special`.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> String {
        let mut out = String::new();
        let mut pending: Vec<u8> = Vec::new();
        let flush = |pending: &mut Vec<u8>, out: &mut String| {
            match std::str::from_utf8(pending) {
                Ok(s) => out.push_str(s),
                Err(_) => out.extend(std::iter::repeat_n('\u{FFFD}', pending.len())),
            }
            pending.clear();
        };
        // Ids outside the vocabulary are left out, as `tokenizers` does.
        for &id in ids.iter().filter(|&&id| (id as usize) < self.len()) {
            if skip_special && self.kind[id as usize] == CONTROL {
                continue;
            }
            let piece = self.piece(id).replace('▁', " ");
            match byte_of(&piece) {
                Some(b) => pending.push(b),
                None => {
                    flush(&mut pending, &mut out);
                    out.push_str(&piece);
                }
            }
        }
        flush(&mut pending, &mut out);
        out
    }
}

/// The byte a `<0xXX>` piece stands for.
pub(super) fn byte_of(piece: &str) -> Option<u8> {
    let hex = piece.strip_prefix("<0x")?.strip_suffix('>')?;
    (hex.len() == 2).then(|| u8::from_str_radix(hex, 16).ok())?
}

#[derive(Clone, Copy)]
struct Sym {
    id: u32,
    prev: Option<usize>,
    next: Option<usize>,
    alive: bool,
}

impl Sym {
    fn new(id: u32) -> Self {
        Self {
            id,
            prev: None,
            next: None,
            alive: true,
        }
    }
}

/// Where a merge stands in the merge order.
#[derive(PartialEq)]
enum Rank {
    /// Derived from the merged piece's score; the greatest goes first.
    Score {
        score: f32,
        left: u16,
        right: u16,
        id: u32,
    },
    /// Its place in a listed merge order; the lowest goes first.
    Listed(u32),
}

impl Rank {
    /// `Greater` when `self` merges first.
    fn cmp(&self, o: &Self) -> Ordering {
        match (self, o) {
            (Rank::Listed(a), Rank::Listed(b)) => b.cmp(a),
            (
                Rank::Score {
                    score,
                    left,
                    right,
                    id,
                },
                Rank::Score {
                    score: s2,
                    left: l2,
                    right: r2,
                    id: i2,
                },
            ) => score
                .total_cmp(s2)
                .then(left.cmp(l2))
                .then(right.cmp(r2))
                .then(i2.cmp(id)),
            // One tokenizer ranks one way.
            _ => Ordering::Equal,
        }
    }
}

/// A possible merge; the greatest pops first.
struct Candidate {
    rank: Rank,
    /// The piece it makes.
    id: u32,
    pos: usize,
}

impl Ord for Candidate {
    fn cmp(&self, o: &Self) -> Ordering {
        self.rank.cmp(&o.rank).then(o.pos.cmp(&self.pos))
    }
}

impl PartialOrd for Candidate {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl PartialEq for Candidate {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}

impl Eq for Candidate {}

#[cfg(test)]
#[path = "spm_tests.rs"]
mod tests;
