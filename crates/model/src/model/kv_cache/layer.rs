//! One layer's keys and values: burn tensors on a GPU (or for a CPU model in f16/bf16), host
//! buffers in the cache's [`KvDtype`] on the CPU backend in f32, where the fused host step reads
//! and appends them without a tensor op. Both keep spare capacity and grow by a quarter.

use std::ops::Range;

use burn::tensor::{DType, Device, Tensor, TensorData};

use super::dtype::{KvDtype, KvLayout};
use super::host_buf::{HostBuf, Rows};

/// Keys and values of one layer.
#[derive(Debug, Clone)]
pub struct LayerKv {
    store: Store,
    /// Live positions.
    len: usize,
    /// Logical position of the first live entry.
    pub start: usize,
}

// One per layer: the size of the device variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
enum Store {
    /// `[kv_heads, capacity, head_dim]`; the first `len` positions are live.
    Device { k: Tensor<3>, v: Tensor<3> },
    /// Position-major `[len, kv_heads, head_dim]` on the host, in the layer's [`KvDtype`]
    /// (capacity spare).
    Host {
        k: HostBuf,
        v: HostBuf,
        heads: usize,
        dim: usize,
        device: Device,
    },
}

/// Live keys and values on the host: `[len, heads, dim]` each, position-major.
pub struct HostView<'a> {
    /// Keys.
    pub k: Rows<'a>,
    /// Values.
    pub v: Rows<'a>,
    /// KV heads.
    pub heads: usize,
    /// Values per head.
    pub dim: usize,
    /// Live positions.
    pub len: usize,
}

/// Whether a layer with this device and dtype keeps its cache on the host.
fn host_store(device: &Device, dtype: DType) -> bool {
    dtype == DType::F32 && crate::backend::is_host(device)
}

impl LayerKv {
    /// An empty layer for keys like `k` (`[heads, _, dim]`), starting at position `start`: on
    /// the host in `host` where the cache keeps host layers and `k` is f32 on the CPU.
    pub(super) fn empty_like(k: &Tensor<3>, start: usize, host: Option<KvDtype>) -> Self {
        let [heads, _, dim] = k.dims();
        let store = match host.filter(|_| host_store(&k.device(), k.dtype())) {
            Some(t) => return Self::empty_host(heads, dim, &k.device(), start, t),
            None => Store::Device {
                k: k.zeros_like().slice([0..heads, 0..0, 0..dim]),
                v: k.zeros_like().slice([0..heads, 0..0, 0..dim]),
            },
        };
        Self {
            store,
            len: 0,
            start,
        }
    }

    /// An empty host layer in `t` (or f16 where `t` does not fit the head width).
    pub(super) fn empty_host(
        heads: usize,
        dim: usize,
        device: &Device,
        start: usize,
        t: KvDtype,
    ) -> Self {
        let t = t.for_dim(dim);
        Self {
            store: Store::Host {
                k: HostBuf::new(t),
                v: HostBuf::new(t),
                heads,
                dim,
                device: device.clone(),
            },
            len: 0,
            start,
        }
    }

    /// A layer holding `k` and `v` (`[heads, len, width]`, as [`LayerKv::data`] gives them) from
    /// position `start`, on `device`: a host layer in `host` (its data in that type, as
    /// [`KvDtype::stored`] says), else tensors.
    ///
    /// # Panics
    /// When host data is not of the type `host` names (the caller checked it).
    pub(super) fn from_data(
        k: TensorData,
        v: TensorData,
        start: usize,
        device: &Device,
        host: Option<KvDtype>,
    ) -> Self {
        let (dims, dtype) = (k.shape().to_vec(), k.dtype());
        let (heads, len) = (dims[0], dims[1]);
        if let Some(t) = host.filter(|_| crate::backend::is_host(device)) {
            // q8_0 saves 34 bytes per 32 values.
            let dim = match dtype {
                DType::U8 => dims[2] / super::dtype::Q8_BYTES * super::dtype::Q8_BLOCK,
                _ => dims[2],
            };
            let read = |d| HostBuf::from_data(t, d, dim).expect("host data of the cache's type");
            return Self {
                store: Store::Host {
                    k: read(k),
                    v: read(v),
                    heads,
                    dim,
                    device: device.clone(),
                },
                len,
                start,
            };
        }
        let vd = v.dtype();
        Self {
            store: Store::Device {
                k: Tensor::<3>::from_data(k, (device, dtype)),
                v: Tensor::<3>::from_data(v, (device, vd)),
            },
            len,
            start,
        }
    }

    /// Where the values live.
    pub fn device(&self) -> Device {
        match &self.store {
            Store::Device { k, .. } => k.device(),
            Store::Host { device, .. } => device.clone(),
        }
    }

    /// Number of positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no position is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes of the live keys and values, as stored.
    pub fn bytes(&self) -> usize {
        match &self.store {
            Store::Device { k, .. } => {
                let [h, _, d] = k.dims();
                2 * h * self.len * d * k.dtype().size()
            }
            Store::Host { k, v, .. } => k.bytes() + v.bytes(),
        }
    }

