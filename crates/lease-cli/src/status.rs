//! `lease status`, `lease release --force` and `lease table create`: an operator's view.

use std::time::SystemTime;

use lease_core::{CountingLease, FencingToken, Holder, LeaseError, LeaseKey, LeaseRecord};
use serde_json::{Value, json};

use crate::backend::{Backend, lease_key};
use crate::cli::{ReleaseArgs, StatusArgs, TableCreateArgs};
use crate::duration::fmt_duration;
use crate::exit::{self, Failure};
use crate::out::{outln, safe};
use crate::run::describe_holder;
use lease_core::backend::fmt_time;

/// What a lease looks like right now, as `status` reports it (`state` in `--json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// A holder whose lease has not expired, or whose record carries no expiry at all (held
    /// until released: never shown free).
    Held,
    /// A Go `kit/lockfile` `PIDLock` holds the path (a lock file, not this protocol's lock
    /// directory): held until the Go process removes it, never taken over by `lease`.
    HeldByGo,
    /// The last holder's lease has expired: free to take.
    Expired,
    /// Nobody holds it.
    Free,
    /// The record is malformed: every acquisition refuses it until an operator repairs it.
    Corrupt,
    /// The record belongs to another lock protocol (an older format, an unknown file).
    Foreign,
}

impl State {
    fn of(record: Option<&LeaseRecord>, now: SystemTime) -> Self {
        match record.and_then(LeaseRecord::holder) {
            None => Self::Free,
            Some(holder) if is_go(holder) => Self::HeldByGo,
            // No expiry known: held until released, never guessed free.
            Some(holder) if holder.expires_at().is_none() => Self::Held,
            Some(_) if record.is_some_and(|r| r.is_held_at(now)) => Self::Held,
            Some(_) => Self::Expired,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Held => "held",
            Self::HeldByGo => "held-by-go",
            Self::Expired => "expired",
            Self::Free => "free",
            Self::Corrupt => "corrupt",
            Self::Foreign => "foreign",
        }
    }
}

/// The Go `kit/lockfile` package's default `LeaseStaleThreshold`: a Go contender takes over a
/// lock file whose heartbeat is older (shown, never acted on: `lease` never takes it over).
const GO_STALE_THRESHOLD: std::time::Duration = std::time::Duration::from_secs(3);

/// A Go `kit/lockfile` holder as lease-file reports it: a holder of another protocol (no token
/// of ours, no expiry) that lease-file names as a Go lock file, live or being written.
fn is_go(holder: &Holder) -> bool {
    holder.token().is_none()
        && holder.expires_at().is_none()
        && holder
            .owner()
            .is_some_and(|owner| owner.contains("Go kit/lockfile"))
}

/// What reading one lease found: its record (or none), or a record the store refuses.
#[derive(Debug)]
enum Seen {
    Record(Option<LeaseRecord>),
    /// Corrupt or foreign, with the store's reason.
    Refused {
        state: State,
        reason: String,
    },
}

impl Seen {
    /// `result` of an inspect: refusals of the record become [`Seen::Refused`], other errors
    /// stay errors.
    fn of(result: Result<Option<LeaseRecord>, LeaseError>) -> Result<Self, LeaseError> {
        match result {
            Ok(record) => Ok(Self::Record(record)),
            Err(LeaseError::Corrupt { reason, .. }) => Ok(Self::Refused {
                state: State::Corrupt,
                reason,
            }),
            Err(LeaseError::Foreign { reason, .. }) => Ok(Self::Refused {
                state: State::Foreign,
                reason,
            }),
            Err(error) => Err(error),
        }
    }

    fn state(&self, now: SystemTime) -> State {
        match self {
            Self::Record(record) => State::of(record.as_ref(), now),
            Self::Refused { state, .. } => *state,
        }
    }

    fn is_refused(&self) -> bool {
        matches!(self, Self::Refused { .. })
    }
}

