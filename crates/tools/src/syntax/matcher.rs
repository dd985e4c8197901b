//! Walks the call graph one symbol at a time. A [`Matcher`] is a small set of parallel
//! threads (one per live `anyOf` alternative), each a stack of frames; parent frames are
//! shared through `Arc`s, so cloning a matcher is cheap. Its steps are `step.rs`; finishing a walk is
//! `complete.rs`.

use std::sync::Arc;

use super::grammar::{Graph, KEY_HASH_START, NodeId, key_hash_step};
pub(crate) use super::scalars::{NumSt, RANGE, Text};
use super::step::step;

/// One symbol of a call's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Sym {
    /// A byte of plain text.
    Byte(u8),
    /// The `<|"|>` token.
    Quote,
    /// The `<tool_call|>` token.
    End,
}

/// The call's opening, before the tool's name.
pub(crate) const CALL: &[u8] = b"call:";
/// The longest free (undeclared) key.
pub(crate) const MAX_KEY: u32 = 64;
/// Threads kept at most; beyond it extra alternatives are dropped (each kept one can finish).
const MAX_THREADS: usize = 64;

/// Where a call stands after the symbols fed so far: the state within the text after
/// `<|tool_call>`.
#[derive(Clone)]
pub struct Matcher {
    pub(crate) g: Arc<Graph>,
    pub(crate) threads: Vec<Thread>,
}

impl std::fmt::Debug for Matcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Matcher")
            .field("threads", &self.threads.len())
            .field("done", &self.is_done())
            .finish()
    }
}

#[derive(Clone)]
pub(crate) struct Thread {
    pub top: Frame,
    pub below: Stack,
}

pub(crate) type Stack = Option<Arc<Link>>;

pub(crate) struct Link {
    pub frame: Frame,
    pub next: Stack,
}

#[derive(Clone, PartialEq)]
pub(crate) enum Frame {
    Root(Root),
    Str(Text),
    Num {
        integer: bool,
        st: NumSt,
    },
    Lit {
        node: NodeId,
        pos: u32,
    },
    Obj {
        node: NodeId,
        phase: ObjPhase,
        used: Used,
        n: u32,
    },
    Arr {
        node: NodeId,
        phase: ArrPhase,
        count: u32,
    },
}

#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Root {
    Prefix(u8),
    Name(KeyPos),
    Body,
    AfterBody,
    Done,
}

/// A key (or tool name) being written: the sorted candidates `lo..hi` share its `len` bytes.
#[derive(Clone, Copy, PartialEq)]
pub(crate) struct KeyPos {
    pub lo: u32,
    pub hi: u32,
    pub len: u32,
    pub hash: u64,
    /// Whether the bytes so far make an identifier (`[A-Za-z_][A-Za-z0-9_]*`).
    pub ident: bool,
}

impl KeyPos {
    pub fn start(candidates: usize) -> Self {
        Self {
            lo: 0,
            hi: candidates as u32,
            len: 0,
            hash: KEY_HASH_START,
            ident: true,
        }
    }

    /// The candidates `lo..hi` narrowed by the next byte.
    pub fn push(self, keys: &[Box<[u8]>], b: u8) -> Self {
        let d = self.len as usize;
        let range = &keys[self.lo as usize..self.hi as usize];
        let lo = range.partition_point(|k| k.len() <= d || k[d] < b);
        let hi = range.partition_point(|k| k.len() <= d || k[d] <= b);
        let ident =
            self.ident && (b == b'_' || b.is_ascii_alphabetic() || (d > 0 && b.is_ascii_digit()));
        Self {
            lo: self.lo + lo as u32,
            hi: self.lo + hi as u32,
            len: self.len + 1,
            hash: key_hash_step(self.hash, b),
            ident,
        }
    }

    /// The candidate that is exactly the bytes so far.
    pub fn exact(self, keys: &[Box<[u8]>]) -> Option<usize> {
        let i = self.lo as usize;
        (self.lo < self.hi && keys[i].len() == self.len as usize).then_some(i)
    }
}

#[derive(Clone, Copy, PartialEq)]
pub(crate) enum ObjPhase {
    Open,
    Key(KeyPos),
    Expect(NodeId),
    Value,
    AfterValue,
    AfterComma,
}

#[derive(Clone, Copy, PartialEq)]
pub(crate) enum ArrPhase {
    Open,
    Value,
    AfterValue,
    AfterComma,
}

