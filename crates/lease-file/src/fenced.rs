//! The on-disk format of fenced values ([`lease_core::FencedValues`] on a
//! [`DirectoryStore`](crate::DirectoryStore)).
//!
//! One file per name, [`fenced_file_name`](crate::fenced_file_name), holding a small binary
//! header, the value's raw bytes and a checksum, all integers big-endian:
//!
//! | bytes | field                                                      |
//! |-------|------------------------------------------------------------|
//! | 8     | magic `LFFENCE1`                                           |
//! | 8     | fence: the highest fencing token that touched the name     |
//! | 1     | 1 if a value was ever stored, 0 if the name was only fenced |
//! | 4     | value length (at most `MAX_FENCED_VALUE_BYTES`)            |
//! | n     | the value                                                  |
//! | 8     | FNV-1a 64 of every byte before it                          |
//!
//! Anything else (a truncated file, a wrong length, a flipped bit) is refused as corrupt rather
//! than read as empty.

use lease_core::MAX_FENCED_VALUE_BYTES;

const MAGIC: &[u8; 8] = b"LFFENCE1";
const HEADER: usize = 8 + 8 + 1 + 4;
const TRAILER: usize = 8;

/// Largest fenced-value file read, in bytes: the header, a value of
/// [`MAX_FENCED_VALUE_BYTES`] and the checksum. Larger files are refused unread past the cap.
pub const MAX_FENCED_FILE_BYTES: usize = HEADER + MAX_FENCED_VALUE_BYTES + TRAILER;

/// A parsed fenced-value file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FencedFile {
    pub(crate) fence: u64,
    pub(crate) value: Option<Vec<u8>>,
}

/// The file's bytes for `fence` and `value` (`value` at most [`MAX_FENCED_VALUE_BYTES`], checked
/// by the caller).
pub(crate) fn encode(fence: u64, value: Option<&[u8]>) -> Vec<u8> {
    let data = value.unwrap_or_default();
    let len = u32::try_from(data.len()).unwrap_or(u32::MAX);
    let mut bytes = Vec::with_capacity(HEADER + data.len() + TRAILER);
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&fence.to_be_bytes());
    bytes.push(u8::from(value.is_some()));
    bytes.extend_from_slice(&len.to_be_bytes());
    bytes.extend_from_slice(data);
    let sum = crate::encode::fnv(&bytes);
    bytes.extend_from_slice(&sum.to_be_bytes());
    bytes
}

fn be_u64(bytes: &[u8]) -> u64 {
    let mut raw = [0u8; 8];
    raw.copy_from_slice(&bytes[..8]);
    u64::from_be_bytes(raw)
}

/// Parses a fenced-value file. Never panics, whatever the bytes.
pub(crate) fn parse(bytes: &[u8]) -> Result<FencedFile, String> {
    if bytes.is_empty() {
        return Err("the file is empty (truncated or half-created)".into());
    }
    if bytes.len() < HEADER + TRAILER {
        return Err(format!(
            "{} bytes is shorter than the {} of an empty fenced value",
            bytes.len(),
            HEADER + TRAILER
        ));
    }
    if &bytes[..8] != MAGIC {
        return Err("bad magic: not a fenced-value file (version 1)".into());
    }
    let (body, sum) = bytes.split_at(bytes.len() - TRAILER);
    if crate::encode::fnv(body) != be_u64(sum) {
        return Err("checksum mismatch".into());
    }
    let fence = be_u64(&body[8..16]);
    let has_value = match body[16] {
        0 => false,
        1 => true,
        other => return Err(format!("bad value flag {other}")),
    };
    let mut raw_len = [0u8; 4];
    raw_len.copy_from_slice(&body[17..21]);
    let len = usize::try_from(u32::from_be_bytes(raw_len)).unwrap_or(usize::MAX);
    if len > MAX_FENCED_VALUE_BYTES {
        return Err(format!(
            "value length {len} exceeds the limit {MAX_FENCED_VALUE_BYTES}"
        ));
    }
    if body.len() - HEADER != len {
        return Err(format!(
            "value length {len} disagrees with the file's {} value bytes",
            body.len() - HEADER
        ));
    }
    if !has_value && len != 0 {
        return Err("a fence-only file carries value bytes".into());
    }
    Ok(FencedFile {
        fence,
        value: has_value.then(|| body[HEADER..].to_vec()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        for (fence, value) in [
            (0, None),
            (7, Some(&b""[..])),
            (u64::MAX, Some(&b"offset=10"[..])),
        ] {
            let parsed = parse(&encode(fence, value)).unwrap();
            assert_eq!(parsed.fence, fence);
            assert_eq!(parsed.value.as_deref(), value);
        }
        let big = vec![0x5a; MAX_FENCED_VALUE_BYTES];
        let bytes = encode(3, Some(&big));
        assert_eq!(bytes.len(), MAX_FENCED_FILE_BYTES);
        assert_eq!(parse(&bytes).unwrap().value.unwrap(), big);
    }

    #[test]
    fn every_truncation_and_bit_flip_is_refused() {
        let bytes = encode(42, Some(b"checkpoint"));
        for cut in 0..bytes.len() {
            assert!(parse(&bytes[..cut]).is_err(), "truncated to {cut}");
        }
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut bad = bytes.clone();
                bad[i] ^= 1 << bit;
                assert!(parse(&bad).is_err(), "byte {i} bit {bit}");
            }
        }
        let mut longer = bytes;
        longer.push(0);
        assert!(parse(&longer).is_err());
    }

    proptest::proptest! {
        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            let _ = parse(&bytes);
        }
    }
}
