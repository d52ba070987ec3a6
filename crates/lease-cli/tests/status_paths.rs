//! `lease status` tells the truth (corrupt and foreign records, Go `kit/lockfile` holders, closed
//! pipes), and `lease run --path` shares one exact path with Go `PIDLock`s and lease-file
//! `FileLock`s, never both holding it. Go's side is emulated as the package takes its steps (see
//! lease-file's `tests/go_interop.rs`): `Acquire` creates the path with `O_EXCL` and writes a
//! compact JSON record plus a newline; a holder rewrites it in place (truncate + write) every
//! 250 ms; `Release` removes it.

#[cfg(feature = "dynamo")]
mod support;
#[cfg(feature = "dynamo")]
use support::dynamo_endpoint;

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

const CORRUPT: i32 = 65;
const HELD: i32 = 75;
const USAGE: i32 = 64;

/// `lease` with a private default directory and quiet logs.
fn lease(default_dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lease"));
    command
        .env("LEASE_DIR", default_dir)
        .env_remove("LEASE_LOG")
        // An exported PostgreSQL URL would make PostgreSQL the default store.
        .env_remove("LEASE_POSTGRES_URL")
        .env_remove("LEASE_REDIS_URL")
        .stdin(Stdio::null());
    command
}

fn output(command: &mut Command) -> Output {
    command.output().expect("lease runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn code(output: &Output) -> i32 {
    output.status.code().unwrap_or(-1)
}

/// The record as Go's `json.Marshal` writes it, plus the newline the package appends.
fn go_record(owner: &str, pid: u32, heartbeat: SystemTime) -> Vec<u8> {
    let nanos = heartbeat
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("after the epoch")
        .as_nanos();
    format!("{{\"version\":1,\"ownerID\":\"{owner}\",\"pid\":{pid},\"lastHeartbeatUnixNano\":{nanos}}}\n")
        .into_bytes()
}

/// Go's `Acquire` when the path is absent: `O_CREATE|O_EXCL|O_WRONLY`, mode 0644, the record.
fn go_create(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(path)?;
    file.write_all(bytes)
}

/// A heartbeating Go holder of `path` (this process's pid, which is alive): rewrites the record
/// in place every 250 ms until stopped, then releases (removes the file). Its report: whether
/// it ever found its file gone or not its own (the path taken from under it).
struct GoHolder {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<String>>,
}

impl GoHolder {
    fn start(path: &Path) -> Self {
        go_create(
            path,
            &go_record("go-owner", std::process::id(), SystemTime::now()),
        )
        .expect("the Go process acquires");
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let path = path.to_owned();
        let thread = std::thread::spawn(move || {
            let mut violations = Vec::new();
            while !stopping.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(250));
                match std::fs::read(&path) {
                    Ok(bytes) if bytes.windows(8).any(|w| w == b"go-owner") => {}
                    other => violations.push(format!("lock file changed under Go: {other:?}")),
                }
                // The heartbeat: truncate, then write, in place.
                let written = OpenOptions::new()
                    .write(true)
                    .truncate(true)
                    .open(&path)
                    .and_then(|mut f| {
                        f.write_all(&go_record(
                            "go-owner",
                            std::process::id(),
                            SystemTime::now(),
                        ))
                    });
                if let Err(error) = written {
                    violations.push(format!("heartbeat failed: {error}"));
                }
            }
            if let Err(error) = std::fs::remove_file(&path) {
                violations.push(format!("release failed: {error}"));
            }
            violations
        });
        Self { stop, thread }
    }

    fn release(self) -> Vec<String> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("Go holder thread")
    }
}

/// `lease run --path path --wait wait -- sh -c 'touch ran'`: its output, and whether the
/// command ran.
fn run_at(dir: &Path, path: &Path, wait: &str) -> (Output, bool) {
    let ran = dir.join("ran");
    let _ = std::fs::remove_file(&ran);
    let out = output(
        lease(dir)
            .arg("run")
            .arg("--path")
            .arg(path)
            .args(["--wait", wait, "--", "touch"])
            .arg(&ran),
    );
    let did = ran.exists();
    (out, did)
}

