//! GGUF files built byte by byte for tests: typed metadata, tensor infos, a data section.

/// A metadata value to write.
pub enum V<'a> {
    U32(u32),
    U64(u64),
    Str(&'a str),
    /// Raw bytes after the type id (for malformed values).
    Raw(u32, Vec<u8>),
}

/// A GGUF v3 file from its parts: metadata, tensor infos `(name, dims, type, offset)`, and
/// `data` bytes after the aligned header.
pub fn gguf(kv: &[(&str, V<'_>)], tensors: &[(&str, &[u64], u32, u64)], data: usize) -> Vec<u8> {
    let mut b = Vec::new();
    let s = |b: &mut Vec<u8>, t: &str| {
        b.extend((t.len() as u64).to_le_bytes());
        b.extend(t.as_bytes());
    };
    b.extend(b"GGUF");
    b.extend(3u32.to_le_bytes());
    b.extend((tensors.len() as u64).to_le_bytes());
    b.extend((kv.len() as u64).to_le_bytes());
    for (k, v) in kv {
        s(&mut b, k);
        match v {
            V::U32(x) => {
                b.extend(4u32.to_le_bytes());
                b.extend(x.to_le_bytes());
            }
            V::U64(x) => {
                b.extend(10u32.to_le_bytes());
                b.extend(x.to_le_bytes());
            }
            V::Str(t) => {
                b.extend(8u32.to_le_bytes());
                s(&mut b, t);
            }
            V::Raw(ty, bytes) => {
                b.extend(ty.to_le_bytes());
                b.extend(bytes);
            }
        }
    }
    for (name, dims, ty, offset) in tensors {
        s(&mut b, name);
        b.extend((dims.len() as u32).to_le_bytes());
        for d in *dims {
            b.extend(d.to_le_bytes());
        }
        b.extend(ty.to_le_bytes());
        b.extend(offset.to_le_bytes());
    }
    while b.len() % 32 != 0 {
        b.push(0);
    }
    b.extend(std::iter::repeat_n(0u8, data));
    b
}
