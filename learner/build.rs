//! Compiles `csrc/autocast.cpp` (CUDA autocast through libtorch's current
//! API) against the libtorch headers `LIBTORCH` points at, as `torch-sys`
//! compiles its own glue.
fn main() {
    println!("cargo:rerun-if-changed=csrc/autocast.cpp");
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    let Some(libtorch) = std::env::var_os("LIBTORCH") else {
        panic!("LIBTORCH is not set: it names libtorch's folder (.cargo/config.toml sets it to .libtorch/torch)");
    };
    let include = std::path::Path::new(&libtorch).join("include");
    cc::Build::new()
        .cpp(true)
        .pic(true)
        .warnings(false)
        .include(&include)
        .flag("-std=c++17")
        .flag("-D_GLIBCXX_USE_CXX11_ABI=1")
        .file("csrc/autocast.cpp")
        .compile("rulka_autocast");
}
