//! Weight bytes used where they lie: a range of a memory-mapped checkpoint shared by every
//! matrix cut from it, or (for what had to be transformed) bytes the process owns. The kernels
//! read both the same way.

use std::ops::{Deref, Range};
use std::sync::Arc;

use memmap2::{Mmap, UncheckedAdvice};

/// A read-only run of weight bytes.
#[derive(Clone)]
pub struct Bytes {
    store: Store,
    range: Range<usize>,
}

#[derive(Clone)]
enum Store {
    Mapped(Arc<Mmap>),
    Owned(Arc<Vec<u8>>),
}

impl Bytes {
    /// `range` of a mapped file, used in place.
    pub fn mapped(map: Arc<Mmap>, range: Range<usize>) -> Self {
        assert!(range.end <= map.len(), "range outside the mapping");
        Self {
            store: Store::Mapped(map),
            range,
        }
    }

    /// Bytes held by the process.
    pub fn owned(data: Vec<u8>) -> Self {
        let range = 0..data.len();
        Self {
            store: Store::Owned(Arc::new(data)),
            range,
        }
    }

    /// Whether the bytes are pages of a mapped file (not counted twice in memory).
    pub fn is_mapped(&self) -> bool {
        matches!(self.store, Store::Mapped(_))
    }

    /// A sub-range, sharing the same storage.
    pub fn slice(&self, range: Range<usize>) -> Self {
        assert!(range.end <= self.range.len(), "slice outside the bytes");
        Self {
            store: self.store.clone(),
            range: self.range.start + range.start..self.range.start + range.end,
        }
    }
}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.store {
            Store::Mapped(m) => &m[self.range.clone()],
            Store::Owned(v) => &v[self.range.clone()],
        }
    }
}

/// Drops the resident pages wholly inside `range` of a read-only file mapping, once their
/// contents have been copied (transformed, or sent to a GPU): the pages stay mapped and are read
/// again from the file if anything touches them. Pages shared with neighbouring tensors are kept.
#[allow(unsafe_code)]
pub fn release(map: &Mmap, range: Range<usize>) {
    const PAGE: usize = 4096;
    let start = range.start.div_ceil(PAGE) * PAGE;
    let end = (range.end / PAGE) * PAGE;
    if end <= start || end > map.len() {
        return;
    }
    // SAFETY: the mapping is a read-only, shared file mapping: MADV_DONTNEED only drops the page
    // cache's pages from this process, and a later access reads the same bytes from the file. No
    // reference into the range is invalidated (the contents do not change).
    let _ = unsafe { map.unchecked_advise_range(UncheckedAdvice::DontNeed, start, end - start) };
}
