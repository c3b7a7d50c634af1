//! [`BufferArray`]: device buffers that `graph!` indexes in an unrolled `for`, whose addresses
//! an unchanged call compares in one piece instead of acquiring each buffer.

use core::ops::{Deref, DerefMut};

use cudarc::driver::{CudaSlice, CudaStream};

/// Device buffers (cudarc's `CudaSlice<T>`, each its own allocation) that a `graph!` call
/// writes in an unrolled `for` (`for i in 0..N { k.f(&mut bufs[i]).launch(cfg); }`), for calls
/// whose host time is the array's: a fan of hundreds of kernels, each with its own buffer.
///
/// A `Vec<CudaSlice<T>>` or slice works in the same places; each call then acquires every
/// element (reads its address and cudarc's event state, about 50 instructions per element: 3–6
/// µs of host time per call for 1000 buffers). A `BufferArray` remembers what the last such
/// call found (each element's address and length, all on the call's stream, none with cudarc
/// events), and while no element has been reachable mutably since, the next call compares those
/// 16 bytes per element with the words of the graph it would launch (one `memcmp`) instead:
/// about 10× less host time per call (`host_cost --only fan-read-array`). What a call launches,
/// updates and checks is the same either way: results, errors and the aliasing check do not
/// depend on the type.
///
/// The memo applies when the elements were allocated with cudarc's event tracking off
/// (`CudaContext::disable_event_tracking`, as for graphs of many buffers on one stream), live on
/// the stream of the call, and the call is in graph mode with the last call's words to compare
/// with (not the first call of a variant, nor the one after a call that failed part way), with
/// every place before the array's elements unchanged (places are compared in the order the
/// body first names them, statement by statement and argument by argument: name the array
/// before buffers that change every call where the kernel's signature allows), for up to four
/// such arrays per body. Otherwise a call acquires each element as for a slice; results are the
/// same. [`memo_hits`](Self::memo_hits) counts the calls that skipped the acquisition (`{:?}`
/// of the array shows it, and `remembered: true` after a call that filled the memo).
///
/// Reading through `Deref` (`bufs[i].len()`, `bufs.iter()`) keeps the memo. Anything that can
/// reach an element mutably outside the one-loop acquisition forgets it: `DerefMut`
/// (`bufs[i] = new`, `&mut bufs[i]` in a cudarc call, `iter_mut`), [`push`](Self::push),
/// [`as_mut_slice`](Self::as_mut_slice), and a `graph!` body that names elements of the array
/// other than as the written elements of one unrolled `for` (an element only read, as `&bufs[12]`
/// beside `for i in 0..12 { … &mut bufs[i] … }`, or elements named outside a `for`): the array
/// is then borrowed as a whole, every call, and acquired element by element. Reading an element
/// that the `for` also writes (`copy(&bufs[i], …)` beside `k.f(&mut bufs[i])`) keeps it. The next call
/// acquires every element again and remembers anew. The type makes no CUDA call itself. Not
/// `Clone`: a copy would hold other buffers beside this memo.
///
/// ```no_run
/// # use cudagraph::{graph, BufferArray, GraphCache};
/// # use cudagraph::cudarc::driver::LaunchConfig;
/// # cudagraph::kernels! { struct K { fn acc(n: u32, x: &[f32], y: &mut [f32]); } }
/// # fn main() -> cudagraph::Result<()> {
/// let ctx = cudagraph::context(0)?;
/// // SAFETY: every buffer below is used on `stream` only.
/// unsafe { ctx.disable_event_tracking() };
/// let stream = ctx.default_stream();
/// # let k = unsafe { K::load(&ctx, cudagraph::cudarc::nvrtc::compile_ptx("").unwrap()) }?;
/// let x = stream.alloc_zeros::<f32>(256)?;
/// let mut outs: BufferArray<f32> =
///     (0..100).map(|_| stream.alloc_zeros::<f32>(256)).collect::<Result<_, _>>()?;
/// let mut cache = GraphCache::new();
/// let cfg = LaunchConfig::for_num_elems(256);
/// for _ in 0..10 {
///     graph!(&mut cache, &stream, {
///         for i in 0..100 {
///             k.acc(256, &x, &mut outs[i]).launch(cfg);
///         }
///     })?;
/// }
/// # Ok(())
/// # }
/// ```
pub struct BufferArray<T> {
    slices: Vec<CudaSlice<T>>,
    memo: ArrayMemo,
}

/// What a [`BufferArray`]'s last `graph!` call found of its elements (not public API): valid
/// while no element was reachable mutably since, which `BufferArray` enforces by forgetting it
/// ([`Self::forget`]) wherever it hands out `&mut` to an element, except to
/// [`acquire_mut_each`](crate::__private::acquire_mut_each), which only acquires them.
#[doc(hidden)]
#[derive(Default)]
pub struct ArrayMemo {
    /// The address of the index list (`DistinctIndices`' array, `&'static`: a promoted
    /// constant of `graph!`'s, or leaked) whose elements, in its order, `words` describe; 0
    /// when the memo is empty. (A `&'static` list never changes, so an equal address means
    /// equal indices.)
    idx: usize,
    /// The stream every one of those elements was allocated on (`DeviceSlice::stream`), whose
    /// `Arc` each element holds: while they are unchanged, a stream at this address is it.
    own: usize,
    /// `[address, guard word]` of each element, as the words of a call hold them
    /// (`CallWords::guards_ahead`): address range, written.
    words: Vec<[u64; 2]>,
    /// Acquisitions skipped because the memo matched ([`BufferArray::memo_hits`]).
    hits: u64,
}

