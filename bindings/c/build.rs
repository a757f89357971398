//! The shared library's SONAME is its installed name, `libmqstate.so` (scripts/build-c and
//! scripts/dist lay the library out under that name, as the C SDK ships it): a program linked
//! against it then asks for `libmqstate.so` at run time, whatever cargo called the file.

fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libmqstate.so");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
