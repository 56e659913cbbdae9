//! The collector's gRPC interface (docs/protocol.md §6), generated from
//! `proto/submission.proto`: the messages every submission travels in, the
//! client a node submits with and the server trait collectors implement.

#![allow(clippy::all, missing_docs, rust_2018_idioms)] // generated code

tonic::include_proto!("submission");

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
