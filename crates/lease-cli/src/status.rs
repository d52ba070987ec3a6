//! `lease status`, `lease release --force` and `lease table create`: an operator's view.

use std::time::SystemTime;

use lease_core::{LeaseKey, LeaseRecord};
use serde_json::{Value, json};

use crate::backend::{Backend, parse_key};
use crate::cli::{ReleaseArgs, StatusArgs, TableCreateArgs};
use crate::duration::fmt_duration;
use crate::exit::Failure;
use crate::run::describe_holder;
use lease_core::backend::fmt_time;

/// What a record means right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Held,
    Expired,
    Free,
}

impl State {
    fn of(record: Option<&LeaseRecord>, now: SystemTime) -> Self {
        match record.and_then(LeaseRecord::holder) {
            None => Self::Free,
            Some(_) if record.is_some_and(|r| r.is_held_at(now)) => Self::Held,
            Some(_) => Self::Expired,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Held => "held",
            Self::Expired => "expired",
            Self::Free => "free",
        }
    }
}

/// `lease status`.
pub(crate) async fn status(args: StatusArgs) -> Result<u8, Failure> {
    let backend = crate::stores::open(&args.backend).await?;
    let now = SystemTime::now();
    if let Some(key) = &args.key {
        let key = parse_key(key)?;
        let record = backend
            .leases
            .inspect(&key)
            .await
            .map_err(|e| crate::stores::failure(&format!("cannot read lease {key}"), &e))?;
        if args.json {
            println!("{}", record_json(&key, record.as_ref(), now));
        } else {
            print!("{}", record_text(&key, record.as_ref(), now));
        }
        return Ok(0);
    }
    let records = list(&backend, args.partition.as_deref()).await?;
    if args.json {
        let all: Vec<Value> = records
            .iter()
            .map(|r| record_json(r.key(), Some(r), now))
            .collect();
        println!("{}", Value::Array(all));
    } else if records.is_empty() {
        println!("no leases in the {}", backend.description);
    } else {
        print!("{}", table_text(&records, now));
    }
    Ok(0)
}

async fn list(backend: &Backend, partition: Option<&str>) -> Result<Vec<LeaseRecord>, Failure> {
    match (partition, backend.leases.as_listing(), &backend.all_keys) {
        (Some(partition), Some(listing), _) => listing
            .list_partition(partition)
            .await
            .map_err(|e| crate::stores::failure(&format!("cannot list partition {partition}"), &e)),
        (Some(_), None, _) => Err(Failure::usage(format!(
            "the {} cannot list a partition",
            backend.description
        ))),
        (None, _, Some(all_keys)) => {
            let keys = all_keys().map_err(|e| {
                Failure::unavailable(format!("cannot list the {}: {e}", backend.description))
            })?;
            let mut records = Vec::with_capacity(keys.len());
            for key in keys {
                let record =
                    backend.leases.inspect(&key).await.map_err(|e| {
                        crate::stores::failure(&format!("cannot read lease {key}"), &e)
                    })?;
                records.extend(record);
            }
            Ok(records)
        }
        (None, _, None) => Err(Failure::usage(format!(
            "the {} cannot enumerate every lease; pass --partition PARTITION to list one partition",
            backend.description
        ))),
    }
}

fn record_json(key: &LeaseKey, record: Option<&LeaseRecord>, now: SystemTime) -> Value {
    let state = State::of(record, now);
    let holder = record.and_then(LeaseRecord::holder);
    let remaining_ms = holder
        .and_then(|h| h.expires_at())
        .and_then(|until| until.duration_since(now).ok())
        .filter(|_| state == State::Held)
        .map(|left| u64::try_from(left.as_millis()).unwrap_or(u64::MAX));
    json!({
        "key": key.to_string(),
        "partition": key.partition(),
        "sort": key.sort(),
        "state": state.name(),
        "holder": holder.and_then(|h| h.owner()),
        "since": holder.and_then(|h| h.acquired_at()).map(fmt_time),
        "until": holder.and_then(|h| h.expires_at()).map(fmt_time),
        "remaining_ms": remaining_ms,
        "fencing": record.map(|r| r.fencing().get()),
        "token": holder.and_then(|h| h.token()).map(|t| t.redacted()),
    })
}