    /// The live keys and values on the host, where this layer keeps them there.
    pub fn host(&self) -> Option<HostView<'_>> {
        match &self.store {
            Store::Host {
                k, v, heads, dim, ..
            } => Some(HostView {
                k: k.rows(),
                v: v.rows(),
                heads: *heads,
                dim: *dim,
                len: self.len,
            }),
            Store::Device { .. } => None,
        }
    }

    /// The live keys and values as tensors, `[kv_heads, len, head_dim]` each (for a host layer,
    /// a copy widened to f32).
    pub fn view(&self) -> (Tensor<3>, Tensor<3>) {
        match &self.store {
            Store::Device { k, v } => {
                let [h, _, d] = k.dims();
                (
                    k.clone().slice([0..h, 0..self.len, 0..d]),
                    v.clone().slice([0..h, 0..self.len, 0..d]),
                )
            }
            Store::Host {
                k,
                v,
                heads,
                dim,
                device,
            } => {
                let t = |x: &HostBuf| {
                    let values = x.to_f32(0..self.len * heads * dim);
                    let data = TensorData::new(values, [self.len, *heads, *dim]);
                    Tensor::<3>::from_data(data, device).swap_dims(0, 1)
                };
                (t(k), t(v))
            }
        }
    }

    /// Positions `range` (relative to the first live one) as `[heads, n, width]` data, exact:
    /// the tensors' dtype, or the host type as [`KvDtype::stored`] says.
    pub(super) fn data(&self, range: Range<usize>) -> (TensorData, TensorData) {
        match &self.store {
            Store::Device { k, v } => {
                let [h, _, d] = k.dims();
                let r = [0..h, range, 0..d];
                (
                    k.clone().slice(r.clone()).into_data(),
                    v.clone().slice(r).into_data(),
                )
            }
            Store::Host {
                k, v, heads, dim, ..
            } => (
                k.to_data(range.clone(), *heads, *dim),
                v.to_data(range, *heads, *dim),
            ),
        }
    }

    /// Appends `[heads, t, dim]` keys and values.
    pub(super) fn append(&mut self, k: Tensor<3>, v: Tensor<3>) {
        let [h, t, d] = k.dims();
        match &mut self.store {
            Store::Device { k: kb, v: vb } => {
                let cap = kb.dims()[1];
                if self.len + t > cap {
                    let need = self.len + t;
                    let new_cap = (need + need / 4).max(16);
                    let len = self.len;
                    let grow = |buf: &Tensor<3>| {
                        let spare = Tensor::<3>::zeros([h, new_cap - len, d], &buf.device())
                            .cast(buf.dtype());
                        Tensor::cat(vec![buf.clone().slice([0..h, 0..len, 0..d]), spare], 1)
                    };
                    *kb = grow(kb);
                    *vb = grow(vb);
                }
                let range = [0..h, self.len..self.len + t, 0..d];
                kb.inplace(|buf| buf.slice_assign(range.clone(), k));
                vb.inplace(|buf| buf.slice_assign(range, v));
                self.len += t;
            }
            Store::Host { .. } => {
                let read = |x: Tensor<3>| {
                    let x = x.swap_dims(0, 1).into_data();
                    x.convert::<f32>().try_into_vec::<f32>().expect("f32 keys")
                };
                self.append_host(&read(k), &read(v));
            }
        }
    }

    /// Appends position-major `[t, heads, dim]` keys and values to a host layer, converted to
    /// its type.
    ///
    /// # Panics
    /// On a device layer, or when the lengths are not whole positions.
    pub(super) fn append_host(&mut self, k: &[f32], v: &[f32]) {
        let Store::Host {
            k: kb,
            v: vb,
            heads,
            dim,
            ..
        } = &mut self.store
        else {
            panic!("a host append on a device cache");
        };
        let per = *heads * *dim;
        assert!(
            k.len() == v.len() && k.len().is_multiple_of(per),
            "ragged keys"
        );
        kb.push(k);
        vb.push(v);
        self.len += k.len() / per;
    }

    /// Keeps the first `len` live positions.
    pub(super) fn truncate(&mut self, len: usize) {
        self.len = len;
        if let Store::Host {
            k, v, heads, dim, ..
        } = &mut self.store
        {
            k.truncate(len * *heads * *dim);
            v.truncate(len * *heads * *dim);
        }
    }

    /// Keeps only the last `keep` positions.
    pub(super) fn keep_last(&mut self, keep: usize) {
        let drop = self.len - keep;
        match &mut self.store {
            Store::Device { k, v } => {
                let [h, _, d] = k.dims();
                *k = k.clone().slice([0..h, drop..self.len, 0..d]);
                *v = v.clone().slice([0..h, drop..self.len, 0..d]);
            }
            Store::Host {
                k, v, heads, dim, ..
            } => {
                k.drop_front(drop * *heads * *dim);
                v.drop_front(drop * *heads * *dim);
            }
        }
        self.len = keep;
        self.start += drop;
    }
}
