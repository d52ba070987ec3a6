//! Lease keys to file names and back: a reversible encoding no key can escape the directory with.

use lease_core::{LeaseError, LeaseKey};

/// 64-bit FNV-1a: stable across builds and Rust versions (names are shared between processes).
pub(crate) fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Suffix of record files in a [`DirectoryStore`](crate::DirectoryStore).
pub(crate) const RECORD_SUFFIX: &str = ".lease";

/// Longest record file name: `NAME_MAX` (255) minus room for the companion and temporary names.
pub(crate) const MAX_FILE_NAME_BYTES: usize = 200;

fn encode_part(part: &str, out: &mut String) {
    for byte in part.bytes() {
        if byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-' {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
}

/// The record file name of `key`: each part percent-encoded (everything outside
/// `[A-Za-z0-9_-]` becomes `%XX`), joined by `.`, plus [`RECORD_SUFFIX`]. The result never
/// holds `/`, never starts with `.`, and is never `.` or `..`.
/// (`("../etc", "pass wd")` is `%2E%2E%2Fetc.pass%20wd.lease`.)
///
/// # Errors
/// [`LeaseError::InvalidInput`] when the encoded name is longer than [`MAX_FILE_NAME_BYTES`].
pub(crate) fn key_file_name(key: &LeaseKey) -> Result<String, LeaseError> {
    let mut name = String::new();
    encode_part(key.partition(), &mut name);
    if let Some(sort) = key.sort() {
        name.push('.');
        encode_part(sort, &mut name);
    }
    name.push_str(RECORD_SUFFIX);
    if name.len() > MAX_FILE_NAME_BYTES {
        return Err(LeaseError::invalid(
            "key",
            format!(
                "encodes to a {}-byte file name; the file backend allows {MAX_FILE_NAME_BYTES} \
                 (bytes outside [A-Za-z0-9_-] take three each)",
                name.len()
            ),
        ));
    }
    Ok(name)
}

/// The lock directory name of `key` in a store with verbatim names: the key's name as it is.
///
/// # Errors
/// [`LeaseError::InvalidInput`] unless the key is one plain file name: no sort key, no `/` or
/// NUL, not `.` or `..`, at most 255 bytes.
pub(crate) fn verbatim_file_name(key: &LeaseKey) -> Result<&str, LeaseError> {
    let name = key.partition();
    let problem = if key.sort().is_some() {
        Some("has a sort key; a lock at an exact path is named by one file name".to_owned())
    } else if name == "." || name == ".." || name.contains(['/', '\0']) {
        Some("is not a plain file name (no `/`, not `.` or `..`)".to_owned())
    } else if name.len() > 255 {
        Some(format!(
            "is {} bytes; a file name has at most 255",
            name.len()
        ))
    } else {
        None
    };
    match problem {
        Some(problem) => Err(LeaseError::invalid("key", problem)),
        None => Ok(name),
    }
}

fn decode_part(part: &str) -> Option<String> {
    let bytes = part.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            if !hex
                .bytes()
                .all(|c| c.is_ascii_digit() || (b'A'..=b'F').contains(&c))
            {
                return None;
            }
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
            out.push(b);
            i += 1;
        } else {
            return None;
        }
    }
    String::from_utf8(out).ok()
}

/// The key a record file name stands for, or `None` if it is not one (temporary and companion
/// files, foreign files, non-canonical encodings).
pub(crate) fn decode_file_name(name: &str) -> Option<LeaseKey> {
    let stem = name.strip_suffix(RECORD_SUFFIX)?;
    let mut parts = stem.split('.');
    let partition = decode_part(parts.next()?)?;
    let key = match (parts.next(), parts.next()) {
        (None, _) => LeaseKey::new(partition).ok()?,
        (Some(sort), None) => LeaseKey::with_sort_key(partition, decode_part(sort)?).ok()?,
        _ => return None,
    };
    // Only the canonical spelling maps back, so one key never has two files.
    (key_file_name(&key).ok()? == name).then_some(key)
}

/// Prefix of fenced-value files ([`FencedValues`](lease_core::FencedValues)) in a
/// [`DirectoryStore`](crate::DirectoryStore).
///
/// `~` is outside the key encoding's alphabet (`[A-Za-z0-9_%-]` and the `.` separator; a `~` in
/// a key becomes `%7E`), so no lease record name, nor any name derived from one (its `.lock`
/// companion, `.cs.<n>` epochs, temporary files), contains it, while every fenced-value name and
/// every name derived from one does: the two namespaces can never collide.
pub(crate) const FENCED_PREFIX: &str = "fenced~";

/// The fenced-value file name of `name`: [`FENCED_PREFIX`] followed by the key encoded as
/// [`key_file_name`] does, without [`RECORD_SUFFIX`].
/// (`("checkpoints", "shard 7")` is `fenced~checkpoints.shard%207`, which never decodes as a
/// lease key.)
///
/// # Errors
/// [`LeaseError::InvalidInput`] as [`key_file_name`].
pub(crate) fn fenced_file_name(name: &LeaseKey) -> Result<String, LeaseError> {
    let record = key_file_name(name)?;
    let stem = record.strip_suffix(RECORD_SUFFIX).unwrap_or(&record);
    Ok(format!("{FENCED_PREFIX}{stem}"))
}
