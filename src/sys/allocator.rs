//! The process's memory allocator: mimalloc, entered where its fast paths are.
//!
//! Every Rust allocation states an alignment. mimalloc's aligned entry points serve blocks of up
//! to 1 KiB from their free lists like the plain ones, but a larger block goes through a general
//! path (about five times the instructions, and over-allocated unless its size is a power of
//! two) even when the alignment asked for is the word alignment every mimalloc block has anyway.
//! A proxied page allocates two such blocks. So alignments of a word or less use the plain entry
//! points, and only larger ones the aligned ones.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

/// The alignment of every block mimalloc returns: block sizes are whole words, laid out from a
/// page start aligned to 16 bytes.
const WORD: usize = std::mem::size_of::<usize>();

/// mimalloc as the global allocator (see the module's documentation).
pub struct Allocator;

// SAFETY: each method forwards to the mimalloc function with the same contract; the plain ones
// are used only for alignments every mimalloc block already satisfies (`WORD`), so the returned
// blocks meet the layout. `mi_free` takes blocks from either family.
unsafe impl GlobalAlloc for Allocator {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: any size may be asked for; null reports failure, as GlobalAlloc expects.
        unsafe {
            by_alignment(
                layout,
                libmimalloc_sys::mi_malloc,
                libmimalloc_sys::mi_malloc_aligned,
            )
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        unsafe {
            by_alignment(
                layout,
                libmimalloc_sys::mi_zalloc,
                libmimalloc_sys::mi_zalloc_aligned,
            )
        }
    }

    #[inline]
    unsafe fn dealloc(&self, block: *mut u8, _layout: Layout) {
        // SAFETY: the caller passes a block this allocator returned and does not use it again.
        unsafe { libmimalloc_sys::mi_free(block.cast::<c_void>()) }
    }

    #[inline]
    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let moved = if layout.align() <= WORD {
            // SAFETY: the caller passes a live block of this allocator and a non-zero size;
            // mimalloc keeps the old block on failure, as GlobalAlloc expects.
            unsafe { libmimalloc_sys::mi_realloc(block.cast::<c_void>(), new_size) }
        } else {
            // SAFETY: as above, with the block's own alignment kept.
            unsafe {
                libmimalloc_sys::mi_realloc_aligned(
                    block.cast::<c_void>(),
                    new_size,
                    layout.align(),
                )
            }
        };
        moved.cast()
    }
}

/// A block for `layout` from `plain` when a word's alignment is enough, else from `aligned`.
///
/// # Safety
/// `plain` and `aligned` are a mimalloc allocation function and its aligned variant.
#[inline]
unsafe fn by_alignment(
    layout: Layout,
    plain: unsafe extern "C" fn(usize) -> *mut c_void,
    aligned: unsafe extern "C" fn(usize, usize) -> *mut c_void,
) -> *mut u8 {
    let block = if layout.align() <= WORD {
        // SAFETY: the caller passes a mimalloc function, which takes any size.
        unsafe { plain(layout.size()) }
    } else {
        // SAFETY: as above; a Layout's alignment is a non-zero power of two.
        unsafe { aligned(layout.size(), layout.align()) }
    };
    block.cast()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sizes around mimalloc's size classes and its small/large boundaries, with every
    /// alignment a Rust type commonly has and some it rarely does.
    fn layouts() -> impl Iterator<Item = Layout> {
        let sizes = (1..=64)
            .chain([
                100,
                1000,
                1023,
                1024,
                1025,
                1500,
                4096,
                4112,
                9000,
                16_384,
                70_000,
                1 << 20,
            ])
            .chain((1..=40).map(|step| step * 97));
        sizes.flat_map(|size| {
            [1, 2, 4, 8, 16, 32, 64, 128, 4096]
                .into_iter()
                .filter_map(move |align| Layout::from_size_align(size, align).ok())
        })
    }

    #[test]
    fn every_block_has_the_alignment_asked_for_and_keeps_its_bytes() {
        let allocator = Allocator;
        for layout in layouts() {
            // SAFETY: non-zero sizes; each block is written within its size, then freed once
            // with its layout.
            unsafe {
                let block = allocator.alloc(layout);
                assert!(!block.is_null(), "{layout:?}");
                assert_eq!(block as usize % layout.align(), 0, "{layout:?}");
                block.write_bytes(0xA5, layout.size());

                let zeroed = allocator.alloc_zeroed(layout);
                assert_eq!(zeroed as usize % layout.align(), 0, "{layout:?}");
                let bytes = std::slice::from_raw_parts(zeroed, layout.size());
                assert!(bytes.iter().all(|byte| *byte == 0), "{layout:?}");
                allocator.dealloc(zeroed, layout);

                let grown_size = layout.size() * 3 + 5;
                let grown = allocator.realloc(block, layout, grown_size);
                assert_eq!(grown as usize % layout.align(), 0, "{layout:?} grown");
                let kept = std::slice::from_raw_parts(grown, layout.size());
                assert!(kept.iter().all(|byte| *byte == 0xA5), "{layout:?} grown");
                let grown_layout = Layout::from_size_align(grown_size, layout.align()).unwrap();
                let shrunk = allocator.realloc(grown, grown_layout, 1);
                assert_eq!(shrunk as usize % layout.align(), 0, "{layout:?} shrunk");
                assert_eq!(*shrunk, 0xA5, "{layout:?} shrunk");
                allocator.dealloc(shrunk, Layout::from_size_align(1, layout.align()).unwrap());
            }
        }
    }
}
