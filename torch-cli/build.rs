//! With the `cuda` feature, link libtorch's CUDA library into the binary even
//! though no symbol of it is referenced directly (it registers the CUDA
//! backend when loaded); otherwise `tch::Cuda::is_available()` is false on a
//! GPU machine. Its own CUDA dependencies are resolved at run time from the
//! PyTorch installation on that machine (see README, "GPU").

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_CUDA").is_some() {
        println!("cargo:rustc-link-arg-bins=-Wl,--no-as-needed,-ltorch_cuda,--as-needed");
        println!("cargo:rustc-link-arg-bins=-Wl,--allow-shlib-undefined");
    }
}
