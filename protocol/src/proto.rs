//! The collector's gRPC interface (docs/protocol.md §6), generated from
//! `proto/submission.proto`: the messages every submission travels in, the
//! client a node submits with and the server trait collectors implement.
//!
//! The generated code is checked in (`proto/submission.rs`), so no build
//! compiles a code generator; after editing the .proto, run
//! `cargo run --manifest-path protocol/codegen/Cargo.toml`. The test below
//! fails until then.

#![allow(clippy::all, missing_docs, rust_2018_idioms)] // generated code

include!("proto/submission.rs");

/// The prost codec with 1 KiB per-call buffers instead of tonic's 8 KiB (a
/// buffer grows when a message needs more): a submission is a few hundred
/// bytes, and a node of many slots has up to 128 calls in flight, a
/// collector or gateway as many as its nodes send — an encoding and a
/// decoding buffer each (16 KiB a call at the default).
#[derive(Debug, Clone)]
pub struct SmallBuffers<T, U>(std::marker::PhantomData<(T, U)>);

impl<T, U> Default for SmallBuffers<T, U> {
    fn default() -> Self {
        Self(std::marker::PhantomData)
    }
}

/// Bytes each call's encoding and decoding buffer starts with.
const CALL_BUFFER: usize = 1024;
/// tonic's default: how much a stream batches before yielding.
const YIELD_THRESHOLD: usize = 32 * 1024;

impl<T, U> tonic::codec::Codec for SmallBuffers<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = tonic_prost::ProstEncoder<T>;
    type Decoder = tonic_prost::ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        tonic_prost::ProstCodec::<T, U>::raw_encoder(tonic::codec::BufferSettings::new(CALL_BUFFER, YIELD_THRESHOLD))
    }

    fn decoder(&mut self) -> Self::Decoder {
        tonic_prost::ProstCodec::<T, U>::raw_decoder(tonic::codec::BufferSettings::new(CALL_BUFFER, YIELD_THRESHOLD))
    }
}

/// The collector's answer to an accepted submission.
pub const SUCCESS: &str = "Success";
/// The collector's answer to a refused submission.
pub const FAILURE: &str = "Failure";
/// The gRPC response metadata key under which our collector gives the
/// reason for a `Failure` (other collectors may not; the protocol's answer
/// itself carries none).
pub const REASON_METADATA: &str = "x-rejection-reason";

/// A rejection's reason as a gRPC metadata value (printable ASCII, at most
/// 1,000 characters): the protocol's answer is only `Failure`, and a node
/// should be able to say why.
pub fn reason_metadata(reason: &str) -> tonic::metadata::MetadataValue<tonic::metadata::Ascii> {
    let text: String =
        reason.chars().map(|c| if c.is_ascii_graphic() || c == ' ' { c } else { '?' }).take(1000).collect();
    text.parse().unwrap_or_else(|_| tonic::metadata::MetadataValue::from_static("unprintable reason"))
}

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};

    const REGENERATE: &str = "run `cargo run --manifest-path protocol/codegen/Cargo.toml`";

    /// The checked-in code was generated from the .proto as it is now.
    #[test]
    fn the_generated_code_is_from_the_proto_as_it_is() {
        let proto = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../proto/submission.proto")).unwrap();
        let hash: String = Sha256::digest(&proto).iter().map(|b| format!("{b:02x}")).collect();
        let generated = include_str!("proto/submission.rs");
        let recorded = generated.lines().next().and_then(|l| l.strip_prefix("// proto/submission.proto sha256 "));
        assert_eq!(
            recorded,
            Some(hash.as_str()),
            "proto/submission.proto changed since its code was generated: {REGENERATE}"
        );
    }

    /// The generator's tonic-prost-build is the tonic-prost the workspace
    /// builds the generated code against (they are released in step).
    #[test]
    fn the_generator_and_the_workspace_use_one_tonic_version() {
        let version_in = |lock: &str, name: &str| -> Option<String> {
            let at = lock.find(&format!("name = \"{name}\"\nversion = \""))?;
            let rest = &lock[at..];
            let start = rest.find("version = \"")? + "version = \"".len();
            Some(rest[start..].split('"').next()?.to_owned())
        };
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.lock");
        let codegen = concat!(env!("CARGO_MANIFEST_DIR"), "/codegen/Cargo.lock");
        let (root, codegen) = (std::fs::read_to_string(root).unwrap(), std::fs::read_to_string(codegen).unwrap());
        let workspace = version_in(&root, "tonic-prost").expect("tonic-prost in Cargo.lock");
        let generator =
            version_in(&codegen, "tonic-prost-build").expect("tonic-prost-build in protocol/codegen/Cargo.lock");
        assert_eq!(
            generator, workspace,
            "protocol/codegen builds with tonic-prost-build {generator}, the workspace with tonic-prost {workspace}: \
             update protocol/codegen/Cargo.toml to {workspace}, then {REGENERATE}"
        );
    }
}
