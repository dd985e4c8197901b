//! Warm restart: the KV state of warm tabs saved to the cache dir on quit, and loaded back when
//! their conversation is restored, so that the next turn prefills only its own tokens. A file is
//! a safetensors file named by a hash of the conversation's ids; its metadata ties it to the model
//! (a fingerprint of the weight files), the dtype, the host KV type and the cache layout, with
//! checksums of the resident ids and of all the data. A host cache saves its values as it holds
//! them (f32, f16, or q8_0 blocks as bytes), so a restore is exact; one saved in another KV type
//! does not verify. A file that does not verify is ignored: the tab prefills
//! its history instead.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use burn::tensor::{DType, TensorData};
use safetensors::tensor::{Dtype as StDtype, SafeTensors, TensorView};
use sha2::{Digest, Sha256};

use super::images::Held;
use super::session::Session;
use gemma_files::write_atomic;
use gemma_model::error::{Error, Result};
use gemma_model::model::Gemma;
use gemma_model::model::config::ModelConfig;
use gemma_model::model::kv_cache::{HostKv, KvDtype, KvLayout, Q8_BYTES};

/// The file format's version (2: the host KV type in the layout, f16 and q8_0 host layers).
const VERSION: &str = "2";

/// Where and for which model the snapshots are kept.
#[derive(Debug, Clone)]
pub struct KvStore {
    dir: PathBuf,
    fingerprint: String,
    layout: String,
    cap: u64,
}

/// Whether every value of `bytes` (little-endian, of `dtype`) is finite.
fn all_finite(bytes: &[u8], dtype: DType) -> bool {
    match dtype {
        DType::F32 => bytes
            .chunks_exact(4)
            .all(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]).is_finite()),
        DType::F16 => bytes
            .chunks_exact(2)
            .all(|c| half::f16::from_le_bytes([c[0], c[1]]).is_finite()),
        DType::BF16 => bytes
            .chunks_exact(2)
            .all(|c| half::bf16::from_le_bytes([c[0], c[1]]).is_finite()),
        // q8_0 blocks: whole ones, each scale finite (the values are integers).
        DType::U8 => {
            bytes.len().is_multiple_of(Q8_BYTES)
                && bytes
                    .chunks_exact(Q8_BYTES)
                    .all(|c| half::f16::from_le_bytes([c[0], c[1]]).is_finite())
        }
        _ => false,
    }
}

/// A hex sha256 of token ids.
fn ids_hash(ids: &[u32]) -> String {
    let mut h = Sha256::new();
    for id in ids {
        h.update(id.to_le_bytes());
    }
    format!("{:x}", h.finalize())
}

/// A fingerprint of the weights at `path` (a file or a directory of them): sizes and the first
/// and last MiB of each weight file, hashed. Cheap at start-up, and it changes whenever the
/// weights are replaced.
pub fn fingerprint(path: &Path) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let mut files: Vec<PathBuf> = if path.is_dir() {
        std::fs::read_dir(path)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default()
    } else {
        vec![path.to_path_buf()]
    };
    files.retain(|p| {
        p.extension()
            .is_some_and(|e| e == "gguf" || e == "safetensors" || e == "json")
    });
    files.sort();
    let mut h = Sha256::new();
    for f in files {
        let Ok(mut file) = std::fs::File::open(&f) else {
            continue;
        };
        let len = file.metadata().map_or(0, |m| m.len());
        h.update(
            f.file_name()
                .map(|n| n.as_encoded_bytes().to_vec())
                .unwrap_or_default(),
        );
        h.update(len.to_le_bytes());
        let mut buf = vec![0u8; 1 << 20];
        for from in [0, len.saturating_sub(1 << 20)] {
            if file.seek(SeekFrom::Start(from)).is_ok() {
                let n = file.read(&mut buf).unwrap_or(0);
                h.update(&buf[..n]);
            }
        }
    }
    format!("{:x}", h.finalize())
}

/// A hex sha256 over named tensors' bytes, in name order.
fn data_hash<'a>(tensors: impl Iterator<Item = (&'a str, &'a [u8])>) -> String {
    let mut all: Vec<(&str, &[u8])> = tensors.collect();
    all.sort_by_key(|(n, _)| *n);
    let mut h = Sha256::new();
    for (name, data) in all {
        h.update(name.as_bytes());
        h.update((data.len() as u64).to_le_bytes());
        h.update(data);
    }
    format!("{:x}", h.finalize())
}

fn st_dtype(d: DType) -> Option<StDtype> {
    match d {
        DType::F32 => Some(StDtype::F32),
        DType::F16 => Some(StDtype::F16),
        DType::BF16 => Some(StDtype::BF16),
        DType::U8 => Some(StDtype::U8),
        _ => None,
    }
}

