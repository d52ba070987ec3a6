//! The table name (validated and quoted, never interpolated raw) and its creation.

use deadpool_postgres::Pool;
use lease_core::LeaseError;

use crate::error::{PgError, PgErrorKind};

/// Longest identifier PostgreSQL keeps (`NAMEDATALEN - 1`).
const MAX_IDENTIFIER_BYTES: usize = 63;

/// A validated `table` or `schema.table`, with its quoted SQL form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TableName {
    /// As the caller wrote it, for messages.
    pub(crate) plain: String,
    /// Quoted identifiers, for statements: `"schema"."table"`.
    pub(crate) quoted: String,
    /// The `LISTEN`/`NOTIFY` channel of this table's changes.
    pub(crate) channel: String,
}

impl TableName {
    /// Parses `table` or `schema.table`: each part 1 to 63 bytes of ASCII letters, digits, `_`
    /// and `-`, not starting with a digit.
    pub(crate) fn parse(name: &str) -> Result<Self, LeaseError> {
        let parts: Vec<&str> = name.split('.').collect();
        if parts.len() > 2 {
            return Err(LeaseError::invalid(
                "table",
                format!("`{name}` has more than one `.`: name a table or schema.table"),
            ));
        }
        for part in &parts {
            validate_identifier(name, part)?;
        }
        let quoted = parts
            .iter()
            .map(|p| format!("\"{p}\""))
            .collect::<Vec<_>>()
            .join(".");
        Ok(Self {
            plain: name.to_owned(),
            quoted,
            channel: channel_for(name),
        })
    }

    /// A single-quoted SQL literal of the quoted name, for `'...'::regclass`.
    pub(crate) fn regclass_literal(&self) -> String {
        format!("'{}'", self.quoted.replace('\'', "''"))
    }
}

fn validate_identifier(name: &str, part: &str) -> Result<(), LeaseError> {
    let reason = if part.is_empty() {
        Some("has an empty part".to_owned())
    } else if part.len() > MAX_IDENTIFIER_BYTES {
        Some(format!(
            "has a part of {} bytes; PostgreSQL keeps {MAX_IDENTIFIER_BYTES}",
            part.len()
        ))
    } else if part.starts_with(|c: char| c.is_ascii_digit()) {
        Some("has a part that starts with a digit".to_owned())
    } else if !part
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        Some("may hold only ASCII letters, digits, `_` and `-` (and one `.`)".to_owned())
    } else {
        None
    };
    match reason {
        Some(reason) => Err(LeaseError::invalid("table", format!("`{name}` {reason}"))),
        None => Ok(()),
    }
}

/// The notification channel of a table: a fixed-length name (a channel is an identifier, at
/// most 63 bytes) derived from the table's name with FNV-1a, so two tables never share wake-ups
/// by accident of truncation.
fn channel_for(name: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in name.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("lease_{hash:016x}")
}

/// The statement that creates a lease table and its index, if missing.
pub(crate) fn create_statement(table: &TableName) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {t} (
            kind text NOT NULL,
            partition text NOT NULL,
            sort_key text NOT NULL,
            holder text,
            owner text,
            value text,
            fencing bigint NOT NULL,
            duration_ms bigint,
            acquired_at timestamptz,
            renewed_at timestamptz,
            expires_at timestamptz,
            request_id uuid,
            data bytea,
            incarnation text,
            grants_from timestamptz,
            PRIMARY KEY (kind, partition, sort_key)
        )",
        t = table.quoted
    )
}

/// Creates the lease table `table` (`table` or `schema.table`; the schema must exist) if it is
/// missing: idempotent, so a service may call it at every start. One statement.
///
/// The role needs `CREATE` on the schema; the roles that hold leases need `SELECT`, `INSERT`,
/// `UPDATE` and `DELETE` on the table.
///
/// ```no_run
/// # async fn demo() -> Result<(), lease_core::LeaseError> {
/// let pool = lease_postgres::pool_from_url("postgres://app@localhost/app")?;
/// lease_postgres::create_table(&pool, "ops.leases").await?;
/// # Ok(()) }
/// ```
///
/// # Errors
/// [`LeaseError::InvalidInput`] for an invalid name (nothing is sent);
/// [`LeaseError::Backend`] with a [`PgError`] when the server refuses or cannot be reached.
pub async fn create_table(pool: &Pool, table: &str) -> Result<(), LeaseError> {
    let name = TableName::parse(table)?;
    let client = pool.get().await.map_err(|e| {
        PgError::new(
            "create table",
            &name.plain,
            PgErrorKind::Connection,
            "no connection from the pool",
        )
        .with_source(e)
        .into_lease_error()
    })?;
    tracing::info!(table = %name.plain, "creating the lease table if missing");
    client
        .batch_execute(&create_statement(&name))
        .await
        .map_err(|e| {
            crate::error::from_driver("create table", &name.plain, e).into_lease_error()
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_quoted_and_checked() {
        let t = TableName::parse("ops.leases").expect("valid");
        assert_eq!(t.quoted, "\"ops\".\"leases\"");
        assert!(t.channel.len() <= MAX_IDENTIFIER_BYTES);
        for bad in ["", "a.b.c", "x\"y", "a;drop", "1abc", ".a", &"x".repeat(64)] {
            assert!(TableName::parse(bad).is_err(), "{bad}");
        }
        assert_ne!(channel_for("a"), channel_for("b"));
    }
}
