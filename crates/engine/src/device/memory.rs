//! The process's allocator, where its defaults cost memory that weights need.

/// Hands memory the allocator holds free back to the OS: metadata freed in many small pieces
/// stays with glibc's allocator otherwise, and counts in the peak while the weights load.
pub fn return_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory of glibc's own heap.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// One allocation arena for every thread (call first thing in `main`, before any thread
/// starts). glibc gives each thread that allocates an arena of its own, and each keeps what
/// its thread freed: a prompt's activations, allocated and freed on the kernel threads, stayed
/// in them, and one arena holds less at peak at the same speed (docs/benchmarks.md, "Kernel
/// choices"). The kernels allocate little, so sharing one arena's lock costs nothing
/// measurable.
pub fn one_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes glibc's allocation policy; called before threads exist.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}
