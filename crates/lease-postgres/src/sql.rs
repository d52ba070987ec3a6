//! The statement of each operation, built once per manager with the table's quoted name.
//!
//! Every statement is sent as an unnamed statement (`query_typed`: Parse, Bind, Execute, Sync in
//! one round trip), never prepared by name, so a transaction-mode pooler may hand each one to any
//! server connection. Each begins with a comment naming the operation, which shows in
//! `pg_stat_activity` and `pg_stat_statements` (and which the tests' fault proxy reads).

use crate::table::TableName;

/// The server's clock, unless the test hook names the time (`NULL` in production: see
/// [`PgLeasesBuilder::with_clock`](crate::PgLeasesBuilder::with_clock)).
fn now_cte(at: usize) -> String {
    format!("now AS (SELECT COALESCE(${at}::timestamptz, statement_timestamp()) AS t)")
}

/// The statements of one table.
#[derive(Debug)]
pub(crate) struct Statements {
    pub(crate) acquire: String,
    pub(crate) acquire_checked: String,
    pub(crate) renew: String,
    pub(crate) release: String,
    pub(crate) delete: String,
    pub(crate) inspect: String,
    pub(crate) list: String,
    pub(crate) fence_and_read: String,
    pub(crate) put_fenced: String,
}

/// The columns of a lease row that describe its holder, as every statement returns them.
pub(crate) const RECORD_COLUMNS: &str =
    "holder, owner, value, fencing, acquired_at, renewed_at, expires_at, request_id";

impl Statements {
    pub(crate) fn new(table: &TableName) -> Self {
        let t = &table.quoted;
        let key = "kind = 'lease' AND partition = $1 AND sort_key = $2";
        let cur = format!("cur AS (SELECT {RECORD_COLUMNS} FROM {t} WHERE {key})");
        let (fence_and_read, put_fenced) = fenced(t);
        Self {
            acquire: acquire_statement(
                table,
                &cur,
                "gate AS (SELECT '-infinity'::timestamptz AS grants_from)",
            ),
            acquire_checked: acquire_statement(table, &cur, &incarnation_gate(table)),
            renew: renew(t, &cur),
            release: release(table, &cur),
            delete: delete(table, &cur),
            inspect: format!(
                "/* lease_postgres inspect */ SELECT {RECORD_COLUMNS} FROM {t} WHERE {key}"
            ),
            list: format!(
                "/* lease_postgres list */ SELECT sort_key, {RECORD_COLUMNS} FROM {t}
WHERE kind = 'lease' AND partition = $1"
            ),
            fence_and_read,
            put_fenced,
        }
    }
}

/// The acquire statement, with `gate` deciding whether grants are open.
fn acquire_statement(table: &TableName, cur: &str, gate: &str) -> String {
    let (t, channel) = (&table.quoted, &table.channel);
    // Acquire, parameters: $1 partition, $2 sort key ('' for none), $3 holder token,
    // $4 owner, $5 value, $6 duration (µs), $7 the test clock's time or NULL, $8 skew
    // allowance (µs), $9 request id, and for the checked form $10 the recreation grace (µs).
    format!(
        "/* lease_postgres acquire */ WITH {now}, {cur}, {gate},
won AS (
  INSERT INTO {t} AS l (kind, partition, sort_key, holder, owner, value, fencing, duration_ms,
                acquired_at, renewed_at, expires_at, request_id)
  SELECT 'lease', $1, $2, $3, $4, $5,
         GREATEST(1, floor(extract(epoch FROM now.t) * 1000000)::int8),
         $6::int8 / 1000, now.t, now.t, now.t + $6::int8 * interval '1 microsecond', $9
  FROM now, gate WHERE gate.grants_from <= now.t
  ON CONFLICT (kind, partition, sort_key) DO UPDATE SET
    holder = excluded.holder, owner = excluded.owner, value = excluded.value,
    fencing = GREATEST(l.fencing + 1, excluded.fencing),
    duration_ms = excluded.duration_ms, acquired_at = excluded.acquired_at,
    renewed_at = excluded.renewed_at, expires_at = excluded.expires_at,
    request_id = excluded.request_id
  WHERE l.holder IS NULL
     OR l.expires_at + $8::int8 * interval '1 microsecond' <= excluded.acquired_at
  RETURNING l.fencing, l.expires_at
),
woke AS (SELECT pg_notify('{channel}', $1 || chr(31) || $2) FROM won)
SELECT (SELECT fencing FROM won) AS won_fencing, (SELECT expires_at FROM won) AS won_expires_at,
       (SELECT count(*) FROM woke) AS woke,
       (SELECT grants_from > now.t FROM gate) AS in_grace,
       (SELECT CASE WHEN isfinite(grants_from) THEN grants_from END FROM gate) AS grants_from,
       now.t AS now, cur.*
FROM now LEFT JOIN cur ON true",
        now = now_cte(7),
    )
}

