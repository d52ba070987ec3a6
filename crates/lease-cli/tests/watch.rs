//! `lease watch` against real `lease run` processes: each of two successive holders is shown
//! with its value and fencing token, on files and on DynamoDB Local; SIGTERM and a closed
//! standard output end it with status 0.

mod support;
#[cfg(feature = "dynamo")]
use support::dynamo_endpoint;
use support::stderr;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

fn lease(default_dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lease"));
    command
        .env("LEASE_DIR", default_dir)
        .env_remove("LEASE_LOG")
        // An exported PostgreSQL URL would make PostgreSQL the default store.
        .env_remove("LEASE_POSTGRES_URL")
        .env_remove("LEASE_REDIS_URL")
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

/// Starts `lease watch --json` with `backend`; its lines arrive on the receiver.
fn start_watch(dir: &Path, backend: &[&str], key: &str) -> (Child, Receiver<String>) {
    let mut child = lease(dir)
        .arg("watch")
        .args(backend)
        .args(["--key", key, "--json", "--poll-interval", "100ms"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("lease watch starts");
    let stdout = child.stdout.take().expect("piped");
    let (send, lines) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if send.send(line).is_err() {
                break;
            }
        }
    });
    (child, lines)
}

fn next_line(lines: &Receiver<String>, child: &mut Child) -> serde_json::Value {
    match lines.recv_timeout(Duration::from_secs(10)) {
        Ok(line) => serde_json::from_str(&line).expect("one JSON object per line"),
        Err(error) => {
            let _ = child.kill();
            panic!("no line from lease watch within 10s: {error}");
        }
    }
}

fn run_with_value(dir: &Path, backend: &[&str], key: &str, value: &str) -> u64 {
    let out = lease(dir)
        .arg("run")
        .args(backend)
        .args([
            "--key", key, "--value", value, "--wait", "5s", "--ttl", "5s",
        ])
        .args([
            "--",
            "sh",
            "-c",
            "echo \"$LEASE_FENCING_TOKEN $LEASE_VALUE\"; sleep 0.5",
        ])
        .output()
        .expect("lease run");
    assert!(out.status.success(), "lease run failed: {}", stderr(&out));
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    let (fencing, seen) = printed.trim().split_once(' ').expect("token and value");
    assert_eq!(seen, value, "the command sees the value it published");
    fencing.parse().expect("a fencing token")
}

fn wait_exit(mut child: Child, limit: Duration) -> i32 {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status.code().unwrap_or(-1);
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            panic!("lease watch did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Two successive `lease run --value` holders, each shown once with its value and token, each
/// followed by "free"; SIGTERM ends the watch with status 0.
fn two_holders(dir: &Path, backend: &[&str]) {
    let key = "primary";
    let (mut watch, lines) = start_watch(dir, backend, key);
    let first = next_line(&lines, &mut watch);
    assert_eq!(first["state"], "free", "{first}");
    let mut tokens = Vec::new();
    for value in ["10.0.0.1:80", "10.0.0.2:80"] {
        let fencing = run_with_value(dir, backend, key, value);
        let held = next_line(&lines, &mut watch);
        assert_eq!(held["state"], "held", "{held}");
        assert_eq!(held["value"], value, "{held}");
        assert_eq!(held["fencing"], fencing, "{held}");
        assert!(held["since"].is_string(), "{held}");
        let free = next_line(&lines, &mut watch);
        assert_eq!(free["state"], "free", "{free}");
        tokens.push(fencing);
    }
    assert!(tokens[1] > tokens[0], "{tokens:?}");
    let pid = Pid::from_raw(i32::try_from(watch.id()).expect("pid"));
    kill(pid, Signal::SIGTERM).expect("SIGTERM");
    assert_eq!(wait_exit(watch, Duration::from_secs(5)), 0);
    assert!(
        lines.try_recv().is_err(),
        "nothing more was printed: no holder twice"
    );
}

#[test]
fn watch_shows_each_holder_on_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    let store = store.to_str().expect("utf-8 path");
    two_holders(dir.path(), &["--file", store]);
}

#[test]
fn watch_ends_quietly_when_its_output_is_closed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    let store = store.to_str().expect("utf-8 path");
    let backend = ["--file", store];
    let (mut watch, lines) = start_watch(dir.path(), &backend, "k");
    next_line(&lines, &mut watch);
    // The reader goes away; the next change's line finds the pipe closed.
    drop(lines);
    std::thread::sleep(Duration::from_millis(50));
    run_with_value(dir.path(), &backend, "k", "x");
    assert_eq!(wait_exit(watch, Duration::from_secs(10)), 0);
}

#[test]
#[cfg(feature = "dynamo")]
fn watch_shows_each_holder_on_dynamodb() {
    let Some(endpoint) = dynamo_endpoint("watch_shows_each_holder_on_dynamodb") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let table = format!(
        "lease-watch-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
    );
    let created = lease(dir.path())
        .args([
            "table",
            "create",
            "--dynamo",
            &table,
            "--endpoint",
            &endpoint,
        ])
        .output()
        .expect("lease table create");
    assert!(created.status.success(), "{}", stderr(&created));
    let backend = [
        "--dynamo",
        table.as_str(),
        "--endpoint",
        endpoint.as_str(),
        "--recreation-grace",
        "0s",
    ];
    two_holders(dir.path(), &backend);
}

/// Issue 37 item 6: `lease watch ... | head -1` never exited while the holder stayed the same:
/// a closed output was found only at the next line written. It is found at once now.
#[test]
fn watch_exits_when_its_reader_goes_away_while_nothing_changes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    let mut watch = lease(dir.path())
        .arg("watch")
        .args(["--file", store.to_str().expect("utf-8 path"), "--key", "k"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("lease watch starts");
    let mut reader = BufReader::new(watch.stdout.take().expect("piped"));
    let mut first = String::new();
    reader.read_line(&mut first).expect("the first line");
    assert!(first.contains("k: free"), "{first}");
    // `head -1` exits: the pipe's only reader is gone, and nothing changes any more.
    drop(reader);
    let closed = Instant::now();
    assert_eq!(wait_exit(watch, Duration::from_secs(5)), 0);
    let took = closed.elapsed();
    assert!(took < Duration::from_secs(2), "took {took:?}");
}