impl ArrayMemo {
    /// Forgets what was found.
    #[inline]
    fn forget(&mut self) {
        self.idx = 0;
    }

    /// Counts an acquisition that [`Self::hit`] skipped.
    #[inline]
    pub(crate) fn count_hit(&mut self) {
        self.hits += 1;
    }

    /// Whether the elements at `idx` (in its order), all on `stream`, have the words `ahead`
    /// (and every one was found without cudarc events). Only what [`Self::remember`] stored.
    #[inline(always)]
    pub(crate) fn hit<const M: usize>(
        &self,
        idx: &'static [usize; M],
        stream: &CudaStream,
        ahead: &[[u64; 2]; M],
    ) -> bool {
        self.hit_at(idx.as_ptr() as usize, core::ptr::from_ref(stream) as usize, ahead)
    }

    #[inline(always)]
    fn hit_at(&self, idx: usize, stream: usize, ahead: &[[u64; 2]]) -> bool {
        self.idx != 0 && self.idx == idx && self.own == stream && self.words[..] == ahead[..]
    }

    /// Remembers that every element at `idx` was just acquired on `stream`, its own, without
    /// cudarc events, with the words `ahead`.
    pub(crate) fn remember<const M: usize>(
        &mut self,
        idx: &'static [usize; M],
        stream: &CudaStream,
        ahead: &[[u64; 2]; M],
    ) {
        self.remember_at(idx.as_ptr() as usize, core::ptr::from_ref(stream) as usize, ahead);
    }

    #[inline(never)]
    fn remember_at(&mut self, idx: usize, stream: usize, ahead: &[[u64; 2]]) {
        // Empty while it changes (review 27: a panic in `extend` must not leave the old key
        // beside new words).
        self.idx = 0;
        self.words.clear();
        self.words.extend_from_slice(ahead);
        self.own = stream;
        self.idx = idx;
    }
}

impl<T> BufferArray<T> {
    /// The buffers, in order.
    pub fn new(slices: Vec<CudaSlice<T>>) -> Self {
        BufferArray { slices, memo: ArrayMemo::default() }
    }

    /// The buffers back.
    pub fn into_inner(self) -> Vec<CudaSlice<T>> {
        self.slices
    }

    /// Appends a buffer (the memo is forgotten).
    pub fn push(&mut self, slice: CudaSlice<T>) {
        self.memo.forget();
        self.slices.push(slice);
    }

    /// The buffers, mutably (the memo is forgotten: the next `graph!` call acquires every
    /// element).
    pub fn as_mut_slice(&mut self) -> &mut [CudaSlice<T>] {
        self.memo.forget();
        &mut self.slices
    }

    /// How many `graph!` calls found this array as its memo remembered it and skipped
    /// acquiring its elements one by one (what the memo saves; a call that acquired them
    /// counts nothing). The array's own count, not part of
    /// [`GraphCache::stats`](crate::GraphCache::stats); forgetting the memo keeps it.
    pub fn memo_hits(&self) -> u64 {
        self.memo.hits
    }

    /// The elements and the memo, for `graph!`'s one-loop acquisition only.
    pub(crate) fn parts(&mut self) -> (&mut [CudaSlice<T>], &mut ArrayMemo) {
        (&mut self.slices, &mut self.memo)
    }
}

impl<T> Deref for BufferArray<T> {
    type Target = [CudaSlice<T>];
    #[inline]
    fn deref(&self) -> &[CudaSlice<T>] {
        &self.slices
    }
}

impl<T> DerefMut for BufferArray<T> {
    /// The buffers, mutably: the memo is forgotten.
    #[inline]
    fn deref_mut(&mut self) -> &mut [CudaSlice<T>] {
        self.as_mut_slice()
    }
}

impl<T> From<Vec<CudaSlice<T>>> for BufferArray<T> {
    fn from(slices: Vec<CudaSlice<T>>) -> Self {
        BufferArray::new(slices)
    }
}

impl<T> FromIterator<CudaSlice<T>> for BufferArray<T> {
    fn from_iter<I: IntoIterator<Item = CudaSlice<T>>>(iter: I) -> Self {
        BufferArray::new(iter.into_iter().collect())
    }
}

impl<T> core::fmt::Debug for BufferArray<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("BufferArray")
            .field("len", &self.slices.len())
            .field("remembered", &(self.memo.idx != 0))
            .field("memo_hits", &self.memo.hits)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::ArrayMemo;

    #[test]
    fn a_memo_hits_only_what_it_remembered() {
        let mut m = ArrayMemo::default();
        let words = [[0x1000, 7], [0x2000, 9]];
        assert!(!m.hit_at(16, 32, &words), "an empty memo hits nothing");
        m.remember_at(16, 32, &words);
        assert!(m.hit_at(16, 32, &words));
        assert!(!m.hit_at(24, 32, &words), "other indices");
        assert!(!m.hit_at(16, 40, &words), "another stream");
        assert!(!m.hit_at(16, 32, &[[0x1000, 7], [0x2008, 9]]), "another address");
        assert!(!m.hit_at(16, 32, &[[0x1000, 7], [0x2000, 11]]), "another length");
        assert!(!m.hit_at(16, 32, &words[..1]), "fewer elements");
        m.forget();
        assert!(!m.hit_at(16, 32, &words), "forgotten");
        m.remember_at(24, 40, &words[..1]);
        assert!(m.hit_at(24, 40, &words[..1]), "remembered anew");
        assert!(!m.hit_at(16, 32, &words), "the old memo is gone");
    }
}