fn burn_dtype(d: StDtype) -> Option<DType> {
    match d {
        StDtype::F32 => Some(DType::F32),
        StDtype::F16 => Some(DType::F16),
        StDtype::BF16 => Some(DType::BF16),
        StDtype::U8 => Some(DType::U8),
        _ => None,
    }
}

impl KvStore {
    /// A store in `dir` for `model` (loaded from `model_path`), using at most `cap` bytes of
    /// disk.
    pub fn new(dir: PathBuf, model_path: &Path, model: &Gemma, cap: u64) -> Self {
        let cfg = model.config();
        let layout = cfg
            .layers
            .iter()
            .map(|l| format!("{:?}:{}x{}", l.kind, l.kv_heads, l.head_dim))
            .collect::<Vec<_>>()
            .join(",");
        let kv = model
            .host_kv_dtype()
            .map_or_else(|| "device".to_string(), |t| format!("kv-{t}"));
        let layout = format!(
            "{}|{:?}|{kv}|w{}|{layout}",
            cfg.model_type,
            model.dtype(),
            cfg.sliding_window
        );
        Self {
            dir,
            fingerprint: fingerprint(model_path),
            layout,
            cap,
        }
    }

    fn file(&self, convo: &[u32]) -> PathBuf {
        self.dir.join(format!("{}.kv", &ids_hash(convo)[..32]))
    }

