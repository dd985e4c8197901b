//! One symbol's step through the call graph: each frame kind's transitions (strings, numbers,
//! literals, objects and their keys, arrays, the call's root) and the start of a value under its
//! parent. The [`Matcher`](super::Matcher) runs every thread through [`step`].

use std::sync::Arc;

use super::grammar::{Graph, Node, NodeId, ObjNode};
use super::matcher::{
    ArrPhase, CALL, Frame, KeyPos, Link, MAX_KEY, NumSt, ObjPhase, Root, Stack, Sym, Text, Thread,
    Used,
};

/// The parent of a finished frame, resumed.
fn resume(below: &Stack) -> Option<Thread> {
    let link = below.as_ref()?;
    let mut top = link.frame.clone();
    top.child_done();
    Some(Thread {
        top,
        below: link.next.clone(),
    })
}

pub(crate) fn step(g: &Graph, t: Thread, s: Sym, out: &mut Vec<Thread>) {
    let Thread { top, below } = t;
    let mut keep = |top: Frame| {
        out.push(Thread {
            top,
            below: below.clone(),
        })
    };
    match top {
        Frame::Str(x) => match s {
            Sym::Quote if x.clean() => out.extend(resume(&below)),
            Sym::Byte(b) => {
                if let Some(x) = x.push(b) {
                    keep(Frame::Str(x));
                }
            }
            _ => {}
        },
        Frame::Num { integer, st } => {
            let next = match s {
                Sym::Byte(b) => st.next(integer, b),
                _ => None,
            };
            match next {
                Some(st) => keep(Frame::Num { integer, st }),
                None if st.accepting() => {
                    if let Some(parent) = resume(&below) {
                        step(g, parent, s, out);
                    }
                }
                None => {}
            }
        }
        Frame::Lit { node, pos } => {
            let Node::Lit(lit) = &g.nodes[node as usize] else {
                return;
            };
            if lit.get(pos as usize) == Some(&s) {
                if pos as usize + 1 == lit.len() {
                    out.extend(resume(&below));
                } else {
                    keep(Frame::Lit { node, pos: pos + 1 });
                }
            }
        }
        Frame::Obj {
            node,
            phase,
            used,
            n,
        } => obj_step(g, (node, phase, used, n), below, s, out),
        Frame::Arr { node, phase, count } => arr_step(g, (node, phase, count), below, s, out),
        Frame::Root(r) => root_step(g, r, s, out),
    }
}

fn obj_step(
    g: &Graph,
    (node, phase, used, n): (NodeId, ObjPhase, Used, u32),
    below: Stack,
    s: Sym,
    out: &mut Vec<Thread>,
) {
    let o = g.obj(node);
    let frame = |phase, used, n| Frame::Obj {
        node,
        phase,
        used,
        n,
    };
    let next = match (phase, s) {
        (ObjPhase::Expect(v), _) => {
            return spawn(g, frame(ObjPhase::Value, used, n), below, v, s, out);
        }
        (ObjPhase::Open | ObjPhase::AfterValue, Sym::Byte(b'}')) => {
            if o.required
                .iter()
                .all(|&r| used.contains(o.hashes[r as usize]))
            {
                out.extend(resume(&below));
            }
            return;
        }
        (ObjPhase::Open | ObjPhase::AfterComma, Sym::Byte(b)) => {
            key_push(o, &used, KeyPos::start(o.keys.len()), b)
                .map(|k| frame(ObjPhase::Key(k), used, n))
        }
        (ObjPhase::Key(k), Sym::Byte(b':')) => key_end(o, &used, k).map(|v| {
            let used = used.with(k.hash);
            frame(ObjPhase::Expect(v), used, n + 1)
        }),
        (ObjPhase::Key(k), Sym::Byte(b)) => {
            key_push(o, &used, k, b).map(|k| frame(ObjPhase::Key(k), used, n))
        }
        (ObjPhase::AfterValue, Sym::Byte(b',')) if more_keys(o, n) => {
            Some(frame(ObjPhase::AfterComma, used, n))
        }
        _ => None,
    };
    if let Some(top) = next {
        out.push(Thread { top, below });
    }
}

/// Whether another key can follow a `,` (so that no `,` leads to a dead end).
pub(crate) fn more_keys(o: &ObjNode, n: u32) -> bool {
    o.free.is_some() || (n as usize) < o.keys.len()
}

/// The key after one more byte, if some key can still be finished from it.
fn key_push(o: &ObjNode, used: &Used, k: KeyPos, b: u8) -> Option<KeyPos> {
    let k = k.push(&o.keys, b);
    let declared = (k.lo..k.hi).any(|i| !used.contains(o.hashes[i as usize]));
    let free = o.free.is_some()
        && k.ident
        && (k.len < MAX_KEY
            || (k.len == MAX_KEY && !used.contains(k.hash) && k.exact(&o.keys).is_none()));
    (declared || free).then_some(k)
}

