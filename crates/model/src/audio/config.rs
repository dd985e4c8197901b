//! A checkpoint's audio side read from its `config.json` (`audio_config`, transformers'
//! `Gemma4AudioConfig`): the conformer's geometry, its chunked attention, and the audio ids of
//! the prompt layout. Owns no weights.

use serde_json::{Map, Value};

/// Everything about a checkpoint's audio tower (E2B/E4B's USM conformer) and its prompts.
#[derive(Debug, Clone, PartialEq)]
pub struct AudioSpec {
    /// Log-mel bins a feature frame (128).
    pub mel_bins: usize,
    /// Channels of the two stride-2 subsampling convolutions (`subsampling_conv_channels`).
    pub conv_channels: [usize; 2],
    /// Width of the conformer (`hidden_size`).
    pub hidden: usize,
    /// Conformer layers.
    pub layers: usize,
    /// Attention heads (each `hidden / heads` wide).
    pub heads: usize,
    /// Kernel of the light conv's causal depthwise convolution (`conv_kernel_size`).
    pub conv_kernel: usize,
    /// Weight of each half-step FFN's output in its residual (`residual_weight`, ½).
    pub residual_weight: f32,
    /// Frames a query block (`attention_chunk_size`).
    pub chunk: usize,
    /// `attention_context_left`: the block sees `left − 1` frames before it, and a query the
    /// `left − 1` frames up to itself.
    pub context_left: usize,
    /// `attention_context_right`: frames after.
    pub context_right: usize,
    /// Attention logits are `cap · tanh(l / cap)` (`attention_logit_cap`).
    pub logit_cap: f32,
    /// The logit a masked key gets (`attention_invalid_logits_value`).
    pub invalid_logit: f32,
    /// Bound of the clamps around the norms (`gradient_clipping`).
    pub gradient_clipping: f32,
    /// Every projection clamps its input and output (`use_clipped_linears`).
    pub clipped: bool,
    /// ε of the conv block's norms, the subsampling LayerNorms and the embedder's RMSNorm.
    pub eps: f64,
    /// Width of the tower's output projection (`output_proj_dims`).
    pub output_dims: usize,
    /// Width of the text decoder, which `embed_audio` maps to.
    pub text_hidden: usize,
    /// The soft-token placeholder id (`<|audio|>`).
    pub audio_token_id: u32,
    /// The id before a clip's placeholders (`<|audio>`).
    pub boa_token_id: u32,
    /// The id after them (`<audio|>`).
    pub eoa_token_id: u32,
}

impl AudioSpec {
    /// The audio side of a parsed `config.json`, `None` when it has no `audio_config`. The error
    /// names the offending field.
    pub fn from_json(root: &Value) -> Result<Option<Self>, String> {
        Self::read(root).map_err(|msg| crate::model::config::written_by(root, msg))
    }

    fn read(root: &Value) -> Result<Option<Self>, String> {
        let Some(root) = root.as_object() else {
            return Err("the top level is not an object".into());
        };
        let Some(a) = root.get("audio_config").and_then(Value::as_object) else {
            return Ok(None);
        };
        crate::model::config::one_geometry(a, "audio_config")?;
        let text = root
            .get("text_config")
            .and_then(Value::as_object)
            .ok_or("an audio_config without a text_config")?;
        let get = |m: &Map<String, Value>, key: &str, default: Option<u64>, at: &str| {
            match m.get(key) {
                Some(Value::Null) | None => default,
                Some(v) => v.as_u64(),
            }
            .filter(|&n| n > 0 && n < 1 << 24)
            .map(|n| n as usize)
            .ok_or_else(|| format!("`{at}{key}` is missing or not a positive integer"))
        };
        let num = |key: &str, default: u64| get(a, key, Some(default), "audio_config.");
        let real = |key: &str, default: f64| match a.get(key) {
            Some(Value::Null) | None => Ok(default),
            Some(v) => v
                .as_f64()
                .ok_or_else(|| format!("`audio_config.{key}` is not a number")),
        };
        let id = |keys: &[&str], default: u64| {
            let key = keys
                .iter()
                .find(|k| root.get(**k).is_some_and(|v| !v.is_null()))
                .unwrap_or(&keys[0]);
            get(root, key, Some(default), "").map(|n| n as u32)
        };
        let channels = conv_channels(a)?;
        check_activation(a)?;
        let spec = Self {
            mel_bins: num("input_feat_size", 128)?,
            conv_channels: channels,
            hidden: num("hidden_size", 1024)?,
            layers: num("num_hidden_layers", 12)?,
            heads: num("num_attention_heads", 8)?,
            conv_kernel: num("conv_kernel_size", 5)?,
            residual_weight: real("residual_weight", 0.5)? as f32,
            chunk: num("attention_chunk_size", 12)?,
            context_left: num("attention_context_left", 13)?,
            context_right: match a.get("attention_context_right") {
                Some(Value::Null) | None => 0,
                Some(v) => v
                    .as_u64()
                    .ok_or("`audio_config.attention_context_right` is not a non-negative integer")?
                    as usize,
            },
            logit_cap: real("attention_logit_cap", 50.0)? as f32,
            invalid_logit: real("attention_invalid_logits_value", -1.0e9)? as f32,
            gradient_clipping: real("gradient_clipping", 1e10)?.min(f32::MAX as f64) as f32,
            clipped: a
                .get("use_clipped_linears")
                .and_then(Value::as_bool)
                .unwrap_or(true),
            eps: real("rms_norm_eps", 1e-6)?,
            output_dims: num("output_proj_dims", 1536)?,
            text_hidden: get(text, "hidden_size", None, "text_config.")?,
            audio_token_id: id(&["audio_token_id"], 258_881)?,
            boa_token_id: id(&["boa_token_id"], 256_000)?,
            eoa_token_id: id(&["eoa_token_id", "eoa_token_index"], 258_883)?,
        };
        spec.check().map(|()| Some(spec))
    }

