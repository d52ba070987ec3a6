//! What a worker has observed of its peers, and its verdicts on them.

use std::time::{Instant, SystemTime};

use lease_core::LeaseToken;

/// One session record as this worker last saw it.
#[derive(Clone, Debug)]
pub(crate) struct Observed {
    pub(crate) fencing: u64,
    pub(crate) held: bool,
    pub(crate) expires_at: Option<SystemTime>,
    /// When this worker first saw this (fencing, expires_at), on its monotonic clock.
    pub(crate) since: Instant,
}

/// Who holds a unit record, as parsed from its owner token.
#[derive(Clone, Debug)]
pub(crate) struct UnitHolder {
    /// The holder's token, if the store shows it.
    pub(crate) token: Option<LeaseToken>,
    /// `(worker id, session fencing)`, or `None` when the token is not a fleet token.
    pub(crate) owner: Option<(String, u64)>,
    /// The record's fencing counter and expiry: with the token, what "unchanged" compares.
    pub(crate) fencing: u64,
    pub(crate) expires_at: Option<SystemTime>,
}

/// A unit owner's session that was missing from the sessions listing.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Absence {
    /// When the units listing that named this session returned (monotonic).
    pub(crate) named_at: Instant,
    /// When the first sessions listing *sent after* `named_at` that missed the record returned:
    /// the start of the session duration after which the session counts as ended.
    pub(crate) since: Option<Instant>,
}

/// A unit record held under a token that is not a fleet token, as first seen unchanged.
#[derive(Clone, Debug)]
pub(crate) struct Foreign {
    pub(crate) token: LeaseToken,
    pub(crate) fencing: u64,
    pub(crate) expires_at: Option<SystemTime>,
    /// When the units listing that first showed this exact record returned (monotonic).
    pub(crate) since: Instant,
}
