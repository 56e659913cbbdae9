//! Link flags of the `lite-node` binary only (its dependencies' builds are
//! untouched, so this costs no rebuild of them).

#[allow(clippy::disallowed_methods)] // a build script reads what cargo sets for it
fn main() {
    // Relative relocations packed (DT_RELR, glibc 2.36+, GNU ld 2.38+): the
    // loader otherwise reads 1.3 MB of them at every start and keeps those
    // pages resident; packed they are a few kilobytes.
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux")
        && std::env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("gnu")
    {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}
