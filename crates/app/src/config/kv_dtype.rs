//! `model.kv_dtype`: what the KV cache keeps keys and values in on the CPU backend in f32. The
//! name only; the model crate's `KvDtype` is the type, parsed from [`KvDtype::as_str`].

use serde::Deserialize;

/// `model.kv_dtype`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub enum KvDtype {
    /// Plain f32: exact, twice f16's bytes.
    #[serde(rename = "f32")]
    F32,
    /// Half precision, as llama.cpp keeps it.
    #[default]
    #[serde(rename = "f16")]
    F16,
    /// llama.cpp's q8_0 blocks: 34 bytes per 32 values.
    #[serde(rename = "q8_0")]
    Q8_0,
}

impl KvDtype {
    /// The name as the file and `--kv-dtype` write it.
    pub fn as_str(self) -> &'static str {
        match self {
            KvDtype::F32 => "f32",
            KvDtype::F16 => "f16",
            KvDtype::Q8_0 => "q8_0",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_files_own() {
        #[derive(Deserialize)]
        struct Row {
            kv: KvDtype,
        }
        for t in [KvDtype::F32, KvDtype::F16, KvDtype::Q8_0] {
            let row: Row = toml::from_str(&format!("kv = \"{}\"", t.as_str())).expect("parses");
            assert_eq!(row.kv, t);
        }
        assert!(toml::from_str::<Row>("kv = \"q4_0\"").is_err());
    }
}