    /// Refuses a geometry the tower cannot run.
    pub(crate) fn check(&self) -> Result<(), String> {
        if !self.hidden.is_multiple_of(self.heads) || !self.hidden.is_multiple_of(2) {
            return Err(format!(
                "audio_config: width {} over {} heads is not a Gemma 4 audio tower",
                self.hidden, self.heads
            ));
        }
        if self.context_left == 0 || self.mel_bins < 4 {
            return Err(
                "audio_config: attention_context_left is 0 or the mel bins fewer than 4".into(),
            );
        }
        Ok(())
    }

    /// Width of a head.
    pub fn head_dim(&self) -> usize {
        self.hidden / self.heads
    }

    /// Keys a query block sees: the block, `left − 1` frames before it and `right` after.
    pub fn context(&self) -> usize {
        self.chunk + self.context_left - 1 + self.context_right
    }

    /// Mel bins after the two stride-2 convolutions (each `⌈n / 2⌉`).
    pub fn subsampled_bins(&self) -> usize {
        self.mel_bins.div_ceil(2).div_ceil(2)
    }
}

/// `subsampling_conv_channels`: two positive integers (transformers' default `[128, 32]`).
fn conv_channels(a: &Map<String, Value>) -> Result<[usize; 2], String> {
    match a.get("subsampling_conv_channels") {
        None | Some(Value::Null) => Ok([128, 32]),
        Some(v) => {
            let list: Vec<usize> = v
                .as_array()
                .map(|l| l.iter().filter_map(Value::as_u64).map(|n| n as usize))
                .into_iter()
                .flatten()
                .filter(|&n| n > 0)
                .collect();
            <[usize; 2]>::try_from(list).map_err(|_| {
                "`audio_config.subsampling_conv_channels` is not two positive integers".to_string()
            })
        }
    }
}

/// `hidden_act`: the tower's SiLU (`swish` is its other name).
fn check_activation(a: &Map<String, Value>) -> Result<(), String> {
    let act = a
        .get("hidden_act")
        .and_then(Value::as_str)
        .unwrap_or("silu");
    if act != "silu" && act != "swish" {
        return Err(format!(
            "`audio_config.hidden_act` is `{act}`: Gemma 4's audio tower uses silu"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(audio: Value) -> Value {
        serde_json::json!({
            "text_config": {"hidden_size": 64},
            "audio_config": audio,
            "audio_token_id": 506, "boa_token_id": 504, "eoa_token_index": 505,
        })
    }

    #[test]
    fn defaults_are_the_e2b_tower() {
        let s = AudioSpec::from_json(&root(serde_json::json!({})))
            .expect("parses")
            .expect("has audio");
        assert_eq!(
            (s.hidden, s.layers, s.heads, s.head_dim()),
            (1024, 12, 8, 128)
        );
        assert_eq!(s.conv_channels, [128, 32]);
        assert_eq!((s.chunk, s.context(), s.subsampled_bins()), (12, 24, 32));
        assert_eq!(
            (s.audio_token_id, s.boa_token_id, s.eoa_token_id),
            (506, 504, 505)
        );
        assert_eq!((s.output_dims, s.text_hidden), (1536, 64));
        assert!(s.clipped && s.logit_cap == 50.0 && s.invalid_logit == -1e9);
    }

    #[test]
    fn no_audio_config_is_none_and_bad_fields_are_named() {
        let none = serde_json::json!({"text_config": {"hidden_size": 8}});
        assert_eq!(AudioSpec::from_json(&none), Ok(None));
        let err =
            AudioSpec::from_json(&root(serde_json::json!({"subsampling_conv_channels": [4]})))
                .expect_err("one channel count");
        assert!(err.contains("subsampling_conv_channels"), "{err}");
        let err = AudioSpec::from_json(&root(
            serde_json::json!({"hidden_size": 30, "num_attention_heads": 4}),
        ))
        .expect_err("uneven heads");
        assert!(err.contains("30 over 4 heads"), "{err}");
        let err = AudioSpec::from_json(&root(serde_json::json!({"hidden_act": "gelu"})))
            .expect_err("another activation");
        assert!(err.contains("hidden_act"), "{err}");
    }
}