/// `lease status`. Exit status 0, or [`exit::CORRUPT`] when a record shown is corrupt or
/// another protocol's.
pub(crate) async fn status(args: StatusArgs) -> Result<u8, Failure> {
    let (backend, strict) =
        crate::stores::open_for_status(&args.backend, args.path.as_deref()).await?;
    let now = SystemTime::now();
    if let (Some(holders), Some(text)) = (args.holders, args.key.as_deref()) {
        let key = lease_key(Some(text), None, args.backend.is_file_store())?;
        return slots_status(&backend, strict.as_ref(), &key, holders, args.json).await;
    }
    if args.key.is_some() || args.path.is_some() {
        let file_store = args.backend.is_file_store();
        let key = lease_key(args.key.as_deref(), args.path.as_deref(), file_store)?;
        let result = match &strict {
            Some(strict) => strict.inspect(&key).await,
            None => backend.leases.inspect(&key).await,
        };
        let seen = Seen::of(result)
            .map_err(|e| crate::stores::failure(&format!("cannot read lease {key}"), &e))?;
        if args.json {
            outln!("{}", seen_json(&key, &seen, now));
        } else {
            crate::out::text(&seen_text(&key, &seen, now));
        }
        return Ok(if seen.is_refused() { exit::CORRUPT } else { 0 });
    }
    let all = list(&backend, strict.as_ref(), args.partition.as_deref()).await?;
    if args.json {
        let values: Vec<Value> = all
            .iter()
            .map(|(k, seen)| seen_json(k, seen, now))
            .collect();
        outln!("{}", Value::Array(values));
    } else if all.is_empty() {
        outln!("no leases in the {}", backend.description);
    } else {
        crate::out::text(&table_text(&all, now));
    }
    Ok(if all.iter().any(|(_, seen)| seen.is_refused()) {
        exit::CORRUPT
    } else {
        0
    })
}

/// `lease status --key KEY --holders N`: every slot of KEY below N, and the slots at or above
/// N that the partition listing finds (held by holders of a larger N), in slot order.
async fn slots_status(
    backend: &Backend,
    strict: Option<&crate::stores::StrictInspect>,
    name: &LeaseKey,
    holders: u32,
    json: bool,
) -> Result<u8, Failure> {
    let counting = CountingLease::new(name.clone(), holders)
        .map_err(|e| Failure::usage(format!("bad --holders: {e}")))?;
    let mut keys: Vec<LeaseKey> = (0..holders)
        .filter_map(|slot| counting.slot_key(slot).cloned())
        .collect();
    if let Some(listing) = backend.leases.as_listing() {
        let records = listing
            .list_partition(name.partition())
            .await
            .map_err(|e| crate::stores::failure(&format!("cannot list the slots of {name}"), &e))?;
        keys.extend(
            records
                .iter()
                .map(LeaseRecord::key)
                .filter(|key| counting.slot_of(key).is_some_and(|slot| slot >= holders))
                .cloned(),
        );
    }
    let now = SystemTime::now();
    let mut slots = Vec::with_capacity(keys.len());
    for key in keys {
        let result = match strict {
            Some(strict) => strict.inspect(&key).await,
            None => backend.leases.inspect(&key).await,
        };
        let seen = Seen::of(result)
            .map_err(|e| crate::stores::failure(&format!("cannot read lease {key}"), &e))?;
        slots.push((counting.slot_of(&key).unwrap_or(0), key, seen));
    }
    let held = slots
        .iter()
        .filter(|(_, _, seen)| matches!(seen.state(now), State::Held | State::HeldByGo))
        .count();
    if json {
        let values: Vec<Value> = slots
            .iter()
            .map(|(slot, key, seen)| {
                let mut value = seen_json(key, seen, now);
                value["slot"] = json!(slot);
                value
            })
            .collect();
        outln!("{}", Value::Array(values));
    } else {
        let mut text = format!("{name}: {held} of {holders} slots held\n");
        for (slot, key, seen) in &slots {
            text.push_str(&format!("slot {slot}  {}", seen_text(key, seen, now)));
        }
        crate::out::text(&text);
    }
    Ok(if slots.iter().any(|(_, _, seen)| seen.is_refused()) {
        exit::CORRUPT
    } else {
        0
    })
}

