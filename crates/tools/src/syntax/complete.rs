//! Finishes a walk: the shortest symbols that take a [`Matcher`] from where it stands to the end
//! of the call (`<tool_call|>` accepted). The engine forces them when a call runs past its token
//! budget, so that a call always ends well-formed. Each thread's frames are finished from the top
//! of its stack down; the result is checked by feeding it, and the shortest that checks wins.

use super::grammar::{Graph, Node, NodeId, key_hash};
use super::matcher::{
    ArrPhase, CALL, Frame, KeyPos, MAX_KEY, Matcher, ObjPhase, RANGE, Root, Sym, Thread, Used,
};
use super::step::more_keys;

impl Matcher {
    /// The shortest symbols that complete the call from here, ending with the end symbol; `None`
    /// when no thread can be finished (a grammar the analysis let through by mistake).
    pub fn completion(&self) -> Option<Vec<Sym>> {
        let mut best: Option<Vec<Sym>> = None;
        for t in &self.threads {
            let Some(syms) = finish_thread(&self.g, t) else {
                continue;
            };
            if best.as_ref().is_some_and(|b| b.len() <= syms.len()) {
                continue;
            }
            let mut check = self.clone();
            if check.advance_all(&syms) && check.is_done() {
                best = Some(syms);
            }
        }
        best
    }
}

/// The symbols that finish `t`: its top frame, then each frame below once its child is done.
fn finish_thread(g: &Graph, t: &Thread) -> Option<Vec<Sym>> {
    let mut out = Vec::new();
    finish_frame(g, &t.top, &mut out)?;
    let mut below = t.below.clone();
    while let Some(link) = below {
        let mut frame = link.frame.clone();
        frame.child_done();
        finish_frame(g, &frame, &mut out)?;
        below = link.next.clone();
    }
    Some(out)
}

/// Appends what finishes the value `frame` is writing (its open child, if any, already done).
fn finish_frame(g: &Graph, frame: &Frame, out: &mut Vec<Sym>) -> Option<()> {
    match frame {
        Frame::Str(x) => {
            let mut x = *x;
            while !x.clean() {
                let b = RANGE[x.utf8 as usize].0;
                out.push(Sym::Byte(b));
                x = x.push(b)?;
            }
            out.push(Sym::Quote);
        }
        Frame::Num { st, .. } => {
            if !st.accepting() {
                out.push(Sym::Byte(b'0'));
            }
        }
        Frame::Lit { node, pos } => {
            let Node::Lit(lit) = &g.nodes[*node as usize] else {
                return None;
            };
            out.extend_from_slice(lit.get(*pos as usize..)?);
        }
        Frame::Obj {
            node,
            phase,
            used,
            n,
        } => finish_obj(g, *node, *phase, used, *n, out)?,
        Frame::Arr { node, phase, count } => finish_arr(g, *node, *phase, *count, out)?,
        Frame::Root(r) => finish_root(g, *r, out)?,
    }
    Some(())
}

fn finish_obj(
    g: &Graph,
    node: NodeId,
    phase: ObjPhase,
    used: &Used,
    n: u32,
    out: &mut Vec<Sym>,
) -> Option<()> {
    let o = g.obj(node);
    let mut used = used.clone();
    // Whether a key was written before the ones added here (a `,` goes first).
    let mut comma = true;
    match phase {
        ObjPhase::Open => comma = false,
        ObjPhase::Expect(v) => g.min_value(v, out),
        ObjPhase::Value | ObjPhase::AfterValue => {}
        ObjPhase::Key(k) => {
            let (key_rest, value, hash) = finish_key(g, node, &used, k)?;
            out.extend(key_rest.into_iter().map(Sym::Byte));
            out.push(Sym::Byte(b':'));
            g.min_value(value, out);
            used = used.with(hash);
        }
        ObjPhase::AfterComma => {
            let missing = o
                .required
                .iter()
                .any(|&r| !used.contains(o.hashes[r as usize]));
            if !missing {
                // A key must follow the comma: the cheapest one that may.
                let (key, value) = any_key(g, node, &used, n)?;
                let hash = key_hash(&key);
                out.extend(key.into_iter().map(Sym::Byte));
                out.push(Sym::Byte(b':'));
                g.min_value(value, out);
                used = used.with(hash);
            } else {
                comma = false;
            }
        }
    }
    for &r in &o.required {
        let r = r as usize;
        if used.contains(o.hashes[r]) {
            continue;
        }
        if comma {
            out.push(Sym::Byte(b','));
        }
        comma = true;
        out.extend(o.keys[r].iter().map(|&b| Sym::Byte(b)));
        out.push(Sym::Byte(b':'));
        g.min_value(o.values[r], out);
        used = used.with(o.hashes[r]);
    }
    out.push(Sym::Byte(b'}'));
    Some(())
}

