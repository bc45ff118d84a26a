//! Moves large weight buffers onto 2 MiB pages where the OS allows it.
//!
//! Decoding streams every weight once per token. On 4 KiB pages that is a TLB miss every
//! 4 KiB, and the hardware prefetcher stops at each page boundary; on huge pages the quantized
//! kernels read 25–45 % faster (`cargo bench --bench quant_kernels` runs both).
//!
//! The matrices the loader lays out itself ([`WeightBytes`]) get mappings of their own, aligned
//! to 2 MiB and marked before they are written, so their pages are huge from their first
//! touch. Buffers that candle allocates are asked before they are filled
//! ([`prefer_huge_pages`]), which is not enough on its own: a buffer that reuses heap memory
//! freed earlier in the load is already on small pages, and a matrix of a few MiB holds at
//! most one whole 2 MiB page of its own. So those are collapsed onto huge pages once filled
//! ([`back_with_huge_pages`]), with the pages they share with their neighbours — a copy of
//! every page moved, which is why the loader's own matrices avoid it (Qwen2.5-0.5B Q4_K_M:
//! collapsing the tiles took 0.5 s of a 1.1 s load).

const HUGE_PAGE: usize = 2 << 20;
/// Buffers smaller than this are left alone: a norm's weights would pull in a whole page.
const SMALLEST: usize = 64 << 10;

/// Asks the kernel to back every 2 MiB page that holds part of `bytes` with a huge page
/// (the bytes of other allocations on those pages keep their contents). Returns whether it
/// did so for the whole range; buffers under 64 KiB, other systems and kernels before Linux 6.1
/// are left as they are.
pub fn back_with_huge_pages(bytes: &[u8]) -> bool {
    if bytes.len() < SMALLEST {
        return false;
    }
    let start = bytes.as_ptr() as usize / HUGE_PAGE * HUGE_PAGE;
    let end = (bytes.as_ptr() as usize + bytes.len()).next_multiple_of(HUGE_PAGE);
    collapse(start, end - start)
}

/// Asks that memory not yet touched be backed by huge pages when it is first written (call
/// before filling a fresh buffer; no copy needed later). Same conditions as above.
pub fn prefer_huge_pages(ptr: *const u8, len: usize) -> bool {
    let start = (ptr as usize).next_multiple_of(HUGE_PAGE);
    let end = (ptr as usize + len) / HUGE_PAGE * HUGE_PAGE;
    end > start && advise(start, end - start)
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn advise(start: usize, len: usize) -> bool {
    // SAFETY: the range lies inside an allocation of this process; MADV_HUGEPAGE only
    // changes how later page faults are served.
    unsafe { libc::madvise(start as *mut libc::c_void, len, libc::MADV_HUGEPAGE) == 0 }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn advise(_start: usize, _len: usize) -> bool {
    false
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn collapse(start: usize, len: usize) -> bool {
    // MADV_COLLAPSE copies pages already in place onto huge pages, whatever the system's
    // transparent-huge-page mode short of "never"; the contents do not change. Where part of
    // a range is not mapped, or cannot be collapsed, the rest still is.
    // SAFETY: the range covers pages of this process's heap or of a weight buffer's mapping;
    // collapsing changes which physical pages back them, never what they hold.
    unsafe { libc::madvise(start as *mut libc::c_void, len, libc::MADV_COLLAPSE) == 0 }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn collapse(_start: usize, _len: usize) -> bool {
    false
}

/// A weight matrix's bytes, zeroed until written, on memory asked onto huge pages before any
/// of it is touched: from 2 MiB up a mapping of its own starting on a 2 MiB boundary (its
/// last, partial 2 MiB stays on small pages, so no more memory is taken than the bytes need);
/// smaller ones side by side in shared 32 MiB mappings, which go when their last matrix does.
/// Other systems get a plain heap buffer.
pub struct WeightBytes(Backing);

enum Backing {
    Heap(Vec<u8>),
    /// `len` bytes at `data`, inside the mapping held (never read: it lives as they do).
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    Mapped {
        _mapping: std::sync::Arc<Mapping>,
        data: *mut u8,
        len: usize,
    },
}

// SAFETY: the bytes belong to this value alone (its own heap buffer, or a range of a mapping
// no other value is given), as a `Vec<u8>`'s do.
unsafe impl Send for WeightBytes {}
// SAFETY: as above; shared access only reads.
unsafe impl Sync for WeightBytes {}

/// Where small matrices are carved from: the newest shared mapping and the bytes of it given.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
static SHARED: std::sync::Mutex<(std::sync::Weak<Mapping>, usize)> =
    std::sync::Mutex::new((std::sync::Weak::new(), 0));

#[cfg(all(target_os = "linux", target_env = "gnu"))]
const SHARED_BYTES: usize = 16 * HUGE_PAGE;

impl WeightBytes {
    /// `len` zero bytes.
    pub fn zeroed(len: usize) -> Self {
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        if len > 0 {
            let mapped = match len >= HUGE_PAGE {
                true => Mapping::new(len).map(|m| (std::sync::Arc::new(m), 0)),
                false => Self::shared(len),
            };
            if let Some((mapping, at)) = mapped {
                // SAFETY: `at + len` lies inside the mapping's aligned bytes.
                let data = unsafe { mapping.data.add(at) };
                return Self(Backing::Mapped {
                    _mapping: mapping,
                    data,
                    len,
                });
            }
        }
        Self(Backing::Heap(vec![0u8; len]))
    }

    /// A range of `len` (under 2 MiB) fresh bytes of a shared mapping, 64-byte aligned.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn shared(len: usize) -> Option<(std::sync::Arc<Mapping>, usize)> {
        let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
        let (newest, given) = &mut *shared;
        if let Some(mapping) = newest.upgrade() {
            let at = given.next_multiple_of(64);
            if at + len <= mapping.len {
                *given = at + len;
                return Some((mapping, at));
            }
        }
        let mapping = std::sync::Arc::new(Mapping::new(SHARED_BYTES)?);
        *newest = std::sync::Arc::downgrade(&mapping);
        *given = len;
        Some((mapping, 0))
    }
}

/// A private anonymous mapping with `len` bytes from a 2 MiB boundary, the whole huge pages of
/// them asked onto huge pages.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
struct Mapping {
    base: *mut libc::c_void,
    bytes: usize,
    data: *mut u8,
    len: usize,
}

// SAFETY: a mapping is plain memory; who writes which bytes of it is `WeightBytes`' concern.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
unsafe impl Send for Mapping {}
// SAFETY: as above.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
unsafe impl Sync for Mapping {}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
impl Mapping {
    fn new(len: usize) -> Option<Self> {
        // One huge page more than the bytes, so that a 2 MiB boundary lies in the first one.
        let bytes = len.checked_add(HUGE_PAGE)?;
        // SAFETY: a fresh private anonymous mapping (zeroed by the kernel); no existing memory
        // is named.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return None;
        }
        let data = (base as usize).next_multiple_of(HUGE_PAGE);
        advise(data, len / HUGE_PAGE * HUGE_PAGE);
        Some(Self {
            base,
            bytes,
            data: data as *mut u8,
            len,
        })
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping `mmap` returned, unmapped once, when no `WeightBytes` holds it.
        unsafe { libc::munmap(self.base, self.bytes) };
    }
}

impl std::ops::Deref for WeightBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.0 {
            Backing::Heap(v) => v,
            // SAFETY: `data` points at `len` bytes of a mapping this value keeps alive (zeroed
            // by the kernel, so initialised), a range no other value is given.
            #[cfg(all(target_os = "linux", target_env = "gnu"))]
            &Backing::Mapped { data, len, .. } => unsafe { std::slice::from_raw_parts(data, len) },
        }
    }
}