/// The gate of the checked acquire: the incarnation compared with the `meta` row.
fn incarnation_gate(table: &TableName) -> String {
    let (t, regclass) = (&table.quoted, table.regclass_literal());
    // The incarnation of the table: the cluster (system identifier), its history (the
    // timeline: a promoted replica or a point-in-time recovery starts a new one) and the
    // table's storage (its oid: dropped and recreated; its file node: truncated), and while
    // commits are asynchronous (`synchronous_commit = off`, which acknowledges a commit a crash
    // can still lose) the postmaster's start time: every restart may have lost grants. A mismatch
    // with the meta row writes the new incarnation with `grants_from` = now + grace; a match
    // writes nothing and takes no lock.
    format!(
        "inc AS (
  SELECT concat_ws('/', (SELECT system_identifier FROM pg_control_system()),
                   substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8),
                   {regclass}::regclass::oid, pg_relation_filenode({regclass}::regclass),
                   CASE WHEN current_setting('synchronous_commit') = 'off'
                        THEN pg_postmaster_start_time()::text END) AS id
),
meta AS (SELECT incarnation, grants_from FROM {t}
         WHERE kind = 'meta' AND partition = '' AND sort_key = ''),
newmeta AS (
  INSERT INTO {t} AS m (kind, partition, sort_key, fencing, incarnation, grants_from)
  SELECT 'meta', '', '', 0, inc.id, now.t + $10::int8 * interval '1 microsecond' FROM inc, now
  WHERE NOT EXISTS (SELECT 1 FROM meta, inc WHERE meta.incarnation = inc.id)
  ON CONFLICT (kind, partition, sort_key) DO UPDATE SET
    incarnation = excluded.incarnation, grants_from = excluded.grants_from
  WHERE m.incarnation IS DISTINCT FROM excluded.incarnation
  RETURNING m.grants_from
),
gate AS (
  SELECT CASE
    WHEN EXISTS (SELECT 1 FROM newmeta) THEN (SELECT grants_from FROM newmeta)
    WHEN EXISTS (SELECT 1 FROM meta, inc WHERE meta.incarnation = inc.id)
      THEN (SELECT grants_from FROM meta)
    ELSE 'infinity'::timestamptz
  END AS grants_from
)"
    )
}

/// The renew statement.
fn renew(t: &str, cur: &str) -> String {
    // Renew: $1, $2 key, $3 token, $4 fencing, $5 duration (µs), $6 the test clock's time or
    // NULL, $7 request id.
    format!(
        "/* lease_postgres renew */ WITH {now}, {cur},
upd AS (
  UPDATE {t} AS l SET expires_at = now.t + $5::int8 * interval '1 microsecond',
    renewed_at = now.t, duration_ms = $5::int8 / 1000, request_id = $7
  FROM now
  WHERE l.kind = 'lease' AND l.partition = $1 AND l.sort_key = $2
    AND l.holder = $3 AND l.fencing = $4 AND l.expires_at > now.t
  RETURNING l.expires_at
)
SELECT (SELECT expires_at FROM upd) AS new_expires_at, now.t AS now, cur.*
FROM now LEFT JOIN cur ON true",
        now = now_cte(6),
    )
}

/// The release statement.
fn release(table: &TableName, cur: &str) -> String {
    let (t, channel) = (&table.quoted, &table.channel);
    // Release: $1, $2 key, $3 token, $4 fencing, $5 request id.
    format!(
        "/* lease_postgres release */ WITH {cur},
upd AS (
  UPDATE {t} AS l SET holder = NULL, owner = NULL, value = NULL, expires_at = NULL,
    request_id = $5
  WHERE l.kind = 'lease' AND l.partition = $1 AND l.sort_key = $2
    AND l.holder = $3 AND l.fencing = $4
  RETURNING 1
),
woke AS (SELECT pg_notify('{channel}', $1 || chr(31) || $2) FROM upd)
SELECT (SELECT count(*) FROM upd) AS done, (SELECT count(*) FROM woke) AS woke, cur.*
FROM (SELECT 1) AS one LEFT JOIN cur ON true"
    )
}

/// The delete statement.
fn delete(table: &TableName, cur: &str) -> String {
    let (t, channel) = (&table.quoted, &table.channel);
    // Delete: $1, $2 key, $3 token or NULL, $4 fencing or NULL.
    format!(
        "/* lease_postgres delete */ WITH {cur},
del AS (
  DELETE FROM {t} AS l
  WHERE l.kind = 'lease' AND l.partition = $1 AND l.sort_key = $2
    AND l.holder IS NOT DISTINCT FROM $3 AND l.fencing = $4
  RETURNING 1
),
woke AS (SELECT pg_notify('{channel}', $1 || chr(31) || $2) FROM del)
SELECT (SELECT count(*) FROM del) AS done, (SELECT count(*) FROM woke) AS woke, cur.*
FROM (SELECT 1) AS one LEFT JOIN cur ON true"
    )
}

/// The fenced-value statements: fence_and_read and put_fenced.
fn fenced(t: &str) -> (String, String) {
    // Fenced values: $1, $2 name, $3 fencing; put_fenced also $4 the value.
    let fence_and_read = format!(
        "/* lease_postgres fence_and_read */
INSERT INTO {t} AS v (kind, partition, sort_key, fencing) VALUES ('value', $1, $2, $3)
ON CONFLICT (kind, partition, sort_key) DO UPDATE SET fencing = excluded.fencing
WHERE v.fencing <= excluded.fencing
RETURNING v.data"
    );
    let put_fenced = format!(
        "/* lease_postgres put_fenced */
INSERT INTO {t} AS v (kind, partition, sort_key, fencing, data) VALUES ('value', $1, $2, $3, $4)
ON CONFLICT (kind, partition, sort_key) DO UPDATE SET fencing = excluded.fencing,
  data = excluded.data
WHERE v.fencing <= excluded.fencing
RETURNING 1"
    );
    (fence_and_read, put_fenced)
}