/// Every lease of the store, or of one partition. With a strict reader (DynamoDB), each listed
/// lease is read again strictly (one `GetItem` each, after the `Query`), so that a malformed
/// item is listed corrupt rather than as the record it decodes to.
async fn list(
    backend: &Backend,
    strict: Option<&crate::stores::StrictInspect>,
    partition: Option<&str>,
) -> Result<Vec<(LeaseKey, Seen)>, Failure> {
    match (partition, backend.leases.as_listing(), &backend.all_keys) {
        (Some(partition), Some(listing), _) => {
            let records = listing.list_partition(partition).await.map_err(|e| {
                crate::stores::failure(&format!("cannot list partition {partition}"), &e)
            })?;
            let mut all = Vec::with_capacity(records.len());
            for record in records {
                let key = record.key().clone();
                let seen = match strict {
                    Some(strict) => Seen::of(strict.inspect(&key).await).map_err(|e| {
                        crate::stores::failure(&format!("cannot read lease {key}"), &e)
                    })?,
                    None => Seen::Record(Some(record)),
                };
                all.push((key, seen));
            }
            Ok(all)
        }
        (Some(_), None, _) => Err(Failure::usage(format!(
            "the {} cannot list a partition",
            backend.description
        ))),
        (None, _, Some(all_keys)) => {
            let keys = all_keys().map_err(|e| {
                Failure::unavailable(format!("cannot list the {}: {e}", backend.description))
            })?;
            let mut all = Vec::with_capacity(keys.len());
            for key in keys {
                // A corrupt lease is listed as such; it does not hide the others.
                let seen = Seen::of(backend.leases.inspect(&key).await)
                    .map_err(|e| crate::stores::failure(&format!("cannot read lease {key}"), &e))?;
                if !matches!(seen, Seen::Record(None)) {
                    all.push((key, seen));
                }
            }
            Ok(all)
        }
        (None, _, None) => Err(Failure::usage(format!(
            "the {} cannot enumerate every lease; pass --partition PARTITION to list one partition",
            backend.description
        ))),
    }
}

fn seen_json(key: &LeaseKey, seen: &Seen, now: SystemTime) -> Value {
    let state = seen.state(now);
    let (record, reason) = match seen {
        Seen::Record(record) => (record.as_ref(), None),
        Seen::Refused { reason, .. } => (None, Some(reason.as_str())),
    };
    let holder = record.and_then(LeaseRecord::holder);
    let remaining_ms = holder
        .and_then(|h| h.expires_at())
        .and_then(|until| until.duration_since(now).ok())
        .filter(|_| state == State::Held)
        .map(|left| u64::try_from(left.as_millis()).unwrap_or(u64::MAX));
    // Another protocol's lock has no fencing token of ours; a record without a counter (an
    // item of the Go package) has none at all.
    let fencing = record
        .filter(|_| state != State::HeldByGo)
        .and_then(LeaseRecord::fencing_token)
        .map(FencingToken::get);
    json!({
        "key": key.to_string(),
        "partition": key.partition(),
        "sort": key.sort(),
        "state": state.name(),
        "reason": reason,
        "holder": holder.and_then(|h| h.owner()),
        "pid": holder.and_then(Holder::pid),
        "value": holder.and_then(Holder::value),
        "since": holder.and_then(|h| h.acquired_at()).map(fmt_time),
        "until": holder.and_then(|h| h.expires_at()).map(fmt_time),
        "heartbeat": holder.and_then(|h| h.renewed_at()).map(fmt_time),
        "remaining_ms": remaining_ms,
        "fencing": fencing,
        "token": holder.and_then(|h| h.token()).map(|t| t.redacted()),
    })
}