fn record_text(key: &LeaseKey, record: Option<&LeaseRecord>, now: SystemTime) -> String {
    let Some(record) = record else {
        return format!("{key}: free (never held)\n");
    };
    let fencing = record.fencing();
    match (State::of(Some(record), now), record.holder()) {
        (State::Held, Some(holder)) => {
            let mut text = format!(
                "{key}: held by {}\n",
                holder.owner().unwrap_or("an unnamed owner")
            );
            if let Some(since) = holder.acquired_at() {
                text.push_str(&format!("  since    {}\n", fmt_time(since)));
            }
            if let Some(until) = holder.expires_at() {
                let left = until.duration_since(now).unwrap_or_default();
                text.push_str(&format!(
                    "  until    {} (in {})\n",
                    fmt_time(until),
                    fmt_duration(left)
                ));
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

fn table_text(records: &[LeaseRecord], now: SystemTime) -> String {
    let rows: Vec<[String; 5]> = records
        .iter()
        .map(|record| {
            let holder = record.holder();
            [
                record.key().to_string(),
                State::of(Some(record), now).name().to_owned(),
                holder
                    .and_then(|h| h.owner())
                    .unwrap_or(if holder.is_some() { "?" } else { "-" })
                    .to_owned(),
                holder
                    .and_then(|h| h.expires_at())
                    .map_or_else(|| "-".to_owned(), fmt_time),
                record.fencing().to_string(),
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
    text
}

/// `lease release --force --yes-i-know`: inspect, then release the holder's token.
pub(crate) async fn release(args: ReleaseArgs) -> Result<u8, Failure> {
    let key = parse_key(&args.key)?;
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
    let backend = crate::stores::open(&args.backend).await?;
    let record = backend
        .leases
        .inspect(&key)
        .await
        .map_err(|e| crate::stores::failure(&format!("cannot read lease {key}"), &e))?;
    let Some(holder) = record.as_ref().and_then(LeaseRecord::holder) else {
        println!("{key}: free; nothing to release");
        return Ok(0);
    };
    let Some(token) = holder.token() else {
        return Err(Failure::unavailable(format!(
            "the {} does not reveal the holder's token of lease {key}; cannot break it",
            backend.description
        )));
    };
    // Name the holder's tenure exactly: a lease taken over since the inspect is left alone.
    let fencing = holder
        .fencing()
        .or_else(|| record.as_ref().map(LeaseRecord::fencing))
        .unwrap_or(lease_core::FencingToken::NONE);
    backend
        .leases
        .release(&key, token, fencing)
        .await
        .map_err(|e| crate::stores::failure(&format!("cannot break lease {key}"), &e))?;
    tracing::warn!(%key, holder = %describe_holder(holder), "lease broken by an operator");
    println!(
        "{key}: released the lease of {}; its holder loses it at its next renewal",
        describe_holder(holder)
    );
    Ok(0)
}

/// `lease table create`.
pub(crate) async fn table_create(args: TableCreateArgs) -> Result<u8, Failure> {
    crate::stores::create_table(
        &args.dynamo,
        args.endpoint.as_deref(),
        args.region.as_deref(),
        &args.table,
    )
    .await?;
    println!("table {} is ready", args.dynamo);
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lease_core::{Holder, LeaseToken};
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

    #[test]
    fn json_names_the_state_and_never_the_whole_token() {
        let now = SystemTime::now();
        let held = record("a", Some(30), now);
        let value = record_json(held.key(), Some(&held), now);
        assert_eq!(value["state"], "held");
        assert_eq!(value["holder"], "pid 7 on host h");
        assert_eq!(value["fencing"], 9);
        assert_eq!(value["remaining_ms"], 30_000);
        assert!(
            !value.to_string().contains("0123456789abcdef0123"),
            "{value}"
        );
        let expired = record("b", Some(-1), now);
        assert_eq!(
            record_json(expired.key(), Some(&expired), now)["state"],
            "expired"
        );
        let free = record("c", None, now);
        assert_eq!(record_json(free.key(), Some(&free), now)["state"], "free");
        let never = LeaseKey::new("d").expect("key");
        assert_eq!(record_json(&never, None, now)["fencing"], Value::Null);
    }

    #[test]
    fn text_says_who_since_until_and_fencing() {
        let now = SystemTime::now();
        let held = record("a", Some(30), now);
        let text = record_text(held.key(), Some(&held), now);
        assert!(text.starts_with("a: held by pid 7 on host h\n"), "{text}");
        assert!(text.contains("since") && text.contains("until") && text.contains("fencing  9"));
        let table = table_text(&[held, record("b", None, now)], now);
        assert_eq!(table.lines().count(), 3, "{table}");
        assert!(
            table.lines().nth(2).is_some_and(|l| l.starts_with("b ")),
            "{table}"
        );
    }
}
