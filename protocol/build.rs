//! Compiles the collector's gRPC interface with protox (pure Rust: no protoc
//! needed on the machine).

use std::path::PathBuf;

fn main() {
    let manifest_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let proto_dir = manifest_dir.join("..").join("proto");
    let file = proto_dir.join("submission.proto");
    let fds = protox::compile([&file], [&proto_dir]).expect("proto/submission.proto compiles");
    // Small per-call buffers (`proto::SmallBuffers`): a node of many slots
    // has many submissions in flight, a collector many more.
    tonic_prost_build::configure()
        .codec_path("crate::proto::SmallBuffers")
        .compile_fds(fds)
        .expect("gRPC code generates");
    println!("cargo:rerun-if-changed=../proto/submission.proto");
}