fn seen_text(key: &LeaseKey, seen: &Seen, now: SystemTime) -> String {
    match seen {
        Seen::Record(record) => record_text(key, record.as_ref(), now),
        Seen::Refused { state, reason } => format!(
            "{}: {}: {}\n",
            safe(&key.to_string()),
            if *state == State::Foreign {
                "another protocol's record"
            } else {
                "corrupt"
            },
            safe(reason)
        ),
    }
}

fn record_text(key: &LeaseKey, record: Option<&LeaseRecord>, now: SystemTime) -> String {
    // Another user's key name, shown for people.
    let key = safe(&key.to_string()).into_owned();
    let Some(record) = record else {
        return format!("{key}: free (never held)\n");
    };
    // A record without a counter (an item of the Go package) has no token to show.
    let fencing = record
        .fencing_token()
        .map_or_else(|| "none".to_owned(), |token| token.to_string());
    match (State::of(Some(record), now), record.holder()) {
        (State::HeldByGo, Some(holder)) => {
            let mut text = format!(
                "{key}: held by Go: {}\n",
                safe(holder.owner().unwrap_or("a Go kit/lockfile PIDLock"))
            );
            if let Some(pid) = holder.pid() {
                text.push_str(&format!("  pid      {pid}\n"));
            }
            if let Some(beat) = holder.renewed_at() {
                let ago = now.duration_since(beat).unwrap_or_default();
                text.push_str(&format!(
                    "  heartbeat {} ({} ago)\n",
                    fmt_time(beat),
                    fmt_duration(ago)
                ));
                if ago > GO_STALE_THRESHOLD {
                    text.push_str(&format!(
                        "  stale: no heartbeat for longer than Go's default {}: a Go contender may \
                         take it over, lease never does; remove the file by hand once its \
                         process is gone\n",
                        fmt_duration(GO_STALE_THRESHOLD)
                    ));
                }
            }
            text
        }
        (State::Held, Some(holder)) => {
            let mut text = format!(
                "{key}: held by {}\n",
                safe(holder.owner().unwrap_or("an unnamed owner"))
            );
            if let Some(value) = holder.value() {
                text.push_str(&format!("  value    {value:?}\n"));
            }
            if let Some(since) = holder.acquired_at() {
                text.push_str(&format!("  since    {}\n", fmt_time(since)));
            }
            match holder.expires_at() {
                Some(until) => {
                    let left = until.duration_since(now).unwrap_or_default();
                    text.push_str(&format!(
                        "  until    {} (in {})\n",
                        fmt_time(until),
                        fmt_duration(left)
                    ));
                }
                None => text.push_str("  until    released (the record has no expiry)\n"),
            }
            text.push_str(&format!("  fencing  {fencing}\n"));
            text
        }
        (State::Expired, Some(holder)) => format!(
            "{key}: free: the lease of {} expired (fencing token {fencing})\n",
            describe_holder(holder)
        ),
        _ => format!("{key}: free (last fencing token {fencing})\n"),
    }
}

fn table_text(all: &[(LeaseKey, Seen)], now: SystemTime) -> String {
    let rows: Vec<[String; 5]> = all
        .iter()
        .map(|(key, seen)| {
            let record = match seen {
                Seen::Record(record) => record.as_ref(),
                Seen::Refused { .. } => None,
            };
            let holder = record.and_then(LeaseRecord::holder);
            [
                safe(&key.to_string()).into_owned(),
                seen.state(now).name().to_owned(),
                safe(
                    holder
                        .and_then(|h| h.owner())
                        .unwrap_or(if holder.is_some() { "?" } else { "-" }),
                )
                .into_owned(),
                holder
                    .and_then(|h| h.expires_at())
                    .map_or_else(|| "-".to_owned(), fmt_time),
                record
                    .and_then(LeaseRecord::fencing_token)
                    .map_or_else(|| "-".to_owned(), |token| token.to_string()),
            ]
        })
        .collect();
    let header = ["KEY", "STATE", "HOLDER", "UNTIL", "FENCING"].map(str::to_owned);
    let mut widths = header.each_ref().map(String::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut text = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        text.push_str(line.join("  ").trim_end());
        text.push('\n');
    }
    for (key, seen) in all {
        if let Seen::Refused { reason, .. } = seen {
            text.push_str(&format!("{}: {}\n", safe(&key.to_string()), safe(reason)));
        }
    }
    text
}

