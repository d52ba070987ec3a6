//! `lease watch`: the current holder of a lease, then one line per change, until interrupted.

use std::pin::Pin;
use std::time::Duration;

use futures_core::Stream;

use lease_core::backend::fmt_time;
use lease_core::{Election, FencingToken, Leader, LeaderChange, LeaseKey};
use serde_json::json;
use tokio::signal::unix::{SignalKind, signal};

use crate::backend::lease_key;
use crate::cli::WatchArgs;
use crate::duration::fmt_duration;
use crate::exit::Failure;
use crate::out::outln;

/// The lease duration an election needs to be made; watching never acquires, so any will do.
const UNUSED_DURATION: Duration = Duration::from_secs(30);

/// `lease watch`. Exit status 0 when interrupted (SIGINT, SIGTERM) or when standard output is
/// closed (found closed at once, not at the next change); an error reading the lease ends it
/// with that error's status. A store that gives no answer for `--timeout` is reported on stderr
/// (and its return too), while watching goes on.
pub(crate) async fn watch(args: WatchArgs) -> Result<u8, Failure> {
    let timeout = args.timeout;
    let opened = tokio::time::timeout(timeout, crate::stores::open_for_status(&args.backend, None))
        .await
        .map_err(|_| {
            Failure::unavailable(format!(
                "cannot open the store within {}",
                fmt_duration(timeout)
            ))
        })?;
    let (backend, _) = opened?;
    let file_store = args.backend.is_file_store();
    let key = lease_key(Some(&args.key), None, file_store)?;
    let election = Election::new(backend.leases.clone(), &key, UNUSED_DURATION)
        .with_poll_interval(args.poll_interval);
    let mut observer = election.observe();
    let signals = signal(SignalKind::interrupt()).and_then(|int| {
        let term = signal(SignalKind::terminate())?;
        Ok((int, term))
    });
    let (mut interrupt, mut terminate) = signals
        .map_err(|e| Failure::internal(format!("cannot listen for SIGINT and SIGTERM: {e}")))?;
    let reader_gone = crate::out::reader_gone();
    tokio::pin!(reader_gone);
    // The observer retries failed reads quietly; a silence as long as `--timeout` is checked
    // with one read of our own, which says whether the store answers.
    let mut unreachable = false;
    loop {
        let next = std::future::poll_fn(|cx| Pin::new(&mut observer).poll_next(cx));
        let change = tokio::select! {
            // The stream reports changes for as long as it is read: it never ends.
            change = next => change.ok_or_else(|| Failure::internal("the lease observer ended"))?,
            () = tokio::time::sleep(timeout) => {
                unreachable = report_reachability(&backend, &key, timeout, unreachable).await;
                continue;
            }
            () = &mut reader_gone => return Ok(0),
            _ = interrupt.recv() => return Ok(0),
            _ = terminate.recv() => return Ok(0),
        };
        let change =
            change.map_err(|e| crate::stores::failure(&format!("cannot read lease {key}"), &e))?;
        if unreachable {
            eprintln!("lease: the {} answers again", backend.description);
            unreachable = false;
        }
        if args.json {
            outln!("{}", change_json(&key, &change));
        } else {
            outln!("{}", change_text(&key, &change));
        }
        if crate::out::closed() {
            return Ok(0);
        }
    }
}

/// The longest a reachability read of `lease watch` waits for its answer.
const PROBE_LIMIT: Duration = Duration::from_secs(2);

/// After `timeout` without a change: one read of the lease, bounded by `timeout` and
/// [`PROBE_LIMIT`], says whether the store answers. Says so on stderr when that changes (`was_unreachable` is what was said
/// last); returns whether the store is unreachable now.
async fn report_reachability(
    backend: &crate::backend::Backend,
    key: &LeaseKey,
    timeout: Duration,
    was_unreachable: bool,
) -> bool {
    let limit = timeout.min(PROBE_LIMIT);
    let why = match tokio::time::timeout(limit, backend.leases.inspect(key)).await {
        Ok(Ok(_)) => None,
        // A record the store refuses is an answer: the observer reports it.
        Ok(Err(error)) if !error.is_transient() => None,
        Ok(Err(error)) => Some(crate::exit::report(&error)),
        Err(_) => Some(format!("no answer within {}", fmt_duration(limit))),
    };
    match (&why, was_unreachable) {
        (Some(why), false) => {
            tracing::warn!(key = %key, %why, "the store cannot be reached");
            eprintln!(
                "lease: cannot reach the {} to read lease {key}: {why}; still watching",
                backend.description
            );
        }
        (None, true) => eprintln!("lease: the {} answers again", backend.description),
        _ => {}
    }
    why.is_some()
}

fn change_text(key: &LeaseKey, change: &LeaderChange) -> String {
    match change {
        LeaderChange::Elected(leader) => {
            let holder = leader.holder();
            let mut text = format!(
                "{}: held by {}",
                crate::out::safe(&key.to_string()),
                crate::out::safe(holder.owner().unwrap_or("an unnamed owner"))
            );
            if let Some(value) = leader.value() {
                text.push_str(&format!(", value {value:?}"));
            }
            if let Some(since) = leader.since() {
                text.push_str(&format!(", since {}", fmt_time(since)));
            }
            if let Some(fencing) = leader.fencing_token() {
                text.push_str(&format!(", fencing token {fencing}"));
            }
            text
        }
        _ => format!("{}: free", crate::out::safe(&key.to_string())),
    }
}

fn change_json(key: &LeaseKey, change: &LeaderChange) -> serde_json::Value {
    let leader: Option<&Leader> = match change {
        LeaderChange::Elected(leader) => Some(leader),
        _ => None,
    };
    let holder = leader.map(Leader::holder);
    json!({
        "key": key.to_string(),
        "state": if leader.is_some() { "held" } else { "free" },
        "holder": holder.and_then(|h| h.owner()),
        "pid": holder.and_then(|h| h.pid()),
        "value": leader.and_then(Leader::value),
        "since": leader.and_then(Leader::since).map(fmt_time),
        "until": holder.and_then(|h| h.expires_at()).map(fmt_time),
        "fencing": leader.and_then(Leader::fencing_token).map(FencingToken::get),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vacancy_is_one_free_line() {
        let key = LeaseKey::new("primary").expect("key");
        assert_eq!(change_text(&key, &LeaderChange::Vacant), "primary: free");
        let json = change_json(&key, &LeaderChange::Vacant);
        assert_eq!(json["state"], "free");
        assert!(json["fencing"].is_null());
    }
}
