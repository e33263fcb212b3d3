//! fp16 autocast on CUDA (FFI glue to `csrc/autocast.cpp`): the region
//! libtorch's `torch.autocast("cuda")` opens, through its current API
//! (tch's `autocast` uses the deprecated one, which warns on every call).

unsafe extern "C" {
    fn rulka_autocast_cuda_enter() -> i32;
    fn rulka_autocast_cuda_exit(was: i32);
    #[cfg(test)]
    fn rulka_autocast_cuda_enabled() -> i32;
}

/// Closes the region when dropped, also on a panic.
struct Region(i32);

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: closes the region `cuda` opened on this thread; the shim
        // only touches libtorch's thread-local autocast state and catches
        // every C++ exception.
        unsafe { rulka_autocast_cuda_exit(self.0) }
    }
}

/// Runs `f` with CUDA autocast on (fp16 for matrix products and
/// convolutions, fp32 for reductions and softmax, as PyTorch's policy).
pub(crate) fn cuda<T>(f: impl FnOnce() -> T) -> T {
    // SAFETY: sets libtorch's thread-local autocast flag and nesting count;
    // the shim catches every C++ exception (-1, then nothing to undo).
    let was = unsafe { rulka_autocast_cuda_enter() };
    if was < 0 {
        return f();
    }
    let _region = Region(was);
    f()
}

/// Whether CUDA autocast is on for this thread (`None`: libtorch refused to say).
#[cfg(test)]
fn cuda_enabled() -> Option<bool> {
    // SAFETY: reads libtorch's thread-local autocast flag; exceptions caught.
    match unsafe { rulka_autocast_cuda_enabled() } {
        0 => Some(false),
        1 => Some(true),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::{cuda, cuda_enabled};

    /// The flag is on inside a region and off after it, an inner region
    /// leaves it on for the outer one, a panic inside closes the region, and
    /// a CPU tensor's matrix product stays `f32` inside.
    #[test]
    fn a_region_turns_cuda_autocast_on_nests_and_closes_on_a_panic() {
        assert_eq!(cuda_enabled(), Some(false));
        let (inner, after_inner) = cuda(|| (cuda(cuda_enabled), cuda_enabled()));
        assert_eq!((inner, after_inner), (Some(true), Some(true)));
        assert_eq!(cuda_enabled(), Some(false));
        let a = tch::Tensor::ones([2, 2], (tch::Kind::Float, tch::Device::Cpu));
        assert_eq!(cuda(|| a.matmul(&a).kind()), tch::Kind::Float);
        let panicked = std::panic::catch_unwind(|| cuda(|| panic!("inside")));
        assert!(panicked.is_err());
        assert_eq!(cuda_enabled(), Some(false));
    }
}
