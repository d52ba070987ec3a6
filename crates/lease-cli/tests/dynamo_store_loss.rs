//! A DynamoDB table deleted and recreated under a running `lease run` (an operator's mistake, a
//! restore, DynamoDB Local restarted: every holder is forgotten at once) never lets a second
//! `lease run` start its command while the first still runs: the recreation grace (default: the
//! lease's own --ttl) holds the new table's keys until every holder of the old one has learned
//! of the loss at a renewal. Needs `LEASE_DYNAMO_ENDPOINT`; skipped visibly without it.
//!
//! Rounds: 2 by default, 20 with `LEASE_LONG=1` (each takes about one --ttl plus a table
//! recreation).

mod support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const TTL: &str = "1500ms";

fn lease(dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lease"));
    command
        .env("LEASE_DIR", dir)
        .env_remove("LEASE_LOG")
        .env(
            "AWS_ACCESS_KEY_ID",
            std::env::var("AWS_ACCESS_KEY_ID").unwrap_or_else(|_| "local".into()),
        )
        .env(
            "AWS_SECRET_ACCESS_KEY",
            std::env::var("AWS_SECRET_ACCESS_KEY").unwrap_or_else(|_| "local".into()),
        )
        .stdin(Stdio::null());
    command
}

fn unix_nanos(at: SystemTime) -> u128 {
    at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos())
}

/// A `lease run` whose command appends `start NAME <ns>` to `log`, then sleeps.
fn holder(
    dir: &Path,
    table: &str,
    endpoint: &str,
    name: &str,
    log: &Path,
    grace: &[&str],
) -> Child {
    let script = format!(
        "echo \"fence {name} $LEASE_FENCING_TOKEN\" >> {log}; \
         echo \"start {name} $(date +%s%N)\" >> {log}; exec sleep 30",
        log = log.display()
    );
    lease(dir)
        .args([
            "run",
            "--dynamo",
            table,
            "--endpoint",
            endpoint,
            "--key",
            "k",
            "--ttl",
            TTL,
            "--wait",
            "20s",
        ])
        .args(grace)
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("lease starts")
}

/// When `name`'s command started, from the log (`None` if it has not).
fn started(log: &Path, name: &str) -> Option<u128> {
    let text = std::fs::read_to_string(log).ok()?;
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(&format!("start {name} "))?;
        rest.trim().parse().ok()
    })
}

/// Every fencing token the log's commands were given, in the order they started.
fn fences(log: &Path) -> Vec<(String, u64)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let mut words = line.strip_prefix("fence ")?.split_whitespace();
            let name = words.next()?.to_owned();
            Some((name, words.next()?.parse().ok()?))
        })
        .collect()
}

fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let until = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < until, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

async fn recreate(client: &aws_sdk_dynamodb::Client, table: &str, dir: &Path, endpoint: &str) {
    client
        .delete_table()
        .table_name(table)
        .send()
        .await
        .expect("delete table");
    create(table, dir, endpoint);
}

