//! The config's settings that the protocol owns (`KvDtype`, `GpuWeights`, `ThinkingPolicy`),
//! read by their names as serde reads an enum's variants, with the same message for one that is
//! none of them.

use gemma_protocol::Named;
use serde::{Deserialize, Deserializer};

/// A [`Named`] setting read from its name.
pub fn by_name<'de, D: Deserializer<'de>, T: Named>(d: D) -> Result<T, D::Error> {
    let name = String::deserialize(d)?;
    T::ALL
        .iter()
        .copied()
        .find(|v| v.name() == name)
        .ok_or_else(|| serde::de::Error::unknown_variant(&name, T::NAMES))
}

/// [`by_name`] for an optional setting (a preset's).
pub fn by_name_opt<'de, D: Deserializer<'de>, T: Named>(d: D) -> Result<Option<T>, D::Error> {
    by_name(d).map(Some)
}

#[cfg(test)]
mod tests {
    use gemma_protocol::{GpuWeights, KvDtype, Named, ThinkingPolicy};
    use serde::Deserialize;

    #[derive(Deserialize)]
    struct Row {
        #[serde(deserialize_with = "super::by_name")]
        kv: KvDtype,
        #[serde(deserialize_with = "super::by_name")]
        gpu: GpuWeights,
        #[serde(deserialize_with = "super::by_name")]
        thinking: ThinkingPolicy,
    }

    #[test]
    fn names_are_the_files_own() {
        for &kv in KvDtype::ALL {
            let text = format!("kv = \"{kv}\"\ngpu = \"bf16\"\nthinking = \"keep\"");
            let row: Row = toml::from_str(&text).expect("parses");
            assert_eq!(
                (row.kv, row.gpu, row.thinking),
                (kv, GpuWeights::Bf16, ThinkingPolicy::Keep)
            );
        }
        let err = toml::from_str::<Row>("kv = \"q4_0\"\ngpu = \"bf16\"\nthinking = \"keep\"")
            .err()
            .expect("refused")
            .to_string();
        assert!(
            err.contains("unknown variant `q4_0`, expected one of `f32`, `f16`, `q8_0`"),
            "{err}"
        );
    }
}