#[test]
fn status_shows_a_live_go_pidlock_held_by_go_with_its_pid_never_free() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A Go holder at the very path a store key names (`k` is `k.lease`): main showed it
    // "free: the lease of ... expired".
    let in_store = dir.path().join("k.lease");
    let go = GoHolder::start(&in_store);
    let out = output(
        lease(dir.path())
            .args(["status", "--file"])
            .arg(dir.path())
            .args(["--key", "k"]),
    );
    let shown = text(&out.stdout);
    assert_eq!(code(&out), 0, "{shown}{}", text(&out.stderr));
    assert!(shown.starts_with("k: held by Go"), "{shown}");
    assert!(
        shown.contains(&format!("pid      {}", std::process::id())),
        "{shown}"
    );
    assert!(
        !shown.contains("k: free") && !shown.contains("expired"),
        "{shown}"
    );

    // The same through --path, as JSON.
    let at = dir.path().join(".wave-dev.lock");
    let go_at = GoHolder::start(&at);
    let out = output(
        lease(dir.path())
            .args(["status", "--json", "--path"])
            .arg(&at),
    );
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(value["state"], "held-by-go", "{value}");
    assert_eq!(value["pid"], std::process::id(), "{value}");
    assert_eq!(value["fencing"], serde_json::Value::Null, "{value}");
    // Never broken by an operator's forced release either: another protocol's lock.
    let out = output(
        lease(dir.path())
            .args(["release", "--force", "--yes-i-know", "--path"])
            .arg(&at),
    );
    assert_eq!(code(&out), HELD, "{}", text(&out.stderr));
    assert!(at.is_file(), "the Go lock file is left alone");
    assert!(go.release().is_empty());
    assert!(go_at.release().is_empty());
}

/// A lock directory with two state entries (never made by this crate), and a regular file in no
/// format known: shown corrupt / foreign with the reason, exit 65; main said "cannot read
/// lease" with the backend's exit 69, and a corrupt lease hid every other lease from `--all`.
#[test]
fn status_shows_corrupt_and_foreign_file_records_with_the_reason() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = |args: &[&str]| {
        let mut command = lease(dir.path());
        command.args(args).arg("--file").arg(dir.path());
        output(&mut command)
    };
    for key in ["ok", "two"] {
        assert_eq!(
            code(&file(
                &["run", "--key", key, "--wait", "0", "--", "true"][..]
            )),
            0
        );
    }
    std::fs::write(dir.path().join("two.lease").join("free.2"), [0u8; 16]).expect("plant");
    let out = file(&["status", "--key", "two"]);
    let shown = text(&out.stdout);
    assert_eq!(code(&out), CORRUPT, "{shown}{}", text(&out.stderr));
    assert!(shown.starts_with("two: corrupt: "), "{shown}");
    assert!(!shown.contains("free ("), "{shown}");
    let out = file(&["status", "--key", "two", "--json"]);
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(value["state"], "corrupt", "{value}");
    assert!(
        value["reason"].as_str().is_some_and(|r| !r.is_empty()),
        "{value}"
    );

    // A regular file in no known format, older than a Go write could be.
    let odd = dir.path().join("odd.lease");
    std::fs::write(&odd, b"not a lock").expect("plant");
    let old = SystemTime::now() - Duration::from_secs(60);
    std::fs::File::options()
        .write(true)
        .open(&odd)
        .and_then(|f| f.set_modified(old))
        .expect("age it");
    let out = file(&["status", "--key", "odd", "--json"]);
    assert_eq!(code(&out), CORRUPT, "{}", text(&out.stderr));
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(value["state"], "foreign", "{value}");

    // The listing shows every lease, the bad ones as such, and says why after the table.
    let out = file(&["status", "--all"]);
    let shown = text(&out.stdout);
    assert_eq!(code(&out), CORRUPT, "{shown}{}", text(&out.stderr));
    assert!(
        shown
            .lines()
            .any(|l| l.starts_with("ok ") && l.contains("free")),
        "{shown}"
    );
    assert!(
        shown
            .lines()
            .any(|l| l.starts_with("two ") && l.contains("corrupt")),
        "{shown}"
    );
    assert!(
        shown
            .lines()
            .any(|l| l.starts_with("odd ") && l.contains("foreign")),
        "{shown}"
    );
    assert!(shown.lines().any(|l| l.starts_with("two: ")), "{shown}");
}

