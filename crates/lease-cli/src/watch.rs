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
use crate::exit::Failure;
use crate::out::outln;

/// The lease duration an election needs to be made; watching never acquires, so any will do.
const UNUSED_DURATION: Duration = Duration::from_secs(30);

/// `lease watch`. Exit status 0 when interrupted (SIGINT, SIGTERM) or when standard output is
/// closed; an error reading the lease ends it with that error's status.
pub(crate) async fn watch(args: WatchArgs) -> Result<u8, Failure> {
    let (backend, _) = crate::stores::open_for_status(&args.backend, None).await?;
    let file_store = args.backend.dynamo.is_none();
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
    loop {
        let next = std::future::poll_fn(|cx| Pin::new(&mut observer).poll_next(cx));
        let change = tokio::select! {
            // The stream reports changes for as long as it is read: it never ends.
            change = next => change.ok_or_else(|| Failure::internal("the lease observer ended"))?,
            _ = interrupt.recv() => return Ok(0),
            _ = terminate.recv() => return Ok(0),
        };
        let change =
            change.map_err(|e| crate::stores::failure(&format!("cannot read lease {key}"), &e))?;
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

fn change_text(key: &LeaseKey, change: &LeaderChange) -> String {
    match change {
        LeaderChange::Elected(leader) => {
            let holder = leader.holder();
            let mut text = format!(
                "{key}: held by {}",
                holder.owner().unwrap_or("an unnamed owner")
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
        _ => format!("{key}: free"),
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
