//! The JSON lease record.

use serde::{Deserialize, Serialize};

use crate::fsio::MAX_RECORD_BYTES;

/// The record schema version this crate writes and reads.
pub(crate) const SCHEMA_VERSION: u32 = 1;

/// The lease record kept in the lock file, as JSON.
///
/// A record with no `owner` is a *released* record: it keeps the fencing `generation` so the
/// next acquisition continues from it. Every field beyond `version`, `generation` and `owner` is
/// for liveness checks and diagnostics.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub(crate) struct LeaseFileRecord {
    /// Schema version ([`SCHEMA_VERSION`]).
    pub(crate) version: u32,
    /// Owner id of the current acquisition (a random token), `None` when released.
    #[serde(default)]
    pub(crate) owner: Option<String>,
    /// A human label of the owner.
    #[serde(default)]
    pub(crate) label: Option<String>,
    /// Process id of the writer.
    pub(crate) pid: u32,
    /// Host name of the writer.
    #[serde(default)]
    pub(crate) host: String,
    /// Inode of the writer's PID namespace (`/proc/self/ns/pid`).
    #[serde(default)]
    pub(crate) pid_ns: Option<u64>,
    /// Kernel boot id of the writer's host: process start times only compare within one boot.
    #[serde(default)]
    pub(crate) boot_id: Option<String>,
    /// The writer's process start time, in clock ticks since boot (`/proc/self/stat` field 22).
    #[serde(default)]
    pub(crate) start_time: Option<u64>,
    /// Heartbeat counter: bumped by every heartbeat. Contenders time how long it stays unchanged.
    #[serde(default)]
    pub(crate) heartbeat: u64,
    /// Wall time of the last write, in nanoseconds since the Unix epoch (diagnostic only for the
    /// blocking lock).
    #[serde(default)]
    pub(crate) written_at_ns: u64,
    /// Wall time the current owner acquired the lease, nanoseconds since the Unix epoch.
    #[serde(default)]
    pub(crate) acquired_at_ns: u64,
    /// Wall time the lease expires, nanoseconds since the Unix epoch (the directory store's
    /// expiry; diagnostic for the blocking lock).
    #[serde(default)]
    pub(crate) expires_at_ns: u64,
    /// Fencing generation: strictly increasing across every acquisition, kept across release.
    pub(crate) generation: u64,
    /// Whether the owner holds the kernel lock on the tenure file (`<path>.owner`).
    #[serde(default)]
    pub(crate) tenure: bool,
    /// The critical-section protocol of the writer: `"kernel"` or `"heartbeat-only"`. Processes
    /// running different protocols on one path would not exclude each other, so a lock refuses
    /// a held record written under the other one.
    #[serde(default)]
    pub(crate) protocol: Option<String>,
    /// The directory store's key: partition key.
    #[serde(default)]
    pub(crate) partition: Option<String>,
    /// The directory store's key: sort key.
    #[serde(default)]
    pub(crate) sort: Option<String>,
    /// The value the holder published with its acquisition (`AcquireOptions::with_value`).
    /// Optional and omitted when absent: older readers and the Go package ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) value: Option<String>,
}

/// Why bytes are not a valid record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum RecordError {
    /// Larger than [`MAX_RECORD_BYTES`](crate::MAX_RECORD_BYTES).
    #[error("record of {0} bytes exceeds the limit")]
    TooLarge(usize),
    /// Empty (a truncated or half-created file).
    #[error("record is empty")]
    Empty,
    /// Not JSON of the record's shape.
    #[error("record is not valid JSON: {0}")]
    Malformed(String),
    /// A schema version this crate does not know.
    #[error("record has unsupported schema version {0} (this crate reads {SCHEMA_VERSION})")]
    Version(u32),
}

impl LeaseFileRecord {
    /// Parses a record from raw file bytes. Never panics, whatever the bytes (property-tested in
    /// `src/tests.rs`).
    ///
    /// # Errors
    /// A [`RecordError`] saying what is wrong.
    pub(crate) fn parse(bytes: &[u8]) -> Result<Self, RecordError> {
        if bytes.len() > MAX_RECORD_BYTES {
            return Err(RecordError::TooLarge(bytes.len()));
        }
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(RecordError::Empty);
        }
        let record: Self =
            serde_json::from_slice(bytes).map_err(|e| RecordError::Malformed(e.to_string()))?;
        if record.version != SCHEMA_VERSION {
            return Err(RecordError::Version(record.version));
        }
        Ok(record)
    }

    /// The record as JSON bytes, with a trailing newline.
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec(self).unwrap_or_default();
        bytes.push(b'\n');
        bytes
    }
}