/// Every subcommand that prints survives a reader that went away (`lease status | true`): exit
/// 0, nothing on stderr. Main panicked with "Broken pipe" (exit 101).
#[test]
fn printing_to_a_closed_pipe_ends_quietly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let with_file = |args: &[&str]| {
        let mut command = lease(dir.path());
        command.args(args).arg("--file").arg(dir.path());
        command
    };
    assert_eq!(
        code(&output(&mut with_file(&[
            "run", "--key", "k", "--", "true"
        ]))),
        0
    );
    let cases = [
        with_file(&["status", "--key", "k"]),
        with_file(&["status", "--key", "k", "--json"]),
        with_file(&["status", "--all"]),
        with_file(&["status", "--all", "--json"]),
        with_file(&["release", "--key", "k", "--force", "--yes-i-know"]),
        {
            // The smallest demo (about 2 s): its table goes nowhere, the demo still ends well.
            let mut demo = lease(dir.path());
            demo.args(["demo", "--workers", "2", "--units", "4"]);
            demo
        },
    ];
    for mut command in cases {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starts");
        // The reader is gone before lease writes a byte.
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("waits");
        assert_eq!(code(&out), 0, "{command:?}: {}", text(&out.stderr));
        assert!(out.stderr.is_empty(), "{command:?}: {}", text(&out.stderr));
    }
}

/// `lease run --path P` and a Go `PIDLock` on P never both hold it: a heartbeating Go holder,
/// a stale one (dead pid, heartbeat 10 s old) and files caught mid-write all keep `lease` out
/// (exit 75, the command never runs, the Go file untouched); once Go releases, `lease` takes P,
/// and while it holds P no Go `Acquire` can create it.
#[test]
fn run_path_and_a_go_pidlock_never_both_hold() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join(".wave-dev.lock");

    let go = GoHolder::start(&p);
    let (out, ran) = run_at(dir.path(), &p, "0");
    assert_eq!(code(&out), HELD, "{}", text(&out.stderr));
    assert!(!ran, "the command ran while Go held the path");
    assert!(
        text(&out.stderr).contains("Go kit/lockfile"),
        "{}",
        text(&out.stderr)
    );
    let (out, ran) = run_at(dir.path(), &p, "600ms");
    assert_eq!(code(&out), HELD, "{}", text(&out.stderr));
    assert!(!ran);
    assert!(go.release().is_empty(), "Go lost its lock");

    // Stale: a dead Go process's record. This crate never takes over another protocol's lock
    // (a stale Go file may be replaced by a live Go contender between our look and our removal):
    // refused with how to clear it, the file left alone.
    let stale = go_record(
        "go-dead",
        u32::MAX - 7,
        SystemTime::now() - Duration::from_secs(10),
    );
    go_create(&p, &stale).expect("plant");
    let (out, ran) = run_at(dir.path(), &p, "0");
    assert_eq!(code(&out), HELD, "{}", text(&out.stderr));
    assert!(!ran);
    assert!(
        text(&out.stderr).contains("removed by hand"),
        "{}",
        text(&out.stderr)
    );
    let status = output(lease(dir.path()).arg("status").arg("--path").arg(&p));
    let shown = text(&status.stdout);
    assert!(
        shown.contains("held by Go") && shown.contains("stale"),
        "{shown}"
    );
    assert_eq!(std::fs::read(&p).expect("still there"), stale);
    std::fs::remove_file(&p).expect("cleared by hand");

    // Mid-write: created but not yet written, or cut short, and fresh: a Go holder being
    // written, held.
    for partial in [&b""[..], &b"{\"version\":1,\"ownerID\":\"go-"[..]] {
        go_create(&p, partial).expect("plant");
        let (out, ran) = run_at(dir.path(), &p, "0");
        assert_eq!(code(&out), HELD, "{partial:?}: {}", text(&out.stderr));
        assert!(!ran, "{partial:?}");
        let status = output(
            lease(dir.path())
                .args(["status", "--json", "--path"])
                .arg(&p),
        );
        let value: serde_json::Value = serde_json::from_slice(&status.stdout).expect("JSON");
        assert_eq!(value["state"], "held-by-go", "{partial:?}: {value}");
        std::fs::remove_file(&p).expect("Go releases");
    }

    // Go released: the path is lease's, and while lease holds it no Go Acquire gets in.
    let marker = dir.path().join("started");
    let holder = lease(dir.path())
        .arg("run")
        .arg("--path")
        .arg(&p)
        .args([
            "--wait",
            "0",
            "--",
            "sh",
            "-c",
            "touch \"$1\"; sleep 30",
            "sh",
        ])
        .arg(&marker)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts");
    let started = std::time::Instant::now();
    while !marker.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "command never started"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let err = go_create(
        &p,
        &go_record("go-late", std::process::id(), SystemTime::now()),
    )
    .expect_err("a Go Acquire must fail while lease holds the path");
    assert_eq!(err.kind(), std::io::ErrorKind::AlreadyExists, "{err}");
    assert!(p.is_dir());
    nix_kill(holder.id());
    let out = holder.wait_with_output().expect("waits");
    assert_eq!(out.status.code(), Some(128 + 15), "{}", text(&out.stderr));
}

