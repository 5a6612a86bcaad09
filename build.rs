//! Release binaries keep line tables for recall's own crates (a panic's
//! backtrace names file and line) with their debug sections compressed:
//! the standard library's backtrace reads them as they are, and the binary
//! is about half the size.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let release = std::env::var("PROFILE").is_ok_and(|p| p == "release");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux");
    if release && linux {
        println!("cargo:rustc-link-arg-bins=-Wl,--compress-debug-sections=zlib");
    }
}