    /// Removes every snapshot (before the current ones are written).
    pub fn clear(&self) {
        if let Ok(d) = std::fs::read_dir(&self.dir) {
            for e in d.flatten() {
                if e.path().extension().is_some_and(|x| x == "kv") {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
    }

    /// Saves `session` (whose conversation is `convo`) if it fits in what is left of the cap
    /// after `used` bytes; returns the bytes written.
    pub fn save(&self, convo: &[u32], session: &Session, used: u64) -> Result<u64> {
        self.save_if(convo, session, &mut |need| need + used <= self.cap)
    }

    /// Parks `session` (whose conversation is `convo`) for a later return while the store's
    /// other snapshots stay: the oldest are removed until it fits in the cap. Returns the bytes
    /// written (0: larger than the cap).
    pub fn park(&self, convo: &[u32], session: &Session) -> Result<u64> {
        let own = self.file(convo);
        self.save_if(convo, session, &mut |need| {
            if need > self.cap {
                return false;
            }
            let mut files: Vec<(std::time::SystemTime, u64, PathBuf)> =
                std::fs::read_dir(&self.dir)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .filter(|e| e.path().extension().is_some_and(|x| x == "kv") && e.path() != own)
                    .filter_map(|e| {
                        let m = e.metadata().ok()?;
                        Some((m.modified().ok()?, m.len(), e.path()))
                    })
                    .collect();
            files.sort();
            let mut used: u64 = files.iter().map(|f| f.1).sum();
            for (_, len, path) in files {
                if need + used <= self.cap {
                    break;
                }
                if std::fs::remove_file(&path).is_ok() {
                    used -= len;
                }
            }
            need + used <= self.cap
        })
    }

    /// Saves `session` when `fits` says its bytes fit.
    fn save_if(
        &self,
        convo: &[u32],
        session: &Session,
        fits: &mut dyn FnMut(u64) -> bool,
    ) -> Result<u64> {
        let Some((host, resident, images)) = session.export() else {
            return Ok(0);
        };
        if !fits(host.bytes() as u64) {
            return Ok(0);
        }
        let mut views = Vec::new();
        for (i, l) in host.layers().iter().enumerate() {
            let Some((k, v, start)) = l else { continue };
            for (name, t) in [("k", k), ("v", v)] {
                let dtype = st_dtype(t.dtype()).ok_or_else(|| {
                    Error::Invalid(format!("cannot save a {:?} cache", t.dtype()))
                })?;
                let view = TensorView::new(dtype, t.shape().to_vec(), t.as_bytes())
                    .map_err(|e| Error::Invalid(format!("cache layer {i}: {e}")))?;
                views.push((format!("{i}.{name}.{start}"), view));
            }
        }
        let ids: Vec<u8> = resident.iter().flat_map(|i| i.to_le_bytes()).collect();
        let ids_view = TensorView::new(StDtype::U32, vec![resident.len()], &ids)
            .map_err(|e| Error::Invalid(format!("resident ids: {e}")))?;
        views.push(("ids".into(), ids_view));
        // The pictures among the ids (start, end, key), so that a follow-up reuses them.
        let pictures: Vec<u8> = images
            .iter()
            .flat_map(|(span, key)| {
                let ends = [span.start as u64, span.end as u64];
                ends.into_iter().flat_map(u64::to_le_bytes).chain(*key)
            })
            .collect();
        if !pictures.is_empty() {
            let view = TensorView::new(StDtype::U8, vec![pictures.len()], &pictures)
                .map_err(|e| Error::Invalid(format!("pictures: {e}")))?;
            views.push(("pictures".into(), view));
        }
        let data_sha = data_hash(views.iter().map(|(n, v)| (n.as_str(), v.data())));
        let meta: HashMap<String, String> = [
            ("data_sha256", data_sha),
            ("version", VERSION.to_string()),
            ("fingerprint", self.fingerprint.clone()),
            ("layout", self.layout.clone()),
            ("len", host.len().to_string()),
            ("ids_sha256", ids_hash(resident)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let bytes = safetensors::serialize(views, Some(meta))
            .map_err(|e| Error::Invalid(format!("cannot encode the cache: {e}")))?;
        let path = self.file(convo);
        write_atomic(&path, &bytes).map_err(|e| Error::io(&path, e))?;
        Ok(bytes.len() as u64)
    }

    /// Loads the snapshot of `convo` into `session`, if there is one that verifies: same
    /// weights, layout and dtype, resident ids matching their checksum and a prefix of `convo`.
    pub fn load(&self, convo: &[u32], model: &Gemma, session: &mut Session) -> bool {
        let Ok(bytes) = std::fs::read(self.file(convo)) else {
            return false;
        };
        self.decode(
            &bytes,
            convo,
            model.config(),
            model.host_kv_dtype(),
            model.dtype(),
        )
        .is_some_and(|(host, ids, images)| session.import(host, ids, images))
    }

    fn decode(
        &self,
        bytes: &[u8],
        convo: &[u32],
        cfg: &ModelConfig,
        host: Option<KvDtype>,
        dtype: DType,
    ) -> Option<(HostKv, Vec<u32>, Vec<Held>)> {
        let (_, meta) = SafeTensors::read_metadata(bytes).ok()?;
        let meta = meta.metadata().as_ref()?;
        let get = |k: &str| meta.get(k).map(String::as_str);
        if get("version") != Some(VERSION)
            || get("fingerprint") != Some(self.fingerprint.as_str())
            || get("layout") != Some(self.layout.as_str())
        {
            return None;
        }
        let len: usize = get("len")?.parse().ok()?;
        let st = SafeTensors::deserialize(bytes).ok()?;
        let all = st.tensors();
        if get("data_sha256")
            != Some(data_hash(all.iter().map(|(n, v)| (n.as_str(), v.data()))).as_str())
        {
            return None;
        }
        let ids_t = st.tensor("ids").ok()?;
        let ids: Vec<u32> = ids_t
            .data()
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        if ids.len() != len
            || get("ids_sha256") != Some(ids_hash(&ids).as_str())
            || !convo.starts_with(&ids)
        {
            return None;
        }
        let mut layers = vec![None; cfg.num_layers()];
        for (name, _) in st.tensors() {
            let mut parts = name.split('.');
            let (Some(i), Some("k"), Some(start)) = (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let (i, start): (usize, usize) = (i.parse().ok()?, start.parse().ok()?);
            // What this layer's data must be: the host type's, or the compute dtype.
            let want = match host {
                Some(t) => t.stored(cfg.layers.get(i)?.head_dim).0,
                None => dtype,
            };
            let tensor = |which: &str| -> Option<TensorData> {
                let t = st.tensor(&format!("{i}.{which}.{start}")).ok()?;
                let d = burn_dtype(t.dtype()).filter(|d| *d == want)?;
                // Keys and values are finite: a NaN would poison every later step.
                all_finite(t.data(), d).then_some(())?;
                TensorData::try_from_bytes_vec(t.data().to_vec(), t.shape().to_vec(), d).ok()
            };
            *layers.get_mut(i)? = Some((tensor("k")?, tensor("v")?, start));
        }
        let host = HostKv::from_layers(cfg, layers, len, host)?;
        let images = match st.tensor("pictures") {
            Ok(t) => pictures(t.data())?,
            Err(_) => Vec::new(),
        };
        Some((host, ids, images))
    }
}

/// The pictures a snapshot lists: 48 bytes each (start, end, key).
fn pictures(bytes: &[u8]) -> Option<Vec<Held>> {
    if !bytes.len().is_multiple_of(48) {
        return None;
    }
    bytes
        .chunks_exact(48)
        .map(|c| {
            let n = |b: &[u8]| usize::try_from(u64::from_le_bytes(b.try_into().ok()?)).ok();
            Some((n(&c[..8])?..n(&c[8..16])?, c[16..].try_into().ok()?))
        })
        .collect()
}

#[cfg(test)]
#[path = "kv_store_tests.rs"]
mod tests;
