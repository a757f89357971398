//! The uniffi bindings generator, built at the library's uniffi version (see
//! `scripts/generate-uniffi`).
fn main() {
    uniffi::uniffi_bindgen_main()
}
