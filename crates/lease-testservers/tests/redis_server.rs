//! `RedisServer` against the real `redis-server`: started on loopback, restarted empty without
//! persistence and with its data from the append-only file, a replica that syncs, is detached
//! and promoted. Skipped, saying why, where `redis-server` is not installed, unless
//! `LEASE_REQUIRE_REDIS=1`.
#![allow(clippy::unwrap_used)]

use lease_testservers::{RedisOptions, RedisServer, Reply};

fn start(test: &str, options: RedisOptions) -> Option<RedisServer> {
    match RedisServer::start_with(options) {
        Ok(server) => Some(server),
        Err(e) if std::env::var("LEASE_REQUIRE_REDIS").is_ok_and(|v| v == "1") => {
            panic!("{test}: redis-server could not start: {e}")
        }
        Err(e) => {
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: {e}");
            None
        }
    }
}

#[test]
fn restarts_empty_without_persistence_and_full_with_it() {
    let Some(mut plain) = start("restarts_empty", RedisOptions::new()) else {
        return;
    };
    assert!(plain.url().starts_with("redis://127.0.0.1:"));
    plain.command(&["SET", "k", "v"]).unwrap();
    assert_eq!(
        plain.command(&["GET", "k"]).unwrap(),
        Reply::Text("v".into())
    );
    let pid = plain.pid().unwrap();
    plain.stop().unwrap();
    assert!(plain.command(&["PING"]).is_err(), "stopped");
    plain.start_again().unwrap();
    assert_ne!(plain.pid().unwrap(), pid, "a new process");
    assert_eq!(
        plain.command(&["EXISTS", "k"]).unwrap(),
        Reply::Int(0),
        "empty again"
    );

    let Some(mut durable) = start("restarts_full", RedisOptions::new().with_appendonly()) else {
        return;
    };
    durable.command(&["SET", "k", "v"]).unwrap();
    durable.stop().unwrap();
    durable.start_again().unwrap();
    assert_eq!(
        durable.command(&["GET", "k"]).unwrap(),
        Reply::Text("v".into())
    );
}

#[test]
fn a_replica_syncs_and_a_detached_one_is_promoted_without_later_writes() {
    let Some(primary) = start("replica", RedisOptions::new()) else {
        return;
    };
    primary.command(&["SET", "before", "1"]).unwrap();
    let replica = primary.replica().unwrap();
    assert_eq!(
        replica.command(&["GET", "before"]).unwrap(),
        Reply::Text("1".into())
    );
    replica.detach().unwrap();
    primary.command(&["SET", "after", "1"]).unwrap();
    replica.promote().unwrap();
    assert_eq!(
        replica.command(&["EXISTS", "after"]).unwrap(),
        Reply::Int(0),
        "missed it"
    );
    replica.command(&["SET", "writable", "1"]).unwrap();
    let run_ids = [
        primary.info("server").unwrap(),
        replica.info("server").unwrap(),
    ];
    assert_ne!(run_ids[0], run_ids[1]);
}
