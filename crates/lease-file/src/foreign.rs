//! Lock files of other protocols at a lock path: recognised, named, never taken over.
//!
//! * A Go `kit/lockfile` `PIDLock` holds its lock as a regular file at the path, created with
//!   `O_EXCL` and removed on release. While it is there, this crate reports the lock
//!   [`Held`](crate::FsError::Held) by it; once the Go process removes it, this crate
//!   creates its lock directory in its place. The Go package, for its part, cannot read a
//!   directory as a record and fails its `Acquire` with an error while this crate's directory
//!   exists. So the two never both hold the path, and neither deletes the other's lock.
//!   A Go lock file is rewritten in place, so it can be read empty or cut short: such a file
//!   counts as held while it is fresh (see [`classify`]).
//! * A lease-file 0.1 record (the previous on-disk format), or a file in no format known and
//!   not modified for 1.2 s, is refused as [`Foreign`](crate::FsError::Foreign) with what
//!   to do.

use std::path::Path;
use std::time::{Duration, SystemTime};

use serde::Deserialize;

use lease_core::Holder;

use crate::error::FsError;
use crate::record::LeaseFileRecord;

/// How long the Go package counts an unparseable lock file as held, by its modification time
/// (`InvalidPIDLockStaleThreshold`'s default): a Go holder rewrites its file every 250 ms.
pub(crate) const GO_INVALID_STALE: Duration = Duration::from_millis(1200);

/// The record a Go `kit/lockfile` `PIDLock` writes (`lockFileLeaseRecord`).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GoRecord {
    version: i64,
    #[serde(rename = "ownerID")]
    owner_id: String,
    pid: i64,
    last_heartbeat_unix_nano: i64,
}

/// Whether `bytes` is a record as the Go package writes and accepts it.
fn go_record(bytes: &[u8]) -> Option<GoRecord> {
    let record: GoRecord = serde_json::from_slice(bytes).ok()?;
    let valid = record.version == 1
        && !record.owner_id.trim().is_empty()
        && record.pid > 0
        && record.last_heartbeat_unix_nano > 0;
    valid.then_some(record)
}

/// What a regular file at a lock path means for this crate.
///
/// `bytes` were read through the descriptor whose type was checked, `modified` taken from it
/// after the read. A Go `PIDLock` is written in place, so a read can see it empty (between its
/// `O_EXCL` create and its write, or between the truncate and the write of a heartbeat) or cut
/// short (during the write): an empty file, or an unparseable one modified less than
/// [`GO_INVALID_STALE`] ago, is a Go lock being written, held, as the Go package counts it.
pub(crate) fn classify(path: &Path, bytes: &[u8], modified: Option<SystemTime>) -> FsError {
    let held = |pid: u32, since: Option<SystemTime>, what: String| FsError::Held {
        path: path.to_owned(),
        holder: Box::new({
            // What is known of another protocol's holder says more than a label would; errors
            // show its first 120 characters.
            let mut holder = Holder::new().with_owner(what);
            if pid != 0 {
                holder = holder.with_process(pid, "an unknown host");
            }
            if let Some(at) = since {
                holder = holder.with_renewed_at(at);
            }
            holder
        }),
        kernel_lock: false,
    };
    if let Some(go) = go_record(bytes) {
        let at = SystemTime::UNIX_EPOCH
            + Duration::from_nanos(u64::try_from(go.last_heartbeat_unix_nano).unwrap_or(0));
        return held(
            u32::try_from(go.pid).unwrap_or(0),
            Some(at),
            // First what matters (errors show the first 120 characters of a holder): this crate
            // never takes over another protocol's lock.
            format!(
                "Go kit/lockfile PIDLock of {} (never taken over: free once released, or \
                 removed by hand)",
                go.owner_id
            ),
        );
    }
    if bytes.is_empty() {
        return held(
            0,
            None,
            "an empty regular file (a Go kit/lockfile PIDLock being created or rewritten?)".into(),
        );
    }
    if LeaseFileRecord::parse(bytes).is_ok() {
        return FsError::Foreign {
            path: path.to_owned(),
            reason: "a lease-file 0.1 record (the previous on-disk format); stop every process \
                     using it, then remove it and its .lock and .owner companions"
                .into(),
        };
    }
    // How far the modification time is from now, either way (a skewed clock, a planted time).
    let distance = modified.map(|at| at.elapsed().unwrap_or_else(|e| e.duration()));
    if let Some(age) = distance.filter(|d| *d < GO_INVALID_STALE) {
        return held(
            0,
            None,
            format!(
                "an unparseable regular file modified {}ms ago (a Go kit/lockfile PIDLock being \
                 written?); foreign if so for {}ms",
                age.as_millis(),
                GO_INVALID_STALE.as_millis()
            ),
        );
    }
    unknown(path, bytes.len() as u64)
}

/// A regular file of `len` bytes in no format this crate knows.
pub(crate) fn unknown(path: &Path, len: u64) -> FsError {
    FsError::Foreign {
        path: path.to_owned(),
        reason: format!(
            "a regular file of {len} bytes in no format this crate knows; a lock is a directory"
        ),
    }
}