/// The keys an object has written, as hashes in a shared list (cloned by a count bump).
#[derive(Clone, Default)]
pub(crate) struct Used(Option<Arc<(u64, Used)>>);

impl Used {
    pub fn contains(&self, h: u64) -> bool {
        let mut at = &self.0;
        while let Some(link) = at {
            if link.0 == h {
                return true;
            }
            at = &link.1.0;
        }
        false
    }

    pub fn with(&self, h: u64) -> Used {
        Used(Some(Arc::new((h, self.clone()))))
    }
}

impl PartialEq for Used {
    fn eq(&self, o: &Self) -> bool {
        match (&self.0, &o.0) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Frame {
    /// The frame's state once the value it waited for is complete.
    pub fn child_done(&mut self) {
        match self {
            Frame::Obj { phase, .. } => *phase = ObjPhase::AfterValue,
            Frame::Arr { phase, count, .. } => {
                *phase = ArrPhase::AfterValue;
                *count += 1;
            }
            Frame::Root(r) => *r = Root::AfterBody,
            _ => {}
        }
    }
}

impl Matcher {
    pub(crate) fn new(g: Arc<Graph>) -> Self {
        let root = Thread {
            top: Frame::Root(Root::Prefix(0)),
            below: None,
        };
        Self {
            g,
            threads: vec![root],
        }
    }

    /// Feeds one symbol. `false`: the syntax does not allow it here, and nothing changed.
    pub fn advance(&mut self, s: Sym) -> bool {
        match self.stepped(s) {
            Some(m) => {
                *self = m;
                true
            }
            None => false,
        }
    }

    /// Feeds symbols, all or none.
    pub fn advance_all(&mut self, syms: &[Sym]) -> bool {
        let mut m = self.clone();
        if syms.iter().all(|&s| m.advance(s)) {
            *self = m;
            return true;
        }
        false
    }

    /// Feeds text, all or none: `<|"|>` in it counts as the quote symbol, `<tool_call|>` as the
    /// end (a convenience for tests and for checking decoded text).
    pub fn advance_text(&mut self, text: &str) -> bool {
        self.advance_all(&text_syms(text))
    }

    /// Whether the call is complete (`<tool_call|>` accepted).
    pub fn is_done(&self) -> bool {
        self.threads
            .iter()
            .any(|t| t.top == Frame::Root(Root::Done))
    }

    /// The matcher after `s`, if `s` is allowed.
    pub(crate) fn stepped(&self, s: Sym) -> Option<Matcher> {
        let mut out = Vec::new();
        for t in &self.threads {
            step(&self.g, t.clone(), s, &mut out);
        }
        if out.is_empty() {
            return None;
        }
        dedup(&mut out);
        Some(Matcher {
            g: self.g.clone(),
            threads: out,
        })
    }

    /// The string state all threads share, when every one is inside a string.
    pub(crate) fn text_state(&self) -> Option<Text> {
        let mut state = None;
        for t in &self.threads {
            match (&t.top, state) {
                (Frame::Str(x), None) => state = Some(*x),
                (Frame::Str(x), Some(s)) if *x == s => {}
                _ => return None,
            }
        }
        state
    }
}

/// `<|"|>` and `<tool_call|>` as symbols, the rest as bytes.
pub(crate) fn text_syms(text: &str) -> Vec<Sym> {
    let quote = super::format::QUOTE.as_bytes();
    let end = super::parse::CALL_CLOSE.as_bytes();
    let mut out = Vec::with_capacity(text.len());
    let mut rest = text.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        if let Some(r) = rest.strip_prefix(quote) {
            out.push(Sym::Quote);
            rest = r;
        } else if let Some(r) = rest.strip_prefix(end) {
            out.push(Sym::End);
            rest = r;
        } else {
            out.push(Sym::Byte(b));
            rest = tail;
        }
    }
    out
}

fn dedup(threads: &mut Vec<Thread>) {
    let mut kept: Vec<Thread> = Vec::with_capacity(threads.len());
    for t in threads.drain(..) {
        let same = |u: &Thread| {
            u.top == t.top
                && match (&u.below, &t.below) {
                    (None, None) => true,
                    (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                    _ => false,
                }
        };
        if kept.len() < MAX_THREADS && !kept.iter().any(same) {
            kept.push(t);
        }
    }
    *threads = kept;
}
