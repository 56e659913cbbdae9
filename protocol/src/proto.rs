//! The collector's gRPC interface (docs/protocol.md §6), generated from
//! `proto/submission.proto`: the messages every submission travels in, the
//! client a node submits with and the server trait collectors implement.

#![allow(clippy::all, missing_docs, rust_2018_idioms)] // generated code

tonic::include_proto!("submission");

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
