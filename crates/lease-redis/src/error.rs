//! What a failed Redis call means, under [`LeaseError::Backend`].

use std::fmt;

use lease_core::LeaseError;

/// What kind of failure a [`RedisError`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RedisErrorKind {
    /// The connection could not be made or was lost (refused, reset, closed, killed with
    /// `CLIENT KILL`): the outcome of a call in flight is unknown. Transient.
    Connection,
    /// No reply within the attempt timeout: the outcome is unknown. Transient.
    Timeout,
    /// The server refused the call for a reason that may pass: loading its data set
    /// (`LOADING`), a replica answering writes (`READONLY`, during a failover), `MASTERDOWN`,
    /// `TRYAGAIN`, `CLUSTERDOWN`, a script running too long (`BUSY`). Transient.
    Busy,
    /// A grant fewer replicas acknowledged than
    /// [`with_wait_for_replicas`](crate::RedisLeasesBuilder::with_wait_for_replicas) asks for
    /// (a replica down or lagging); the grant was released. Transient.
    Unreplicated,
    /// The user may not run the command (`NOPERM`) or could not authenticate.
    Permission,
    /// A script answered something this crate does not write: another program wrote the
    /// crate's keys (see the key layout in [`design`](crate::design)).
    Unexpected,
    /// Anything else the server or the client refused; not retried.
    Rejected,
}

/// A failed Redis call: the operation, the key prefix, what it means and how to fix it, with
/// redis-rs's error as its [`source`](std::error::Error::source).
///
/// ```
/// use lease_redis::{RedisError, RedisErrorKind};
/// # fn demo(error: lease_core::LeaseError) {
/// if let lease_core::LeaseError::Backend { source, .. } = &error
///     && let Some(redis) = source.downcast_ref::<RedisError>()
///     && redis.kind() == RedisErrorKind::Permission
/// {
///     eprintln!("grant the user EVALSHA, SCRIPT, HMGET and INFO: {redis}");
/// }
/// # }
/// ```
#[derive(Debug)]
pub struct RedisError {
    operation: &'static str,
    prefix: String,
    kind: RedisErrorKind,
    detail: String,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl RedisError {
    pub(crate) fn new(
        operation: &'static str,
        prefix: &str,
        kind: RedisErrorKind,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            operation,
            prefix: prefix.to_owned(),
            kind,
            detail: detail.into(),
            source: None,
        }
    }

    pub(crate) fn with_source(
        mut self,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        self.source = Some(source.into());
        self
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> RedisErrorKind {
        self.kind
    }

    /// The operation that failed (`"acquire"`, `"renew"`, `"inspect"`, ...).
    pub fn operation(&self) -> &'static str {
        self.operation
    }

    /// The key prefix the operation addressed.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Whether retrying may help.
    pub fn is_transient(&self) -> bool {
        matches!(
            self.kind,
            RedisErrorKind::Connection
                | RedisErrorKind::Timeout
                | RedisErrorKind::Busy
                | RedisErrorKind::Unreplicated
        )
    }

    /// Whether the connection the call went over must not be used again: its state is
    /// unknown (a reply may still arrive), or it reached a server that is no longer the
    /// primary, whose identity must be read again.
    pub(crate) fn poisons_connection(&self) -> bool {
        self.is_transient()
    }

    pub(crate) fn into_lease_error(self) -> LeaseError {
        let transient = self.is_transient();
        LeaseError::backend(crate::BACKEND, transient, self)
    }
}

impl fmt::Display for RedisError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} on Redis key prefix `{}`: {}",
            self.operation, self.prefix, self.detail
        )
    }
}

impl std::error::Error for RedisError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// Classifies redis-rs's error from `operation` on `prefix`.
pub(crate) fn from_driver(
    operation: &'static str,
    prefix: &str,
    error: redis::RedisError,
) -> RedisError {
    use redis::{ErrorKind, ServerErrorKind};
    let code = error.code().map(str::to_owned);
    let (kind, detail) = match error.kind() {
        ErrorKind::Server(
            ServerErrorKind::BusyLoading
            | ServerErrorKind::ReadOnly
            | ServerErrorKind::MasterDown
            | ServerErrorKind::TryAgain
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::Moved
            | ServerErrorKind::Ask,
        ) => (
            RedisErrorKind::Busy,
            "the server cannot take this write now (loading, a replica, its primary down, or the \
             prefix's hash slot moved to another node); retried on a fresh connection"
                .to_owned(),
        ),
        ErrorKind::Server(ServerErrorKind::NoPerm) | ErrorKind::AuthenticationFailed => (
            RedisErrorKind::Permission,
            "the user may not run it; grant EVALSHA, EVAL, SCRIPT LOAD, HMGET, INFO, PUBLISH and \
             SUBSCRIBE on the prefix's keys and channel (`+@scripting +hmget +info ~{prefix}*`)"
                .to_owned(),
        ),
        _ if code.as_deref() == Some("BUSY") => (
            RedisErrorKind::Busy,
            "the server is running a long script (BUSY)".to_owned(),
        ),
        _ if error.is_timeout() => (
            RedisErrorKind::Timeout,
            "no answer in time; the outcome is unknown".to_owned(),
        ),
        _ if error.is_io_error()
            || error.is_connection_dropped()
            || error.is_connection_refusal() =>
        {
            (
                RedisErrorKind::Connection,
                "the connection failed or was closed; the outcome is unknown".to_owned(),
            )
        }
        ErrorKind::Server(_) | ErrorKind::Extension => (
            RedisErrorKind::Rejected,
            format!(
                "the server refused it ({})",
                code.as_deref().unwrap_or("an error without a code")
            ),
        ),
        _ => (
            RedisErrorKind::Rejected,
            "the client refused it (see the source)".to_owned(),
        ),
    };
    RedisError::new(operation, prefix, kind, detail).with_source(error)
}
