//! The slab and encoding buffers of a finalize are given back after each region and taken
//! again by the next (`PageVec::pooled`, `PageVec::recycle`), so that the regions take turns at
//! a few sets of pages instead of each touching fresh ones; the profile's release frees them
//! (`pages::take_pooled`). Alone in its test binary: the pool is the process's.

use scope_profiler::model::PageVec;
use scope_profiler::model::pages::take_pooled;

#[test]
fn storage_given_back_is_taken_again_and_freed_with_the_profile() {
    let _ = take_pooled();
    // A slab's worth (512 KiB): a mapping of its own, kept.
    let mut v = PageVec::<i64>::with_capacity(1 << 16);
    assert!(v.is_mapped());
    v.push(7);
    let at = v.as_mut_ptr();
    v.recycle();
    let mut w = PageVec::<i64>::pooled();
    assert_eq!((w.as_mut_ptr(), w.len(), w.capacity()), (at, 0, 1 << 16), "the same storage, emptied");
    // Nothing left: the next one is new and empty.
    assert_eq!(PageVec::<i64>::pooled().capacity(), 0);
    w.recycle();

    // Small (malloc's) and large (over 1 MiB) storage is not kept.
    PageVec::<i64>::with_capacity(16).recycle();
    PageVec::<i64>::with_capacity(1 << 18).recycle();
    let kept = take_pooled();
    assert_eq!(kept.iter().map(|v| v.capacity()).collect::<Vec<_>>(), vec![1 << 16]);

    // At most 24 are kept; what the release takes out leaves the pool empty.
    for _ in 0..30 {
        PageVec::<i64>::with_capacity(1 << 16).recycle();
    }
    assert_eq!(take_pooled().len(), 24);
    assert!(take_pooled().is_empty());
}