/// The rest of a key being written, the value it takes and its hash.
fn finish_key(g: &Graph, node: NodeId, used: &Used, k: KeyPos) -> Option<(Vec<u8>, NodeId, u64)> {
    let o = g.obj(node);
    let declared = (k.lo..k.hi)
        .map(|i| i as usize)
        .filter(|&i| !used.contains(o.hashes[i]))
        .min_by_key(|&i| (o.keys[i].len() as u64).saturating_add(g.min[o.values[i] as usize]));
    if let Some(i) = declared {
        let rest = o.keys[i][k.len as usize..].to_vec();
        return Some((rest, o.values[i], o.hashes[i]));
    }
    // A free key: lengthened with `_` until it is new and no declared key.
    let free = o.free?;
    let mut key = k;
    let mut rest = Vec::new();
    loop {
        let fresh = key.len > 0 && key.ident && !used.contains(key.hash);
        if fresh && key.exact(&o.keys).is_none() {
            return Some((rest, free, key.hash));
        }
        if key.len >= MAX_KEY {
            return None;
        }
        rest.push(b'_');
        key = key.push(&o.keys, b'_');
    }
}

/// The cheapest key (with its value) that may be written after a comma.
fn any_key(g: &Graph, node: NodeId, used: &Used, n: u32) -> Option<(Vec<u8>, NodeId)> {
    let o = g.obj(node);
    if !more_keys(o, n) {
        return None;
    }
    let declared = (0..o.keys.len())
        .filter(|&i| !used.contains(o.hashes[i]))
        .min_by_key(|&i| (o.keys[i].len() as u64).saturating_add(g.min[o.values[i] as usize]));
    if let Some(i) = declared {
        return Some((o.keys[i].to_vec(), o.values[i]));
    }
    let free = o.free?;
    // `a`…`z`, then `a0`…`z9`: the first that is neither written nor declared.
    (0..26 * 11u32)
        .map(|i| {
            let mut key = vec![b'a' + (i % 26) as u8];
            if i >= 26 {
                key.push(b'0' + (i / 26 - 1) as u8);
            }
            key
        })
        .find(|key| {
            !used.contains(key_hash(key)) && o.keys.binary_search_by(|k| (**k).cmp(key)).is_err()
        })
        .map(|key| (key, free))
}

fn finish_arr(
    g: &Graph,
    node: NodeId,
    phase: ArrPhase,
    count: u32,
    out: &mut Vec<Sym>,
) -> Option<()> {
    let Node::Arr { items, min, .. } = g.nodes[node as usize] else {
        return None;
    };
    let mut count = count;
    match phase {
        ArrPhase::Open if min == 0 => {}
        ArrPhase::Open => {
            g.min_value(items, out);
            count = 1;
        }
        ArrPhase::AfterComma => {
            g.min_value(items, out);
            count += 1;
        }
        ArrPhase::Value | ArrPhase::AfterValue => {}
    }
    while count < min {
        out.push(Sym::Byte(b','));
        g.min_value(items, out);
        count += 1;
    }
    out.push(Sym::Byte(b']'));
    Some(())
}

fn finish_root(g: &Graph, r: Root, out: &mut Vec<Sym>) -> Option<()> {
    let name_cost =
        |t: usize| (g.names[t].len() as u64).saturating_add(g.min[g.params[t] as usize]);
    let (from, tool) = match r {
        Root::Prefix(i) => {
            out.extend(CALL[i as usize..].iter().map(|&b| Sym::Byte(b)));
            (0, (0..g.names.len()).min_by_key(|&t| name_cost(t))?)
        }
        Root::Name(k) => (
            k.len as usize,
            (k.lo as usize..k.hi as usize).min_by_key(|&t| name_cost(t))?,
        ),
        Root::Body | Root::AfterBody => {
            out.push(Sym::End);
            return Some(());
        }
        Root::Done => return Some(()),
    };
    out.extend(g.names[tool][from..].iter().map(|&b| Sym::Byte(b)));
    g.min_value(g.params[tool], out);
    out.push(Sym::End);
    Some(())
}