/// The value a finished key takes, if the key may be written here.
fn key_end(o: &ObjNode, used: &Used, k: KeyPos) -> Option<NodeId> {
    if k.len == 0 {
        return None;
    }
    match k.exact(&o.keys) {
        Some(i) => (!used.contains(o.hashes[i])).then(|| o.values[i]),
        None => o.free.filter(|_| k.ident && !used.contains(k.hash)),
    }
}

fn arr_step(
    g: &Graph,
    (node, phase, count): (NodeId, ArrPhase, u32),
    below: Stack,
    s: Sym,
    out: &mut Vec<Thread>,
) {
    let Node::Arr { items, min, max } = g.nodes[node as usize] else {
        return;
    };
    let frame = |phase, count| Frame::Arr { node, phase, count };
    match (phase, s) {
        (ArrPhase::Open, Sym::Byte(b']')) if min == 0 => out.extend(resume(&below)),
        (ArrPhase::AfterValue, Sym::Byte(b']')) if count >= min => out.extend(resume(&below)),
        (ArrPhase::AfterValue, Sym::Byte(b',')) if count < max => out.push(Thread {
            top: frame(ArrPhase::AfterComma, count),
            below,
        }),
        (ArrPhase::Open | ArrPhase::AfterComma, _) if count < max => {
            spawn(g, frame(ArrPhase::Value, count), below, items, s, out)
        }
        _ => {}
    }
}

fn root_step(g: &Graph, r: Root, s: Sym, out: &mut Vec<Thread>) {
    let next = match (r, s) {
        (Root::Prefix(i), Sym::Byte(b)) if CALL[i as usize] == b => {
            if i as usize + 1 == CALL.len() {
                Root::Name(KeyPos::start(g.names.len()))
            } else {
                Root::Prefix(i + 1)
            }
        }
        (Root::Name(k), Sym::Byte(b'{')) => {
            if let Some(t) = k.exact(&g.names) {
                spawn(g, Frame::Root(Root::Body), None, g.params[t], s, out);
            }
            return;
        }
        (Root::Name(k), Sym::Byte(b)) => {
            let k = k.push(&g.names, b);
            if k.lo == k.hi {
                return;
            }
            Root::Name(k)
        }
        (Root::AfterBody, Sym::End) => Root::Done,
        _ => return,
    };
    out.push(Thread {
        top: Frame::Root(next),
        below: None,
    });
}

/// The frame a value of concrete node `alt` starts with on symbol `s`; `Ok(None)` when that
/// one symbol is the whole value.
fn first_frame(g: &Graph, alt: NodeId, s: Sym) -> Result<Option<Frame>, ()> {
    let frame = match (&g.nodes[alt as usize], s) {
        (Node::Str, Sym::Quote) => Frame::Str(Text::OPEN),
        (Node::Num { integer }, Sym::Byte(b)) => match NumSt::start(b) {
            Some(st) => Frame::Num {
                integer: *integer,
                st,
            },
            None => return Err(()),
        },
        (Node::Lit(l), _) if l.first() == Some(&s) => {
            if l.len() == 1 {
                return Ok(None);
            }
            Frame::Lit { node: alt, pos: 1 }
        }
        (Node::Obj(_), Sym::Byte(b'{')) => Frame::Obj {
            node: alt,
            phase: ObjPhase::Open,
            used: Used::default(),
            n: 0,
        },
        (Node::Arr { .. }, Sym::Byte(b'[')) => Frame::Arr {
            node: alt,
            phase: ArrPhase::Open,
            count: 0,
        },
        _ => return Err(()),
    };
    Ok(Some(frame))
}

/// Starts a value of `node` with symbol `s` under `parent` (already waiting for it): one
/// thread per alternative that takes `s`.
fn spawn(g: &Graph, parent: Frame, below: Stack, node: NodeId, s: Sym, out: &mut Vec<Thread>) {
    let alts = &g.alts[node as usize];
    // Most symbols start no alternative: check before allocating the parent's link.
    if !alts.iter().any(|&a| first_frame(g, a, s).is_ok()) {
        return;
    }
    let link = Some(Arc::new(Link {
        frame: parent,
        next: below,
    }));
    for &alt in alts.iter() {
        match first_frame(g, alt, s) {
            Ok(Some(top)) => out.push(Thread {
                top,
                below: link.clone(),
            }),
            Ok(None) => out.extend(resume(&link)),
            Err(()) => {}
        }
    }
}
