//! `lease run --holders N`: at most N copies of a command at once across processes, each in a
//! slot of its own with its own fencing token, on the file store and on DynamoDB Local.

mod support;
#[cfg(feature = "dynamo")]
use support::dynamo_endpoint;
use support::stderr;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const HELD: i32 = 75;

/// Where a test keeps its leases: a file store, or a DynamoDB table.
#[derive(Debug, Clone)]
enum Store {
    File(PathBuf),
    #[cfg(feature = "dynamo")]
    Dynamo {
        table: String,
        endpoint: String,
    },
}

impl Store {
    fn args(&self) -> Vec<String> {
        match self {
            Self::File(dir) => vec!["--file".into(), dir.display().to_string()],
            #[cfg(feature = "dynamo")]
            Self::Dynamo { table, endpoint } => vec![
                "--dynamo".into(),
                table.clone(),
                "--endpoint".into(),
                endpoint.clone(),
                // A table this test just created replaced nothing.
                "--recreation-grace".into(),
                "0s".into(),
            ],
        }
    }
}

fn lease(home: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lease"));
    command
        .env("LEASE_DIR", home)
        .env_remove("LEASE_LOG")
        // An exported PostgreSQL URL would make PostgreSQL the default store.
        .env_remove("LEASE_POSTGRES_URL")
        .env_remove("LEASE_REDIS_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// `lease run --holders 2 --wait 0` of a command that records its slot and fencing token in
/// `marks/<pid>`, then runs until `stop` exists.
fn holder(home: &Path, store: &Store, key: &str) -> Child {
    let script = format!(
        r#"echo "$LEASE_SLOT $LEASE_FENCING_TOKEN $LEASE_KEY" > "{home}/marks/$$.tmp" && mv "{home}/marks/$$.tmp" "{home}/marks/$$"; while [ ! -e "{home}/stop" ]; do sleep 0.02; done"#,
        home = home.display()
    );
    lease(home)
        .arg("run")
        .args(store.args())
        .args(["--key", key, "--holders", "2", "--wait", "0", "--ttl", "5s"])
        .args(["--", "sh", "-c", &script])
        .spawn()
        .expect("lease starts")
}

fn marks(home: &Path) -> Vec<String> {
    std::fs::read_dir(home.join("marks"))
        .expect("marks")
        .filter_map(Result::ok)
        .filter(|entry| !entry.file_name().to_string_lossy().ends_with(".tmp"))
        .map(|entry| std::fs::read_to_string(entry.path()).expect("a mark"))
        .collect()
}

fn wait_for_marks(home: &Path, count: usize, child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while marks(home).len() < count {
        if let Some(status) = child.try_wait().expect("try_wait") {
            let mut text = String::new();
            if let Some(mut err) = child.stderr.take() {
                std::io::Read::read_to_string(&mut err, &mut text).expect("stderr");
            }
            panic!("lease ended ({status}) before its command started: {text}");
        }
        assert!(Instant::now() < deadline, "{count} commands never started");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn finish(mut child: Child, limit: Duration) -> Output {
    let started = Instant::now();
    while child.try_wait().expect("try_wait").is_none() {
        if started.elapsed() > limit {
            child.kill().expect("kill");
            let output = child.wait_with_output().expect("output");
            panic!("lease still running after {limit:?}: {}", stderr(&output));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// Five `lease run --holders 2 --wait 0` on one key while the first two run: the first two run,
/// in distinct slots with their own tokens; the other three exit busy; `lease status --holders`
/// shows both slots held.
fn five_runs_two_slots(home: &Path, store: &Store) {
    std::fs::create_dir_all(home.join("marks")).expect("marks dir");
    let key = "backfill";
    let mut first = holder(home, store, key);
    wait_for_marks(home, 1, &mut first);
    let mut second = holder(home, store, key);
    wait_for_marks(home, 2, &mut second);
    let others: Vec<Child> = (0..3).map(|_| holder(home, store, key)).collect();
    for other in others {
        let output = finish(other, Duration::from_secs(20));
        assert_eq!(
            output.status.code(),
            Some(HELD),
            "a third holder must be turned away busy: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains("is held by"),
            "{}",
            stderr(&output)
        );
    }
    let status = lease(home)
        .arg("status")
        .args(store.args())
        .args(["--key", key, "--holders", "2", "--json"])
        .output()
        .expect("status");
    let text = String::from_utf8_lossy(&status.stdout);
    assert_eq!(text.matches(r#""state":"held""#).count(), 2, "{text}");
    assert!(
        text.contains(r#""slot":0"#) && text.contains(r#""slot":1"#),
        "{text}"
    );
    let shown = lease(home)
        .arg("status")
        .args(store.args())
        .args(["--key", key, "--holders", "2"])
        .output()
        .expect("status");
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.starts_with("backfill: 2 of 2 slots held\n"),
        "{shown}"
    );
    assert!(shown.contains("backfill#slot-1: held by"), "{shown}");

    let seen = marks(home);
    assert_eq!(seen.len(), 2, "exactly two commands ran: {seen:?}");
    let slots: BTreeSet<&str> = seen.iter().filter_map(|m| m.split(' ').next()).collect();
    assert_eq!(slots, BTreeSet::from(["0", "1"]), "{seen:?}");
    // Fencing tokens count per slot (both may be 1 on a fresh store): a slot and its token
    // name one tenure.
    let tenures: BTreeSet<(&str, &str)> = seen
        .iter()
        .filter_map(|m| Some((m.split(' ').next()?, m.split(' ').nth(1)?)))
        .collect();
    assert_eq!(
        tenures.len(),
        2,
        "each holder has its own slot and token: {seen:?}"
    );
    assert!(
        tenures
            .iter()
            .all(|(_, token)| token.parse::<u64>().is_ok_and(|t| t > 0)),
        "{seen:?}"
    );
    assert!(
        seen.iter().all(|m| m.trim_end().ends_with(" backfill")),
        "{seen:?}"
    );

    std::fs::write(home.join("stop"), b"").expect("stop");
    for child in [first, second] {
        let output = finish(child, Duration::from_secs(20));
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    }
}

#[test]
fn five_runs_with_two_holders_on_files() {
    let home = tempfile::tempdir().expect("tempdir");
    let store = Store::File(home.path().join("store"));
    five_runs_two_slots(home.path(), &store);
}

#[test]
#[cfg(feature = "dynamo")]
fn five_runs_with_two_holders_on_dynamodb() {
    let Some(endpoint) = dynamo_endpoint("five_runs_with_two_holders_on_dynamodb") else {
        return;
    };
    let home = tempfile::tempdir().expect("tempdir");
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let table = format!("holders-{nanos}");
    let created = lease(home.path())
        .args([
            "table",
            "create",
            "--dynamo",
            &table,
            "--endpoint",
            &endpoint,
        ])
        .output()
        .expect("table create");
    assert!(created.status.success(), "{}", stderr(&created));
    let store = Store::Dynamo { table, endpoint };
    five_runs_two_slots(home.path(), &store);
}

#[test]
fn holders_is_refused_with_a_path_and_outside_its_range() {
    let home = tempfile::tempdir().expect("tempdir");
    for args in [
        vec!["--path", "/tmp/x.lock", "--holders", "2"],
        vec!["--key", "k", "--holders", "0"],
        vec!["--key", "k", "--holders", "1025"],
    ] {
        let output = lease(home.path())
            .arg("run")
            .args(&args)
            .args(["--", "true"])
            .output()
            .expect("lease");
        assert_eq!(
            output.status.code(),
            Some(64),
            "{args:?}: {}",
            stderr(&output)
        );
    }
}
