//! CARv1 (the IPFS content-addressed archive format) of raw blocks, as a
//! market's archives hold its snapshots (issue 54): any IPFS tool reads
//! them (`ipfs dag import`, `car ls`), and every block is checked against
//! its CID when read here.
//!
//! A file is a header — a varint length, then the DAG-CBOR map
//! `{"roots": [CID], "version": 1}` — followed by blocks, each a varint
//! length, the CID's binary form and the bytes. Only what this project
//! writes is read: CIDv1, codec raw, sha2-256; one root.

use std::io::{Read, Write};

use cid::{Cid, multihash::Multihash};
use sha2::{Digest, Sha256};

/// CIDv1 codec `raw`; multihash sha2-256.
const RAW: u64 = 0x55;
const SHA2_256: u64 = 0x12;

/// The largest block read (a hostile or broken file stops here).
pub const MAX_BLOCK: usize = 64 << 20;

/// `bytes`' CID as a value.
pub fn raw_cid(bytes: &[u8]) -> Cid {
    let digest = Sha256::digest(bytes);
    Cid::new_v1(RAW, Multihash::<64>::wrap(SHA2_256, &digest).expect("a 32-byte digest fits"))
}

fn varint(mut n: u64, out: &mut Vec<u8>) {
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// Writes a CAR: the header naming `root`, then each block given.
pub struct Writer<W: Write> {
    out: W,
}

impl<W: Write> Writer<W> {
    pub fn new(mut out: W, root: &Cid) -> std::io::Result<Self> {
        let cid = root.to_bytes();
        // DAG-CBOR: map(2) {"roots": [tag 42 bytes(0x00 ‖ cid)], "version": 1}
        // (keys in DAG-CBOR's order: shorter first).
        let mut header = vec![0xa2, 0x65];
        header.extend_from_slice(b"roots");
        header.extend_from_slice(&[0x81, 0xd8, 0x2a]);
        let len = cid.len() + 1;
        if len < 24 {
            header.push(0x40 | len as u8);
        } else {
            header.extend_from_slice(&[0x58, len as u8]);
        }
        header.push(0x00);
        header.extend_from_slice(&cid);
        header.push(0x67);
        header.extend_from_slice(b"version");
        header.push(0x01);
        let mut framed = Vec::with_capacity(header.len() + 2);
        varint(header.len() as u64, &mut framed);
        framed.extend_from_slice(&header);
        out.write_all(&framed)?;
        Ok(Self { out })
    }

    /// A writer of blocks alone, no header (blocks gathered before their
    /// root is known, then copied after a header).
    pub fn headless(out: W) -> Self {
        Self { out }
    }

    /// Writes `bytes` as a raw block; its CID.
    pub fn block(&mut self, bytes: &[u8]) -> std::io::Result<Cid> {
        let cid = raw_cid(bytes);
        let id = cid.to_bytes();
        let mut frame = Vec::with_capacity(10);
        varint((id.len() + bytes.len()) as u64, &mut frame);
        self.out.write_all(&frame)?;
        self.out.write_all(&id)?;
        self.out.write_all(bytes)?;
        Ok(cid)
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}

/// Reads a CAR written by [`Writer`]: its root, then its blocks in order,
/// each checked against its CID.
pub struct Reader<R: Read> {
    input: R,
    root: Cid,
}

fn read_varint(input: &mut impl Read) -> Result<Option<u64>, String> {
    let (mut n, mut shift) = (0u64, 0);
    loop {
        let mut byte = [0u8];
        match input.read(&mut byte) {
            Ok(0) if shift == 0 => return Ok(None),
            Ok(0) => return Err("the file ends inside a length".into()),
            Ok(_) => {}
            Err(e) => return Err(e.to_string()),
        }
        if shift >= 63 {
            return Err("a length past 64 bits".into());
        }
        n |= u64::from(byte[0] & 0x7f) << shift;
        if byte[0] & 0x80 == 0 {
            return Ok(Some(n));
        }
        shift += 7;
    }
}

impl<R: Read> Reader<R> {
    pub fn new(mut input: R) -> Result<Self, String> {
        let len = read_varint(&mut input)?.ok_or("an empty file: not a CAR")? as usize;
        if len > 1024 {
            return Err(format!("a header of {len} bytes: not a CAR this project wrote"));
        }
        let mut header = vec![0u8; len];
        input.read_exact(&mut header).map_err(|e| format!("not a CAR file (its header is cut short: {e})"))?;
        // The root: the byte string after tag 42, past its 0x00 prefix.
        let at = header.windows(3).position(|w| w == [0x81, 0xd8, 0x2a]).ok_or("a header without one root")? + 3;
        let (start, len) = match header.get(at) {
            Some(b) if b & 0xe0 == 0x40 && b & 0x1f < 24 => (at + 1, usize::from(b & 0x1f)),
            Some(0x58) => (at + 2, usize::from(*header.get(at + 1).ok_or("a truncated header")?)),
            _ => return Err("a header whose root is not a CID".into()),
        };
        let bytes = header.get(start..start + len).ok_or("a truncated header")?;
        if bytes.first() != Some(&0x00) || !header.ends_with(b"version\x01") {
            return Err("a header that is not CARv1's".into());
        }
        let root = Cid::try_from(&bytes[1..]).map_err(|e| format!("the root: {e}"))?;
        Ok(Self { input, root })
    }

    /// The CID the header names.
    pub fn root(&self) -> &Cid {
        &self.root
    }

    /// The next block (its CID and bytes, which hash to it); `None` at the
    /// end of the file.
    pub fn next_block(&mut self) -> Result<Option<(Cid, Vec<u8>)>, String> {
        let Some(len) = read_varint(&mut self.input)? else { return Ok(None) };
        let len = usize::try_from(len).map_err(|_| "a block past memory".to_owned())?;
        if len > MAX_BLOCK {
            return Err(format!("a block of {len} bytes (at most {MAX_BLOCK})"));
        }
        let mut frame = vec![0u8; len];
        self.input.read_exact(&mut frame).map_err(|e| format!("a block: {e}"))?;
        let mut cursor = std::io::Cursor::new(&frame[..]);
        let cid = Cid::read_bytes(&mut cursor).map_err(|e| format!("a block's CID: {e}"))?;
        let bytes = frame[cursor.position() as usize..].to_vec();
        if cid.codec() != RAW || cid.hash().code() != SHA2_256 {
            return Err(format!("block {cid}: not a raw block of sha2-256"));
        }
        if raw_cid(&bytes) != cid {
            return Err(format!("block {cid}: its bytes do not hash to its CID"));
        }
        Ok(Some((cid, bytes)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_car_reads_back_as_written_and_a_changed_byte_is_caught() {
        let root_block = b"{\"epochs\":[]}".to_vec();
        let root = raw_cid(&root_block);
        let mut w = Writer::new(Vec::new(), &root).unwrap();
        assert_eq!(w.block(&root_block).unwrap(), root);
        let big = vec![b'x'; 300];
        w.block(b"{\"a\":1}").unwrap();
        w.block(&big).unwrap();
        let file = w.into_inner();
        let mut r = Reader::new(&file[..]).unwrap();
        assert_eq!(r.root(), &root);
        let mut blocks = Vec::new();
        while let Some((cid, bytes)) = r.next_block().unwrap() {
            assert_eq!(cid.to_string(), crate::cid::cid(&bytes));
            blocks.push(bytes);
        }
        assert_eq!(blocks, [root_block, b"{\"a\":1}".to_vec(), big]);
        // The header as go-car writes it for one raw root (DAG-CBOR).
        assert_eq!(&file[..3], &[0x3a, 0xa2, 0x65]);
        // A byte changed in the last block: named.
        let mut bad = file.clone();
        *bad.last_mut().unwrap() = b'y';
        let mut r = Reader::new(&bad[..]).unwrap();
        let err = std::iter::from_fn(|| r.next_block().transpose()).find_map(Result::err).unwrap();
        assert!(err.contains("do not hash to its CID"), "{err}");
        // A truncated file: named, not a panic.
        let mut r = Reader::new(&file[..file.len() - 5]).unwrap();
        let err = std::iter::from_fn(|| r.next_block().transpose()).find_map(Result::err).unwrap();
        assert!(err.contains("a block"), "{err}");
        assert!(Reader::new(&b""[..]).is_err());
    }
}