/// SIGTERM to `pid` (forwarded by `lease run` to the command).
fn nix_kill(pid: u32) {
    let status = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
}

/// `--path P` is the very lock a lease-file `FileLock` on P takes: each keeps the other out,
/// and fencing tokens (LEASE_FENCING_TOKEN) follow one sequence across both.
#[test]
fn run_path_and_a_file_lock_share_one_lock_and_one_fencing_sequence() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("deploy.lock");
    let token_of_run = || {
        let out = output(lease(dir.path()).arg("run").arg("--path").arg(&p).args([
            "--wait",
            "0",
            "--",
            "sh",
            "-c",
            "echo $LEASE_KEY $LEASE_FENCING_TOKEN",
        ]));
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
        text(&out.stdout)
    };
    assert_eq!(token_of_run(), "deploy.lock 1\n");
    let lock = lease_file::FileLock::new(&p).expect("lock");
    let guard = lock.try_acquire().expect("free again");
    assert_eq!(guard.fencing_token().get(), 2);
    let (out, ran) = run_at(dir.path(), &p, "0");
    assert_eq!(code(&out), HELD, "{}", text(&out.stderr));
    assert!(!ran, "the command ran while a FileLock held the path");
    let status = output(
        lease(dir.path())
            .args(["status", "--json", "--path"])
            .arg(&p),
    );
    let value: serde_json::Value = serde_json::from_slice(&status.stdout).expect("JSON");
    assert_eq!(value["state"], "held", "{value}");
    assert_eq!(value["fencing"], 2, "{value}");
    guard.release().expect("released");
    assert_eq!(token_of_run(), "deploy.lock 3\n");
}

/// In the file store, a key that looks like a lock file's name is refused with a pointer to
/// `--path` (main ran the command on `%2Ewave-dev%2Elock.lease` beside a Go holder of
/// `.wave-dev.lock`).
#[test]
fn a_key_that_looks_like_a_lock_file_points_to_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let go = GoHolder::start(&dir.path().join(".wave-dev.lock"));
    for key in [".wave-dev.lock", "deploy.lock"] {
        let (out, ran) = {
            let ran = dir.path().join("ran");
            let out = output(
                lease(dir.path())
                    .args(["run", "--file"])
                    .arg(dir.path())
                    .args(["--key", key, "--wait", "0", "--", "touch"])
                    .arg(&ran),
            );
            (out, ran.exists())
        };
        assert_eq!(code(&out), USAGE, "{key}: {}", text(&out.stderr));
        assert!(!ran, "{key}");
        assert!(
            text(&out.stderr).contains("--path"),
            "{}",
            text(&out.stderr)
        );
    }
    assert!(go.release().is_empty());
}

