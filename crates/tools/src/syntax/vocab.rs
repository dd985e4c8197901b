//! The model's vocabulary as the call grammar reads it: each token's bytes (control tokens have
//! none), sorted so that a walk shares the work of common prefixes. [`Vocab::allowed`] lists the
//! tokens a [`Matcher`] accepts next, [`Vocab::feed`] advances it by one, and [`Vocab::forced`]
//! names the token that starts the shortest completion. Inside a string the answer depends only
//! on the string's state, so it is computed once per state when the vocabulary is read.

use super::matcher::{Matcher, Sym, Text};

/// A vocabulary for constrained decoding.
pub struct Vocab {
    /// Each id's bytes; `None` for control tokens (never part of a call's text).
    bytes: Vec<Option<Box<[u8]>>>,
    /// Ids of plain tokens, sorted by their bytes.
    sorted: Vec<u32>,
    /// For each entry of `sorted`, the bytes it shares with the entry before it.
    lcp: Vec<u16>,
    /// For each string state ([`Text::index`]), the plain tokens a string may take next.
    in_string: Vec<Vec<u32>>,
    /// The `<|"|>` token.
    quote: u32,
    /// The `<tool_call|>` token.
    end: u32,
}

impl std::fmt::Debug for Vocab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vocab")
            .field("tokens", &self.bytes.len())
            .field("plain", &self.sorted.len())
            .finish()
    }
}

impl Vocab {
    /// A vocabulary from each id's bytes (`None`: a control token), with the ids of `<|"|>`
    /// and `<tool_call|>`.
    pub fn new(bytes: Vec<Option<Vec<u8>>>, quote: u32, end: u32) -> Self {
        let bytes: Vec<Option<Box<[u8]>>> = bytes
            .into_iter()
            .enumerate()
            .map(|(i, b)| {
                let special = i as u32 == quote || i as u32 == end;
                b.filter(|b| !b.is_empty() && !special)
                    .map(Vec::into_boxed_slice)
            })
            .collect();
        let mut sorted: Vec<u32> = (0..bytes.len() as u32)
            .filter(|&i| bytes[i as usize].is_some())
            .collect();
        let of = |i: u32| bytes[i as usize].as_deref().unwrap_or_default();
        sorted.sort_by(|&a, &b| of(a).cmp(of(b)).then(a.cmp(&b)));
        let mut lcp = Vec::with_capacity(sorted.len());
        for (k, &id) in sorted.iter().enumerate() {
            let shared = match k {
                0 => 0,
                _ => common(of(sorted[k - 1]), of(id)),
            };
            lcp.push(shared.min(u16::MAX as usize) as u16);
        }
        let in_string = (0..Text::STATES)
            .map(|s| {
                let start = Text::from_index(s);
                sorted
                    .iter()
                    .copied()
                    .filter(|&id| of(id).iter().try_fold(start, |x, &b| x.push(b)).is_some())
                    .collect()
            })
            .collect();
        Self {
            bytes,
            sorted,
            lcp,
            in_string,
            quote,
            end,
        }
    }

    /// The symbols token `id` stands for, if it may be part of a call.
    fn syms(&self, id: u32) -> Option<Vec<Sym>> {
        if id == self.quote {
            return Some(vec![Sym::Quote]);
        }
        if id == self.end {
            return Some(vec![Sym::End]);
        }
        let b = self.bytes.get(id as usize)?.as_deref()?;
        Some(b.iter().map(|&b| Sym::Byte(b)).collect())
    }

    /// Advances `m` by token `id`; `false` (and `m` unchanged) when the call may not take it.
    pub fn feed(&self, m: &mut Matcher, id: u32) -> bool {
        match self.syms(id) {
            Some(syms) => m.advance_all(&syms),
            None => false,
        }
    }

    /// Every token `m` may take next, in id order within each kind.
    pub fn allowed(&self, m: &Matcher) -> Vec<u32> {
        let mut out = match m.text_state() {
            Some(x) => self.in_string[x.index()].clone(),
            None => self.walk(m),
        };
        if m.stepped(Sym::Quote).is_some() {
            out.push(self.quote);
        }
        if m.stepped(Sym::End).is_some() {
            out.push(self.end);
        }
        out
    }

    /// The plain tokens `m` accepts, walking the sorted vocabulary: a refused prefix skips
    /// every token that starts with it.
    fn walk(&self, m: &Matcher) -> Vec<u32> {
        let mut out = Vec::new();
        // states[d]: the matcher after the current token's first d bytes.
        let mut states: Vec<Matcher> = vec![m.clone()];
        let mut k = 0;
        while k < self.sorted.len() {
            let id = self.sorted[k];
            let bytes = self.bytes[id as usize].as_deref().unwrap_or_default();
            states.truncate(self.lcp[k] as usize + 1);
            let mut refused_at = None;
            while states.len() <= bytes.len() {
                let d = states.len() - 1;
                match states[d].stepped(Sym::Byte(bytes[d])) {
                    Some(next) => states.push(next),
                    None => {
                        refused_at = Some(d);
                        break;
                    }
                }
            }
            k += 1;
            match refused_at {
                None => out.push(id),
                // Every later token that shares the refused prefix is refused too.
                Some(d) => {
                    while k < self.sorted.len() && self.lcp[k] as usize > d {
                        k += 1;
                    }
                }
            }
        }
        out
    }

    /// The token that starts the shortest completion of the call: the longest plain token that
    /// spells a prefix of it (or the quote or end token). Empty only if the call cannot be
    /// completed, which the grammar's analysis rules out.
    pub fn forced(&self, m: &Matcher) -> Vec<u32> {
        let Some(rest) = m.completion() else {
            return self.allowed(m);
        };
        let run: Vec<u8> = rest
            .iter()
            .map_while(|s| match s {
                Sym::Byte(b) => Some(*b),
                _ => None,
            })
            .collect();
        match rest.first() {
            Some(Sym::Quote) => return vec![self.quote],
            Some(Sym::End) => return vec![self.end],
            None => return Vec::new(),
            Some(Sym::Byte(_)) => {}
        }
        let of = |i: u32| self.bytes[i as usize].as_deref().unwrap_or_default();
        for len in (1..=run.len().min(32)).rev() {
            let prefix = &run[..len];
            if let Ok(k) = self.sorted.binary_search_by(|&id| of(id).cmp(prefix)) {
                let id = self.sorted[k];
                if self.feed(&mut m.clone(), id) {
                    return vec![id];
                }
            }
        }
        self.allowed(m)
    }
}

/// How many leading bytes `a` and `b` share.
fn common(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}
