//! What a failed statement means, under [`LeaseError::Backend`].

use std::fmt;

use lease_core::LeaseError;

/// What kind of failure a [`PgError`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PgErrorKind {
    /// The connection could not be made or was lost (reset, closed, server shut down): the
    /// outcome of a statement in flight is unknown. Transient.
    Connection,
    /// No reply within the attempt timeout, or the server cancelled the statement
    /// (`statement_timeout`): the outcome is unknown. Transient.
    Timeout,
    /// The server refused the statement for a reason that may pass (serialization failure,
    /// deadlock, too many connections, the server starting up or shutting down). Transient.
    Busy,
    /// The table does not exist: create it with [`create_table`](crate::create_table).
    MissingTable,
    /// The role may not read or write the table.
    Permission,
    /// Anything else the server or the client refused; not retried.
    Rejected,
}

/// A failed PostgreSQL call: the operation, the table, what it means and how to fix it, with
/// the driver's error as its [`source`](std::error::Error::source).
#[derive(Debug)]
pub struct PgError {
    operation: &'static str,
    table: String,
    kind: PgErrorKind,
    detail: String,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl PgError {
    pub(crate) fn new(
        operation: &'static str,
        table: &str,
        kind: PgErrorKind,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            operation,
            table: table.to_owned(),
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
    pub fn kind(&self) -> PgErrorKind {
        self.kind
    }

    /// The operation that failed (`"acquire"`, `"renew"`, `"create table"`, ...).
    pub fn operation(&self) -> &'static str {
        self.operation
    }

    /// The table the operation addressed.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Whether retrying may help.
    pub fn is_transient(&self) -> bool {
        matches!(
            self.kind,
            PgErrorKind::Connection | PgErrorKind::Timeout | PgErrorKind::Busy
        )
    }

    pub(crate) fn into_lease_error(self) -> LeaseError {
        let transient = self.is_transient();
        LeaseError::backend(crate::BACKEND, transient, self)
    }
}

impl fmt::Display for PgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} on PostgreSQL table `{}`: {}",
            self.operation, self.table, self.detail
        )
    }
}

impl std::error::Error for PgError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// Classifies a driver error from `operation` on `table`.
pub(crate) fn from_driver(
    operation: &'static str,
    table: &str,
    error: tokio_postgres::Error,
) -> PgError {
    use tokio_postgres::error::SqlState;
    let (kind, detail) = match error.as_db_error() {
        Some(db) => {
            let code = db.code();
            let kind = if *code == SqlState::UNDEFINED_TABLE {
                PgErrorKind::MissingTable
            } else if *code == SqlState::INSUFFICIENT_PRIVILEGE {
                PgErrorKind::Permission
            } else if *code == SqlState::QUERY_CANCELED {
                PgErrorKind::Timeout
            } else if [
                SqlState::T_R_SERIALIZATION_FAILURE,
                SqlState::T_R_DEADLOCK_DETECTED,
                SqlState::TOO_MANY_CONNECTIONS,
                SqlState::CANNOT_CONNECT_NOW,
                SqlState::ADMIN_SHUTDOWN,
                SqlState::CRASH_SHUTDOWN,
                SqlState::READ_ONLY_SQL_TRANSACTION,
            ]
            .contains(code)
            {
                PgErrorKind::Busy
            } else {
                PgErrorKind::Rejected
            };
            let fix = match kind {
                PgErrorKind::MissingTable => {
                    "; create it with lease_postgres::create_table (`lease table create --postgres URL`)"
                }
                PgErrorKind::Permission => {
                    "; grant the role SELECT, INSERT, UPDATE and DELETE on the table"
                }
                _ => "",
            };
            (
                kind,
                format!(
                    "the server refused the statement ({}: {}){fix}",
                    code.code(),
                    db.message()
                ),
            )
        }
        None if error.is_closed() => (
            PgErrorKind::Connection,
            "the connection was closed; the outcome is unknown".to_owned(),
        ),
        None => (
            PgErrorKind::Connection,
            "the connection failed; the outcome is unknown".to_owned(),
        ),
    };
    PgError::new(operation, table, kind, detail).with_source(error)
}