fn create(table: &str, dir: &Path, endpoint: &str) {
    let out = lease(dir)
        .args(["table", "create", "--dynamo", table, "--endpoint", endpoint])
        .output()
        .expect("lease table create");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_recreated_table_never_grants_a_lease_while_its_old_holder_runs() {
    let Some(endpoint) = support::dynamo_endpoint("dynamo_store_loss") else {
        return;
    };
    let rounds = if std::env::var("LEASE_LONG").as_deref() == Ok("1") {
        20
    } else {
        2
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let client = runtime.block_on(lease_dynamo::client_for_endpoint(&endpoint));
    let dir = tempfile::tempdir().expect("tempdir");
    let mut jitter = unix_nanos(SystemTime::now()) as u64 | 1;
    let table = format!("store-loss-{}-{}", std::process::id(), jitter % 100_000);
    create(&table, dir.path(), &endpoint);
    let log = dir.path().join("claims");
    // The fresh table replaced none: its first holder need not wait.
    let no_grace = ["--recreation-grace", "0"];
    let mut first = holder(dir.path(), &table, &endpoint, "h0", &log, &no_grace);
    wait_for("the first command starts", Duration::from_secs(15), || {
        started(&log, "h0").is_some()
    });
    for round in 1..=rounds {
        // The table is lost at a random moment of the holder's renewal cycle (every 500 ms).
        jitter ^= jitter << 13;
        jitter ^= jitter >> 7;
        jitter ^= jitter << 17;
        std::thread::sleep(Duration::from_millis(jitter % 600));
        runtime.block_on(recreate(&client, &table, dir.path(), &endpoint));
        let name = format!("h{round}");
        let second = holder(dir.path(), &table, &endpoint, &name, &log, &[]);
        // The old command's end: when its `lease` exits (the command is gone by then).
        let mut first_end = None;
        wait_for("the old lease run exits", Duration::from_secs(15), || {
            if first.try_wait().expect("try_wait").is_some() {
                first_end = Some(unix_nanos(SystemTime::now()));
            }
            first_end.is_some()
        });
        wait_for("the new command starts", Duration::from_secs(20), || {
            started(&log, &name).is_some()
        });
        let second_start = started(&log, &name).expect("started");
        let first_end = first_end.expect("ended");
        assert!(
            second_start > first_end,
            "round {round}: the new command started {} ms before the old one's lease run \
             exited: two holders at once",
            (first_end - second_start) / 1_000_000,
        );
        first = second;
    }
    let _ = first.kill();
    let _ = first.wait();
    runtime.block_on(async {
        let _ = client.delete_table().table_name(&table).send().await;
    });
}

/// A restore under a running `lease run` (issue 37, item 3): the table is deleted, created again
/// and given back the items scanned a few tenures earlier (a released item whose counter is
/// older than tokens issued since). A second `lease run` never starts its command before the
/// first's `lease run` has exited, and its fencing token is above every one issued before.
/// Before the fix, the second command started at once beside the first, with a token issued
/// before.
#[test]
fn a_restored_table_never_grants_a_lease_while_its_old_holder_runs() {
    let Some(endpoint) = support::dynamo_endpoint("dynamo_store_loss restore") else {
        return;
    };
    let rounds = if std::env::var("LEASE_LONG").as_deref() == Ok("1") {
        20
    } else {
        2
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let client = runtime.block_on(lease_dynamo::client_for_endpoint(&endpoint));
    let dir = tempfile::tempdir().expect("tempdir");
    let mut jitter = unix_nanos(SystemTime::now()) as u64 | 1;
    let table = format!("store-restore-{}-{}", std::process::id(), jitter % 100_000);
    create(&table, dir.path(), &endpoint);
    let log = dir.path().join("claims");
    let no_grace = ["--recreation-grace", "0"];
    // A few short tenures; the snapshot is taken after the first.
    let mut snapshot = Vec::new();
    for tenure in 0..3 {
        let name = format!("t{tenure}");
        let script = format!(
            "echo \"fence {name} $LEASE_FENCING_TOKEN\" >> {}",
            log.display()
        );
        let out = lease(dir.path())
            .args([
                "run",
                "--dynamo",
                &table,
                "--endpoint",
                &endpoint,
                "--key",
                "k",
            ])
            .args(["--ttl", TTL, "--wait", "20s"])
            .args(no_grace)
            .args(["--", "sh", "-c", &script])
            .output()
            .expect("lease run");
        assert!(out.status.success(), "{}", support::stderr(&out));
        if tenure == 0 {
            snapshot = runtime
                .block_on(
                    client
                        .scan()
                        .table_name(&table)
                        .consistent_read(true)
                        .send(),
                )
                .expect("scan")
                .items()
                .to_vec();
        }
    }
    let mut first = holder(dir.path(), &table, &endpoint, "h0", &log, &no_grace);
    wait_for("the first command starts", Duration::from_secs(15), || {
        started(&log, "h0").is_some()
    });
    for round in 1..=rounds {
        jitter ^= jitter << 13;
        jitter ^= jitter >> 7;
        jitter ^= jitter << 17;
        std::thread::sleep(Duration::from_millis(jitter % 600));
        runtime.block_on(async {
            recreate(&client, &table, dir.path(), &endpoint).await;
            for item in &snapshot {
                client
                    .put_item()
                    .table_name(&table)
                    .set_item(Some(item.clone()))
                    .send()
                    .await
                    .expect("put back");
            }
        });
        let name = format!("h{round}");
        let second = holder(dir.path(), &table, &endpoint, &name, &log, &[]);
        let mut first_end = None;
        wait_for("the old lease run exits", Duration::from_secs(15), || {
            if first.try_wait().expect("try_wait").is_some() {
                first_end = Some(unix_nanos(SystemTime::now()));
            }
            first_end.is_some()
        });
        wait_for("the new command starts", Duration::from_secs(20), || {
            started(&log, &name).is_some()
        });
        let second_start = started(&log, &name).expect("started");
        let first_end = first_end.expect("ended");
        assert!(
            second_start > first_end,
            "round {round}: the new command started {} ms before the old one's lease run \
             exited: two holders at once",
            (first_end - second_start) / 1_000_000,
        );
        let issued = fences(&log);
        let (newest, earlier) = issued.split_last().expect("fences logged");
        assert_eq!(newest.0, name, "{issued:?}");
        assert!(
            earlier.iter().all(|(_, token)| *token < newest.1),
            "round {round}: token {} repeats or falls below one issued before: {issued:?}",
            newest.1
        );
        first = second;
    }
    let _ = first.kill();
    let _ = first.wait();
    runtime.block_on(async {
        let _ = client.delete_table().table_name(&table).send().await;
    });
}