impl std::ops::DerefMut for WeightBytes {
    fn deref_mut(&mut self) -> &mut [u8] {
        match &mut self.0 {
            Backing::Heap(v) => v,
            // SAFETY: as in `deref`, and `&mut self` makes the access unique.
            #[cfg(all(target_os = "linux", target_env = "gnu"))]
            &mut Backing::Mapped { data, len, .. } => unsafe {
                std::slice::from_raw_parts_mut(data, len)
            },
        }
    }
}

impl From<Vec<u8>> for WeightBytes {
    fn from(heap: Vec<u8>) -> Self {
        Self(Backing::Heap(heap))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contents_survive_and_small_buffers_are_left_alone() {
        let data: Vec<u8> = (0..3 * HUGE_PAGE).map(|i| (i * 7 % 251) as u8).collect();
        back_with_huge_pages(&data);
        // A part of it: the pages it shares with the rest are collapsed too.
        back_with_huge_pages(&data[12_345..12_345 + HUGE_PAGE / 2]);
        assert!(data
            .iter()
            .enumerate()
            .all(|(i, &b)| b == (i * 7 % 251) as u8));
        assert!(!back_with_huge_pages(&data[..4096]));
    }

    #[test]
    fn weight_bytes_are_zeroed_writable_and_large_ones_aligned() {
        for len in [0, 100, HUGE_PAGE - 1, HUGE_PAGE + 12_345, 3 * HUGE_PAGE] {
            let mut w = WeightBytes::zeroed(len);
            assert_eq!(w.len(), len);
            assert!(w.iter().all(|&b| b == 0), "{len}");
            w.iter_mut()
                .enumerate()
                .for_each(|(i, b)| *b = (i % 251) as u8);
            assert!(w.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
            if cfg!(all(target_os = "linux", target_env = "gnu")) && len >= HUGE_PAGE {
                assert_eq!(w.as_ptr() as usize % HUGE_PAGE, 0, "{len}");
            }
        }
        // Small ones share mappings: each its own bytes, whatever is written to the others,
        // and a full mapping starts the next.
        let mut small: Vec<WeightBytes> =
            (0..40).map(|i| WeightBytes::zeroed(1 << 20 | i)).collect();
        for (i, w) in small.iter_mut().enumerate() {
            assert!(w.iter().all(|&b| b == 0), "{i}");
            w.fill(i as u8 + 1);
        }
        assert!(small
            .iter()
            .enumerate()
            .all(|(i, w)| w.iter().all(|&b| b == i as u8 + 1)));
        drop(small.swap_remove(3));
        let later = WeightBytes::zeroed(1000);
        assert!(later.iter().all(|&b| b == 0));
        let from_vec = WeightBytes::from(vec![7u8; 10]);
        assert_eq!(&*from_vec, &[7u8; 10]);
    }
}
