//! Exit statuses of `lease`, and the failure type every command returns.
//!
//! | status | meaning |
//! |---|---|
//! | the command's own | `lease run`: the command ran under the lease and exited |
//! | 128 + N | `lease run`: the command was killed by signal N |
//! | 0 | other commands: done |
//! | 64 | bad input: unknown flags, a flag combination that makes no sense, an unparsable duration or key, a missing command, a missing confirmation flag |
//! | 65 | the store's record is corrupt (a malformed DynamoDB item, a lock directory with two states) or another protocol's (an old lease-file record, an unknown file): every acquisition refuses it until an operator repairs or removes it; `lease status` shows why |
//! | 69 | the backend failed or cannot be opened (unwritable directory, unreachable endpoint, missing table) |
//! | 70 | an internal error (a bug, or the process could not start a thread) |
//! | 75 | the lease is held by another owner (`--wait 0`), or waiting for it timed out |
//! | 76 | the lease was lost (or could no longer be trusted) while the command ran; the command was stopped |
//! | 126 | the command was found but could not be executed |
//! | 127 | the command was not found |

use std::fmt;
use std::process::ExitStatus;

use lease_core::LeaseError;

/// Bad input (`EX_USAGE`).
pub(crate) const USAGE: u8 = 64;
/// The store's record is corrupt or another protocol's (`EX_DATAERR`): retrying cannot help.
pub(crate) const CORRUPT: u8 = 65;
/// The backend failed or cannot be opened (`EX_UNAVAILABLE`).
pub(crate) const UNAVAILABLE: u8 = 69;
/// An internal error (`EX_SOFTWARE`).
pub(crate) const SOFTWARE: u8 = 70;
/// Held by another owner, or waiting timed out (`EX_TEMPFAIL`: try again later).
pub(crate) const HELD: u8 = 75;
/// The lease was lost while the command ran.
pub(crate) const LOST: u8 = 76;
/// The command exists but cannot be executed (as in POSIX shells).
pub(crate) const NOT_EXECUTABLE: u8 = 126;
/// The command was not found (as in POSIX shells).
pub(crate) const NOT_FOUND: u8 = 127;

/// Why a command failed: a message for stderr and the exit status.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: u8,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn new(code: u8, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Self::new(USAGE, message)
    }

    pub(crate) fn unavailable(message: impl Into<String>) -> Self {
        Self::new(UNAVAILABLE, message)
    }

    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Self::new(SOFTWARE, message)
    }

    /// Maps a lease error to its status by meaning, prefixing `context` and adding the CLI's
    /// advice where it has some (how to create a missing table). A timeout whose last attempt
    /// failed for another reason than a busy lease is reported by that reason.
    pub(crate) fn lease(
        context: &str,
        error: &LeaseError,
        advice: fn(&LeaseError) -> Option<String>,
    ) -> Self {
        if let LeaseError::Timeout {
            last_error: Some(last),
            ..
        } = error
            && !last.is_held()
        {
            let code = Self::lease(context, last, advice).code;
            return match advice(last) {
                Some(advice) => Self::new(code, format!("{context}: {}; {advice}", report(error))),
                None => Self::new(code, format!("{context}: {}", report(error))),
            };
        }
        let code = if error.is_invalid_input() {
            USAGE
        } else if error.is_corrupt() || error.is_foreign() {
            CORRUPT
        } else if error.is_held() || error.is_timeout() {
            HELD
        } else if error.is_not_owned() {
            LOST
        } else {
            UNAVAILABLE
        };
        match advice(error) {
            Some(advice) => Self::new(code, format!("{context}: {}; {advice}", report(error))),
            None => Self::new(code, format!("{context}: {}", report(error))),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// `error` and every source below it, each saying its own part once (`Display` leaves the cause
/// to `source()`), joined as one line: `file backend failed: open /x: File name too long`.
pub(crate) fn report(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(source) = next {
        text.push_str(": ");
        text.push_str(&source.to_string());
        next = source.source();
    }
    text
}

/// The status of a process killed by `signal`, as shells report it.
pub(crate) fn signal_status(signal: i32) -> u8 {
    u8::try_from(128 + signal.clamp(0, 127)).unwrap_or(u8::MAX)
}

/// A child's exit status as a shell reports it: its code, or 128 + the signal that killed it.
pub(crate) fn status_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(u8::MAX),
        (None, Some(signal)) => signal_status(signal),
        (None, None) => SOFTWARE,
    }
}
