//! Embeds the plugin-api crate's source in the binary, so the runtime can build
//! any compute package against exactly the interface it was compiled with,
//! wherever the binary is installed.
#![expect(clippy::disallowed_methods, reason = "cargo gives a build script its OUT_DIR in the environment only")]

use std::{
    env,
    fmt::Write as _,
    fs,
    path::{Path, PathBuf},
};

fn main() {
    let manifest_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let checkout = manifest_dir.join("..").join("..").join("..");
    let api_dir = checkout.join("plugin-api");
    let mut files = vec![PathBuf::from("Cargo.toml")];
    collect(&api_dir, Path::new("src"), &mut files);
    files.sort();
    let mut out = String::from(
        "/// (path inside the crate, contents), sorted by path.\npub static FILES: &[(&str, &str)] = &[\n",
    );
    for rel in &files {
        let abs = api_dir.join(rel).canonicalize().expect("plugin-api file exists");
        let rel = rel.to_str().expect("utf-8 path").replace('\\', "/");
        writeln!(out, "    ({rel:?}, include_str!({:?})),", abs.display().to_string()).expect("write to string");
    }
    out.push_str("];\n");
    let dest = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("plugin_api_files.rs");
    fs::write(dest, out).expect("write generated file");
    println!("cargo:rerun-if-changed=../../../plugin-api/Cargo.toml");
    println!("cargo:rerun-if-changed=../../../plugin-api/src");

    // `lite-node compute new`: the template processor, the authors' helper
    // crate and the market's slot selection, as a new package starts from them.
    let computes = checkout.join("computes");
    let mut out = String::new();
    for (name, dir, extra) in [
        ("TEMPLATE", "template", vec!["Cargo.toml"]),
        ("COMPUTE_KIT", "compute-kit", vec!["Cargo.toml"]),
        ("SLOT_SELECTION", "slot-selection", vec![]),
    ] {
        let root = computes.join(dir);
        let mut files: Vec<PathBuf> = extra.into_iter().map(PathBuf::from).collect();
        collect(&root, Path::new("src"), &mut files);
        files.sort();
        writeln!(out, "pub static {name}: &[(&str, &str)] = &[").expect("write to string");
        for rel in &files {
            let abs = root.join(rel).canonicalize().expect("compute file exists");
            let rel = rel.to_str().expect("utf-8 path").replace('\\', "/");
            writeln!(out, "    ({rel:?}, include_str!({:?})),", abs.display().to_string()).expect("write to string");
        }
        out.push_str("];\n");
        println!("cargo:rerun-if-changed=../../../computes/{dir}/src");
    }
    println!("cargo:rerun-if-changed=../../../computes/template/Cargo.toml");
    println!("cargo:rerun-if-changed=../../../computes/compute-kit/Cargo.toml");
    let dest = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("scaffold_files.rs");
    fs::write(dest, out).expect("write generated file");
}

fn collect(root: &Path, rel: &Path, files: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = fs::read_dir(root.join(rel)).expect("read plugin-api/src").flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let rel = rel.join(entry.file_name());
        if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            collect(root, &rel, files);
        } else if rel.extension().is_some_and(|e| e == "rs") {
            files.push(rel);
        }
    }
}