/// Items no writer leaves (a malformed or exhausted counter, a holder without a usable expiry),
/// planted in a fresh table: `status` shows each corrupt with the attribute, exit 65, never
/// `free`, never the token (main showed them free, the token twice); `lease run` refuses each
/// with the same exit status.
#[test]
#[cfg(feature = "dynamo")]
fn dynamo_status_shows_malformed_items_corrupt() {
    let Some(endpoint) = dynamo_endpoint("dynamo_status_shows_malformed_items_corrupt") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let table = format!(
        "lease-cli-corrupt-{}-{}",
        std::process::id(),
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    );
    let dynamo = |command: &mut Command| {
        command
            .args(["--dynamo", &table, "--endpoint", &endpoint])
            .env("AWS_ACCESS_KEY_ID", "local")
            .env("AWS_SECRET_ACCESS_KEY", "local");
    };
    let mut create = lease(dir.path());
    create.args(["table", "create"]);
    dynamo(&mut create);
    let created = output(&mut create);
    assert_eq!(code(&created), 0, "{}", text(&created.stderr));

    use aws_sdk_dynamodb::types::AttributeValue::{self, N, S};
    let later = (SystemTime::now() + Duration::from_secs(600))
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("clock")
        .as_secs()
        .to_string();
    let token = "go-token-0123456789";
    // (partition key, attributes planted, what the reason must name)
    type Case<'a> = (&'a str, Vec<(&'a str, AttributeValue)>, &'a str);
    let cases: Vec<Case<'_>> = vec![
        (
            "fence-negative",
            vec![("lease_fence", N("-5".into()))],
            "`lease_fence`",
        ),
        (
            "fence-text",
            vec![("lease_fence", S("7".into()))],
            "`lease_fence`",
        ),
        (
            "fence-exhausted",
            vec![("lease_fence", N(i64::MAX.to_string()))],
            "exhausted",
        ),
        (
            "expiry-missing",
            vec![("lease_token", S(token.into()))],
            "`lease_expires_at`",
        ),
        (
            "expiry-text",
            vec![
                ("lease_token", S(token.into())),
                ("lease_expires_at", S("tomorrow".into())),
            ],
            "`lease_expires_at`",
        ),
        (
            "expiry-ms-only",
            vec![
                ("lease_token", S(token.into())),
                ("lease_expires_at_ms", N(format!("{later}000"))),
                ("lease_fence", N("3".into())),
            ],
            "`lease_expires_at`",
        ),
    ];
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let client = lease_dynamo::client_for_endpoint(&endpoint).await;
        for (pk, attributes, _) in &cases {
            let mut put = client
                .put_item()
                .table_name(&table)
                .item("pk", S((*pk).into()))
                .item("sk", S("LOCK".into()));
            for (name, value) in attributes {
                put = put.item(*name, value.clone());
            }
            put.send().await.expect("planted");
        }
    });
    for (pk, _, named) in &cases {
        let mut status = lease(dir.path());
        status.args(["status", "--key", pk]);
        dynamo(&mut status);
        let out = output(&mut status);
        let shown = text(&out.stdout);
        assert_eq!(code(&out), CORRUPT, "{pk}: {shown}{}", text(&out.stderr));
        assert!(
            shown.starts_with(&format!("{pk}: corrupt: ")),
            "{pk}: {shown}"
        );
        assert!(shown.contains(named), "{pk}: {shown}");
        assert!(
            !shown.contains("free") && !shown.contains(token),
            "{pk}: {shown}"
        );

        let mut json = lease(dir.path());
        json.args(["status", "--json", "--key", pk]);
        dynamo(&mut json);
        let out = output(&mut json);
        let value: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(value["state"], "corrupt", "{pk}: {value}");
        assert!(
            value["reason"].as_str().is_some_and(|r| r.contains(named)),
            "{pk}: {value}"
        );

        let mut run = lease(dir.path());
        run.args(["run", "--key", pk, "--wait", "0"]);
        dynamo(&mut run);
        let out = output(run.args(["--", "true"]));
        assert_eq!(code(&out), CORRUPT, "{pk}: {}", text(&out.stderr));
    }
    // Listed, a malformed item is corrupt too (the listing reads each lease again strictly).
    let mut list = lease(dir.path());
    list.args(["status", "--all", "--partition", "expiry-text"]);
    dynamo(&mut list);
    let out = output(&mut list);
    let shown = text(&out.stdout);
    assert_eq!(code(&out), CORRUPT, "{shown}{}", text(&out.stderr));
    assert!(
        shown
            .lines()
            .any(|l| l.starts_with("expiry-text") && l.contains("corrupt")),
        "{shown}"
    );
    runtime.block_on(async {
        let client = lease_dynamo::client_for_endpoint(&endpoint).await;
        let deleted = client.delete_table().table_name(&table).send().await;
        assert!(deleted.is_ok(), "{deleted:?}");
    });
}