/// `lease release --force --yes-i-know`: inspect, then release the holder's token.
pub(crate) async fn release(args: ReleaseArgs) -> Result<u8, Failure> {
    let file_store = args.backend.is_file_store();
    let key = lease_key(args.key.as_deref(), args.path.as_deref(), file_store)?;
    if !args.force {
        return Err(Failure::usage(format!(
            "a lease is released by its holder; to break lease {key} as an operator, \
             pass --force --yes-i-know"
        )));
    }
    if !args.yes_i_know {
        return Err(Failure::usage(format!(
            "refusing to break lease {key} without --yes-i-know: its holder may still be \
             working, and loses the lease at its next renewal"
        )));
    }
    let backend = crate::stores::open_for(
        &args.backend,
        args.path.as_deref(),
        std::time::Duration::ZERO,
    )
    .await?;
    let record = backend
        .leases
        .inspect(&key)
        .await
        .map_err(|e| crate::stores::failure(&format!("cannot read lease {key}"), &e))?;
    let Some(holder) = record.as_ref().and_then(LeaseRecord::holder) else {
        outln!("{key}: free; nothing to release");
        return Ok(0);
    };
    if is_go(holder) {
        return Err(Failure::new(
            exit::HELD,
            format!(
                "lease {key} is held by {}; lease never breaks another protocol's lock: stop \
                 that process, or remove the file by hand once it is gone",
                describe_holder(holder)
            ),
        ));
    }
    let Some(token) = holder.token() else {
        return Err(Failure::unavailable(format!(
            "the {} does not reveal the holder's token of lease {key}; cannot break it",
            backend.description
        )));
    };
    // Name the holder's tenure exactly: a lease taken over since the inspect is left alone. A
    // tenure without a fencing counter (an item of the Go package) has no fencing token for
    // `release` to name: the compare-and-delete names it as it stands (holder token, no
    // counter), and deleting such a record loses no counter.
    let fencing = holder
        .fencing_token()
        .or_else(|| record.as_ref().and_then(LeaseRecord::fencing_token));
    let broken = match fencing {
        Some(fencing) => backend.leases.release(&key, token, fencing).await,
        None => backend.leases.delete(&key, Some(token), None).await,
    };
    broken.map_err(|e| crate::stores::failure(&format!("cannot break lease {key}"), &e))?;
    tracing::warn!(%key, holder = %describe_holder(holder), "lease broken by an operator");
    outln!(
        "{key}: released the lease of {}; its holder loses it at its next renewal",
        describe_holder(holder)
    );
    Ok(0)
}

/// `lease table create`: the DynamoDB table of `--dynamo`, or the PostgreSQL table of
/// `--postgres` (clap requires one of them; `main` refuses both).
pub(crate) async fn table_create(args: TableCreateArgs) -> Result<u8, Failure> {
    let table = match (&args.dynamo, &args.postgres) {
        (Some(table), _) => {
            crate::stores::create_table(
                table,
                args.endpoint.as_deref(),
                args.region.as_deref(),
                &args.table,
                args.timeout,
            )
            .await?;
            table.clone()
        }
        (None, Some(url)) => {
            let table = args
                .pg_table
                .clone()
                .unwrap_or_else(|| crate::cli::DEFAULT_PG_TABLE.to_owned());
            crate::stores::create_pg_table(url, &table).await?;
            table
        }
        (None, None) => return Err(Failure::usage("pass --dynamo TABLE or --postgres URL")),
    };
    outln!("table {table} is ready");
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lease_core::LeaseToken;
    use std::time::Duration;

    fn record(key: &str, expires_in: Option<i64>, now: SystemTime) -> LeaseRecord {
        let holder = expires_in.map(|secs| {
            let until = if secs >= 0 {
                now + Duration::from_secs(secs.unsigned_abs())
            } else {
                now - Duration::from_secs(secs.unsigned_abs())
            };
            Holder::new()
                .with_owner("pid 7 on host h")
                .with_token(LeaseToken::new("0123456789abcdef0123").expect("token"))
                .with_acquired_at(now - Duration::from_secs(60))
                .with_expires_at(until)
                .with_fencing(lease_core::backend::fencing_token(9))
        });
        lease_core::backend::new_record(
            LeaseKey::new(key).expect("key"),
            holder,
            lease_core::backend::fencing_token(9),
        )
    }

    fn json_of(record: &LeaseRecord, now: SystemTime) -> Value {
        seen_json(record.key(), &Seen::Record(Some(record.clone())), now)
    }

    #[test]
    fn json_names_the_state_and_never_the_whole_token() {
        let now = SystemTime::now();
        let held = record("a", Some(30), now);
        let value = json_of(&held, now);
        assert_eq!(value["state"], "held");
        assert_eq!(value["holder"], "pid 7 on host h");
        assert_eq!(value["fencing"], 9);
        assert_eq!(value["remaining_ms"], 30_000);
        assert!(
            !value.to_string().contains("0123456789abcdef0123"),
            "{value}"
        );
        let expired = record("b", Some(-1), now);
        assert_eq!(json_of(&expired, now)["state"], "expired");
        let free = record("c", None, now);
        assert_eq!(json_of(&free, now)["state"], "free");
        let never = LeaseKey::new("d").expect("key");
        assert_eq!(
            seen_json(&never, &Seen::Record(None), now)["fencing"],
            Value::Null
        );
    }

    #[test]
    fn text_says_who_since_until_and_fencing() {
        let now = SystemTime::now();
        let held = record("a", Some(30), now);
        let text = record_text(held.key(), Some(&held), now);
        assert!(text.starts_with("a: held by pid 7 on host h\n"), "{text}");
        assert!(text.contains("since") && text.contains("until") && text.contains("fencing  9"));
        let rows = [held, record("b", None, now)].map(|r| (r.key().clone(), Seen::Record(Some(r))));
        let table = table_text(&rows, now);
        assert_eq!(table.lines().count(), 3, "{table}");
        assert!(
            table.lines().nth(2).is_some_and(|l| l.starts_with("b ")),
            "{table}"
        );
    }

    #[test]
    fn a_holder_without_an_expiry_is_never_free_or_expired() {
        let now = SystemTime::now();
        let key = LeaseKey::new("k").expect("key");
        let foreign = Holder::new().with_token(LeaseToken::new("0123456789abcdef0123").expect("t"));
        // A holder written without a fencing counter.
        let record = lease_core::backend::new_record(
            key,
            Some(foreign),
            lease_core::backend::fencing_token(0), // the raw "no counter" a store reads
        );
        assert_eq!(json_of(&record, now)["state"], "held");
        let text = record_text(record.key(), Some(&record), now);
        assert!(text.starts_with("k: held by"), "{text}");
    }

    #[test]
    fn refused_records_are_corrupt_or_foreign_with_the_reason() {
        let now = SystemTime::now();
        let key = LeaseKey::new("k").expect("key");
        let seen = Seen::of(Err(LeaseError::corrupt(key.clone(), "two state entries")))
            .expect("a refusal is shown");
        assert!(seen.is_refused());
        let value = seen_json(&key, &seen, now);
        assert_eq!(value["state"], "corrupt");
        assert_eq!(value["reason"], "two state entries");
        assert_eq!(value["fencing"], Value::Null);
        assert_eq!(
            seen_text(&key, &seen, now),
            "k: corrupt: two state entries\n"
        );
        let table = table_text(&[(key.clone(), seen)], now);
        assert!(
            table.contains("corrupt") && table.contains("k: two state entries"),
            "{table}"
        );
        let transient = LeaseError::backend("file", true, std::io::Error::other("EIO"));
        assert!(
            Seen::of(Err(transient)).is_err(),
            "a failure to read is not a state"
        );
    }
}