/// Characters that act on a terminal or reorder text: none may reach it raw from another user.
fn raw_controls(text: &str) -> Vec<char> {
    text.chars()
        .filter(|&c| {
            (c.is_control() && c != '\n')
                || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
        })
        .collect()
}

/// Issue 37 item 8: the owner text of a Go lock file (another user's), and key names, reached
/// the terminal raw in `lease status`, `lease run`'s "held by" lines and `lease prune`: escape
/// sequences (a title change, a screen clear) and bidi overrides (U+202E). They are shown
/// escaped now; `--json` keeps them exact.
#[test]
fn untrusted_text_reaches_the_terminal_escaped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("evil.lock");
    // JSON escapes in the file: the owner Go reads back holds the raw characters.
    let owner_json = r"x\u001b]0;pwned\u0007\u001b[2J\u202eevil";
    let owner = "x\u{1b}]0;pwned\u{7}\u{1b}[2J\u{202e}evil";
    go_create(
        &p,
        &go_record(owner_json, std::process::id(), SystemTime::now()),
    )
    .expect("plant");
    let mut leaks = Vec::new();
    let status = output(lease(dir.path()).arg("status").arg("--path").arg(&p));
    let shown = text(&status.stdout);
    assert!(shown.contains("held by Go"), "{shown}");
    leaks.push(("status", raw_controls(&shown)));
    let run = output(
        lease(dir.path())
            .args(["run", "--wait", "0", "--path"])
            .arg(&p)
            .args(["--", "true"]),
    );
    assert_eq!(code(&run), HELD, "{}", text(&run.stderr));
    leaks.push(("run", raw_controls(&text(&run.stderr))));
    let json = output(
        lease(dir.path())
            .args(["status", "--json", "--path"])
            .arg(&p),
    );
    let value: serde_json::Value = serde_json::from_slice(&json.stdout).expect("json");
    assert!(
        value["holder"].as_str().is_some_and(|h| h.contains(owner)),
        "--json stays exact: {value}"
    );

    // A key whose name reverses what follows it, in a store, listed and pruned.
    let store = dir.path().join("store");
    let key = "a\u{202e}gpj.exe";
    let made = output(
        lease(dir.path())
            .arg("run")
            .arg("--file")
            .arg(&store)
            .args(["--key", key, "--", "true"]),
    );
    assert_eq!(code(&made), 0, "{}", text(&made.stderr));
    let all = output(
        lease(dir.path())
            .arg("status")
            .arg("--file")
            .arg(&store)
            .arg("--all"),
    );
    let listed = text(&all.stdout);
    leaks.push(("status --all", raw_controls(&listed)));
    let pruned = output(
        lease(dir.path())
            .args(["prune", "--idle", "0s", "--file"])
            .arg(&store),
    );
    assert_eq!(code(&pruned), 0, "{}", text(&pruned.stderr));
    leaks.push(("prune", raw_controls(&text(&pruned.stdout))));
    let leaked: Vec<_> = leaks.iter().filter(|(_, raw)| !raw.is_empty()).collect();
    eprintln!(
        "{} of {} outputs leaked raw controls",
        leaked.len(),
        leaks.len()
    );
    assert!(
        leaked.is_empty(),
        "raw terminal controls reached the terminal: {leaked:?}"
    );
    assert!(shown.contains(r"\u{1b}]0;pwned"), "shown escaped: {shown}");
    assert!(listed.contains(r"a\u{202e}gpj.exe"), "{listed}");
    assert!(
        text(&pruned.stdout).contains(r"a\u{202e}gpj.exe"),
        "{}",
        text(&pruned.stdout)
    );
}
