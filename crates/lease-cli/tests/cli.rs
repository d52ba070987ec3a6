//! End-to-end tests of the `lease` binary: real processes, a real file store, real signals.

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

const HELD: i32 = 75;
const LOST: i32 = 76;
const USAGE: i32 = 64;
const UNAVAILABLE: i32 = 69;
const NOT_FOUND: i32 = 127;

/// `lease` with a private default directory and quiet logs.
fn lease(default_dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lease"));
    command
        .env("LEASE_DIR", default_dir)
        .env_remove("LEASE_LOG")
        .stdin(Stdio::null());
    command
}

fn output(command: &mut Command) -> Output {
    command.output().expect("lease runs")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn spawn(command: &mut Command) -> Child {
    command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("lease starts")
}

/// Waits for `child` at most `limit`; kills it and fails the test if it runs longer.
fn finish(mut child: Child, limit: Duration) -> (Output, Duration) {
    let started = Instant::now();
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            return (child.wait_with_output().expect("output"), started.elapsed());
        }
        if started.elapsed() > limit {
            child.kill().expect("kill");
            let output = child.wait_with_output().expect("output");
            panic!(
                "lease still running after {limit:?}; stderr: {}",
                stderr(&output)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn code(status: ExitStatus) -> i32 {
    status.code().unwrap_or(-1)
}

/// Polls `lease status --json` until the key is held; returns the JSON text.
fn wait_until_held(dir: &Path, key: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = output(lease(dir).args(["status", "--key", key, "--json"]));
        let text = stdout(&out);
        if text.contains(r#""state":"held""#) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "never held: {text} {}",
            stderr(&out)
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

#[test]
fn two_contenders_exactly_one_runs_the_command() {
    let store = tempfile::tempdir().expect("tempdir");
    let work = tempfile::tempdir().expect("tempdir");
    let marker = work.path().join("ran");
    let script = format!("echo ran >> '{}'; sleep 2", marker.display());
    let contenders: Vec<Child> = (0..2)
        .map(|_| {
            spawn(lease(store.path()).args([
                "run", "--key", "nightly", "--wait", "0", "--", "sh", "-c", &script,
            ]))
        })
        .collect();
    let outputs: Vec<Output> = contenders
        .into_iter()
        .map(|child| finish(child, Duration::from_secs(20)).0)
        .collect();
    let mut codes: Vec<i32> = outputs.iter().map(|o| code(o.status)).collect();
    codes.sort_unstable();
    assert_eq!(
        codes,
        [0, HELD],
        "{:?}",
        outputs.iter().map(stderr).collect::<Vec<_>>()
    );
    let loser = outputs
        .iter()
        .find(|o| code(o.status) == HELD)
        .expect("a loser");
    assert!(
        stderr(loser).contains("lease nightly is held by pid"),
        "the loser names the holder: {}",
        stderr(loser)
    );
    let ran = std::fs::read_to_string(&marker).expect("marker");
    assert_eq!(ran.lines().count(), 1, "exactly one ran the command");
}

#[test]
fn a_command_that_outlives_a_broken_lease_is_stopped() {
    let store = tempfile::tempdir().expect("tempdir");
    let holder = spawn(lease(store.path()).args([
        "run", "--key", "deploy", "--ttl", "1s", "--grace", "1s", "--", "sleep", "30",
    ]));
    let status = wait_until_held(store.path(), "deploy");
    assert!(status.contains(r#""fencing":1"#), "{status}");

    let broken =
        output(lease(store.path()).args(["release", "--force", "--key", "deploy", "--yes-i-know"]));
    assert_eq!(code(broken.status), 0, "{}", stderr(&broken));
    assert!(
        stdout(&broken).contains("released the lease of pid"),
        "{}",
        stdout(&broken)
    );
    let broke_at = Instant::now();

    // Another holder takes over with a greater fencing token.
    let taker = output(lease(store.path()).args([
        "run",
        "--key",
        "deploy",
        "--wait",
        "5s",
        "--",
        "sh",
        "-c",
        "echo $LEASE_FENCING_TOKEN",
    ]));
    assert_eq!(code(taker.status), 0, "{}", stderr(&taker));
    assert_eq!(stdout(&taker).trim(), "2");

    let (out, _) = finish(holder, Duration::from_secs(10));
    let stopped_after = broke_at.elapsed();
    assert_eq!(code(out.status), LOST, "{}", stderr(&out));
    assert!(stderr(&out).contains("lease lost"), "{}", stderr(&out));
    assert!(
        stopped_after < Duration::from_secs(5),
        "stopped after {stopped_after:?}"
    );
    eprintln!("lost lease: command stopped {stopped_after:?} after the lease was broken");
}

#[test]
fn the_commands_own_status_and_signal_deaths_come_back() {
    let store = tempfile::tempdir().expect("tempdir");
    let run = |script: &str| {
        output(lease(store.path()).args(["run", "--key", "k", "--", "sh", "-c", script]))
    };
    assert_eq!(code(run("exit 0").status), 0);
    assert_eq!(code(run("exit 7").status), 7);
    assert_eq!(code(run("kill -TERM $$").status), 128 + 15);
    let missing = output(lease(store.path()).args(["run", "--key", "k", "--", "/no/such/cmd"]));
    assert_eq!(code(missing.status), NOT_FOUND);
    assert!(
        stderr(&missing).contains("command not found"),
        "{}",
        stderr(&missing)
    );
    let status = output(lease(store.path()).args(["status", "--key", "k"]));
    assert!(
        stdout(&status).starts_with("k: free"),
        "released after each run: {}",
        stdout(&status)
    );
}

#[test]
fn the_command_sees_the_key_and_a_growing_fencing_token() {
    let store = tempfile::tempdir().expect("tempdir");
    let tokens: Vec<String> = (0..3)
        .map(|_| {
            let out = output(lease(store.path()).args([
                "run",
                "--key",
                "tenant#export",
                "--",
                "sh",
                "-c",
                "echo \"$LEASE_KEY $LEASE_FENCING_TOKEN\"",
            ]));
            assert_eq!(code(out.status), 0, "{}", stderr(&out));
            stdout(&out).trim().to_owned()
        })
        .collect();
    assert_eq!(
        tokens,
        ["tenant#export 1", "tenant#export 2", "tenant#export 3"]
    );
    // The default directory ($LEASE_DIR here) holds the record.
    let all = output(lease(store.path()).args(["status", "--all"]));
    assert!(stdout(&all).contains("tenant#export"), "{}", stdout(&all));
    let listed =
        output(lease(store.path()).args(["status", "--all", "--partition", "tenant", "--json"]));
    assert!(
        stdout(&listed).contains(r#""fencing":3"#),
        "{}",
        stdout(&listed)
    );
}

#[test]
fn waiting_is_visible_and_times_out_with_the_held_code() {
    let store = tempfile::tempdir().expect("tempdir");
    let holder = spawn(lease(store.path()).args(["run", "--key", "k", "--", "sleep", "3"]));
    wait_until_held(store.path(), "k");
    let started = Instant::now();
    let waiter =
        output(lease(store.path()).args(["run", "--key", "k", "--wait", "500ms", "--", "true"]));
    assert_eq!(code(waiter.status), HELD, "{}", stderr(&waiter));
    let text = stderr(&waiter);
    assert!(text.contains("waiting for lease k held by pid"), "{text}");
    assert!(text.contains(" since "), "{text}");
    assert!(text.contains("gave up after"), "{text}");
    assert!(started.elapsed() < Duration::from_secs(3));
    // Waiting long enough gets the lease once the holder is done.
    let patient =
        output(lease(store.path()).args(["run", "--key", "k", "--wait", "10s", "--", "true"]));
    assert_eq!(code(patient.status), 0, "{}", stderr(&patient));
    assert!(
        stderr(&patient).contains("acquired lease k"),
        "{}",
        stderr(&patient)
    );
    let (out, _) = finish(holder, Duration::from_secs(10));
    assert_eq!(code(out.status), 0);
}

#[test]
fn sigterm_is_forwarded_to_the_command() {
    let store = tempfile::tempdir().expect("tempdir");
    let child = spawn(lease(store.path()).args([
        "run",
        "--key",
        "k",
        "--",
        "sh",
        "-c",
        "trap 'exit 42' TERM; sleep 30 & wait",
    ]));
    wait_until_held(store.path(), "k");
    std::thread::sleep(Duration::from_millis(200));
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("signal");
    let (out, _) = finish(child, Duration::from_secs(10));
    assert_eq!(code(out.status), 42, "{}", stderr(&out));
}

#[test]
fn bad_input_gets_a_clear_message_and_a_usage_status() {
    let store = tempfile::tempdir().expect("tempdir");
    let dir = store.path().to_str().expect("utf-8 path");
    let cases: &[(&[&str], i32, &str)] = &[
        (
            &[
                "run", "--file", dir, "--dynamo", "t", "--key", "k", "--", "true",
            ],
            USAGE,
            "cannot be used with",
        ),
        (
            &["run", "--endpoint", "http://x", "--key", "k", "--", "true"],
            USAGE,
            "--dynamo",
        ),
        (
            &["run", "--key", "k", "--ttl", "soon", "--", "true"],
            USAGE,
            "250ms",
        ),
        (
            &["run", "--key", "k", "--wait", "1.5s", "--", "true"],
            USAGE,
            "250ms",
        ),
        (
            &["run", "--key", "k", "--ttl", "5ms", "--", "true"],
            USAGE,
            "ttl",
        ),
        (&["run", "--key", "k"], USAGE, "COMMAND"),
        (&["run", "--key", "", "--", "true"], USAGE, "key"),
        (
            &["run", "--file", "/proc/lease-x", "--key", "k", "--", "true"],
            UNAVAILABLE,
            "/proc/lease-x",
        ),
        (&["release", "--key", "k", "--force"], USAGE, "--yes-i-know"),
        (&["release", "--key", "k"], USAGE, "--force"),
        (&["status"], USAGE, "--key"),
        (&["frobnicate"], USAGE, "frobnicate"),
    ];
    for (args, want, needle) in cases {
        let out = output(lease(store.path()).args(*args));
        let text = stderr(&out);
        assert_eq!(code(out.status), *want, "{args:?}: {text}");
        assert!(text.contains(needle), "{args:?}: {needle:?} not in {text}");
    }
    let help = output(lease(store.path()).arg("--help"));
    assert_eq!(code(help.status), 0);
}

#[test]
fn the_demo_runs_to_completion() {
    let started = Instant::now();
    let child = spawn(
        Command::new(env!("CARGO_BIN_EXE_lease"))
            .arg("demo")
            .stdin(Stdio::null()),
    );
    let (out, took) = finish(child, Duration::from_secs(60));
    let text = stdout(&out);
    assert_eq!(code(out.status), 0, "{text}{}", stderr(&out));
    for needle in [
        "balanced after",
        "SIGKILL worker-",
        "killed",
        "summary",
        "time to balance",
        "takeover time",
        "moves",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from:\n{text}");
    }
    eprintln!(
        "demo took {:?} ({took:?} in lease)\n{text}",
        started.elapsed()
    );
    assert!(
        took < Duration::from_secs(30),
        "the demo should stay under 30 s: {took:?}"
    );
}

/// `--dynamo` against `LEASE_DYNAMO_ENDPOINT` (e.g. DynamoDB Local), skipped visibly without it.
#[test]
fn dynamo_contention_and_fencing() {
    let Some(endpoint) = std::env::var("LEASE_DYNAMO_ENDPOINT")
        .ok()
        .filter(|e| !e.is_empty())
    else {
        assert!(
            std::env::var("LEASE_REQUIRE_DYNAMO").as_deref() != Ok("1"),
            "LEASE_REQUIRE_DYNAMO=1 but LEASE_DYNAMO_ENDPOINT is not set"
        );
        // Straight to the process's stderr, past libtest's capture, so the skip is seen.
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: lease-cli dynamo_contention_and_fencing (set LEASE_DYNAMO_ENDPOINT)"
        );
        return;
    };
    let store = tempfile::tempdir().expect("tempdir");
    let table = format!(
        "lease-cli-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
    );
    let dynamo = |command: &mut Command| {
        command
            .env(
                "AWS_ACCESS_KEY_ID",
                std::env::var("AWS_ACCESS_KEY_ID").unwrap_or_else(|_| "local".into()),
            )
            .env(
                "AWS_SECRET_ACCESS_KEY",
                std::env::var("AWS_SECRET_ACCESS_KEY").unwrap_or_else(|_| "local".into()),
            );
    };
    let mut create = lease(store.path());
    create.args([
        "table",
        "create",
        "--dynamo",
        &table,
        "--endpoint",
        &endpoint,
    ]);
    dynamo(&mut create);
    let created = output(&mut create);
    assert_eq!(code(created.status), 0, "{}", stderr(&created));

    let backend = ["--dynamo", table.as_str(), "--endpoint", endpoint.as_str()];
    let mut holder = lease(store.path());
    holder.arg("run").args(backend).args([
        "--key",
        "k",
        "--ttl",
        "2s",
        "--",
        "sh",
        "-c",
        "echo $LEASE_FENCING_TOKEN; sleep 2",
    ]);
    dynamo(&mut holder);
    let holder = spawn(&mut holder);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut status = lease(store.path());
        status
            .arg("status")
            .args(backend)
            .args(["--key", "k", "--json"]);
        dynamo(&mut status);
        if stdout(&output(&mut status)).contains(r#""state":"held""#) {
            break;
        }
        assert!(Instant::now() < deadline, "never held on DynamoDB");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut contender = lease(store.path());
    contender
        .arg("run")
        .args(backend)
        .args(["--key", "k", "--wait", "0", "--", "true"]);
    dynamo(&mut contender);
    let refused = output(&mut contender);
    assert_eq!(code(refused.status), HELD, "{}", stderr(&refused));
    let (out, _) = finish(holder, Duration::from_secs(20));
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    // DynamoDB seeds fencing tokens from the clock: any positive number.
    let fencing: u64 = stdout(&out).trim().parse().expect("a fencing token");
    assert!(fencing > 0);

    // The demo runs the same fleet on the table.
    let mut demo = lease(store.path());
    demo.args(["demo", "--dynamo", &table, "--endpoint", &endpoint]);
    dynamo(&mut demo);
    let (out, took) = finish(spawn(&mut demo), Duration::from_secs(90));
    assert_eq!(code(out.status), 0, "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("takeover time"), "{}", stdout(&out));
    eprintln!("demo on DynamoDB took {took:?}");
}

/// `LEASE_DYNAMO_ENDPOINT`, or `None` after saying visibly that `test` is skipped.
fn dynamo_endpoint(test: &str) -> Option<String> {
    let endpoint = std::env::var("LEASE_DYNAMO_ENDPOINT")
        .ok()
        .filter(|e| !e.is_empty());
    if endpoint.is_none() {
        assert!(
            std::env::var("LEASE_REQUIRE_DYNAMO").as_deref() != Ok("1"),
            "LEASE_REQUIRE_DYNAMO=1 but LEASE_DYNAMO_ENDPOINT is not set"
        );
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: lease-cli {test} (set LEASE_DYNAMO_ENDPOINT)"
        );
    }
    endpoint
}

/// A table name nobody created.
fn unused_table(prefix: &str) -> String {
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    )
}

#[test]
fn dynamo_missing_table_says_how_to_create_it() {
    let Some(endpoint) = dynamo_endpoint("dynamo_missing_table_says_how_to_create_it") else {
        return;
    };
    let store = tempfile::tempdir().expect("tempdir");
    let table = unused_table("lease-cli-missing");
    let backend = ["--dynamo", table.as_str(), "--endpoint", endpoint.as_str()];
    let with_credentials = |command: &mut Command| {
        command
            .env("AWS_ACCESS_KEY_ID", "local")
            .env("AWS_SECRET_ACCESS_KEY", "local");
    };
    let mut status = lease(store.path());
    status.arg("status").args(backend).args(["--key", "k"]);
    with_credentials(&mut status);
    let mut run = lease(store.path());
    run.arg("run")
        .args(backend)
        .args(["--key", "k", "--wait", "30s", "--", "true"]);
    with_credentials(&mut run);
    for command in [&mut status, &mut run] {
        let started = Instant::now();
        let out = output(command);
        let text = stderr(&out);
        assert_eq!(code(out.status), UNAVAILABLE, "{text}");
        assert!(started.elapsed() < Duration::from_secs(10), "{text}");
        assert!(
            text.contains(&format!("table `{table}` does not exist")),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "create it with `lease table create --dynamo {table}`"
            )),
            "{text}"
        );
        assert!(!text.contains("create_table"), "no Rust advice: {text}");
    }
}

#[test]
fn dynamo_without_credentials_fails_at_once_and_says_so() {
    let Some(endpoint) = dynamo_endpoint("dynamo_without_credentials_fails_at_once_and_says_so")
    else {
        return;
    };
    let store = tempfile::tempdir().expect("tempdir");
    let home = tempfile::tempdir().expect("tempdir");
    let table = unused_table("lease-cli-nocreds");
    let mut run = lease(store.path());
    run.args(["run", "--dynamo", &table, "--endpoint", &endpoint])
        .args(["--key", "k", "--wait", "30s", "--", "true"])
        .env("HOME", home.path())
        .env("AWS_CONFIG_FILE", home.path().join("config"))
        .env(
            "AWS_SHARED_CREDENTIALS_FILE",
            home.path().join("credentials"),
        )
        .env("AWS_EC2_METADATA_DISABLED", "true");
    for name in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_ROLE_ARN",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    ] {
        run.env_remove(name);
    }
    let started = Instant::now();
    let out = output(&mut run);
    let took = started.elapsed();
    let text = stderr(&out);
    // It used to retry until --wait ran out, then report the lease as held (75).
    assert_eq!(code(out.status), UNAVAILABLE, "{text}");
    assert!(took < Duration::from_secs(10), "took {took:?}: {text}");
    assert!(text.contains("no AWS credentials found"), "{text}");
    assert!(text.contains("AWS_ACCESS_KEY_ID"), "{text}");
    assert!(!text.contains("gave up"), "{text}");
}

/// Any `--wait`, however large, is accepted; `forever` means no limit (issue 11, point 5: main
/// panicked with exit 101 on `--wait 18446744073709551615`).
#[test]
fn any_wait_is_accepted_without_a_panic() {
    let store = tempfile::tempdir().expect("tempdir");
    for wait in ["18446744073709551615", "forever", "106751991167300d"] {
        let out = output(
            lease(store.path()).args(["run", "--key", "k", "--wait", wait, "--", "true"]),
        );
        assert_eq!(code(out.status), 0, "--wait {wait}: {}", stderr(&out));
    }
    let out = output(lease(store.path()).args(["run", "--key", "k", "--wait", "soon", "--", "true"]));
    assert_eq!(code(out.status), USAGE);
    assert!(stderr(&out).contains("forever"), "{}", stderr(&out));
}

/// A lease the Go `lease` package holds in a shared table: `run` waits for it, `status` shows
/// it held until Go's expiry (main showed "free, expired 1970" and ran the command), and an
/// operator can break it even when Go's token breaks this crate's token rules.
#[test]
fn dynamo_go_leases_are_held_shown_and_breakable() {
    let Some(endpoint) = dynamo_endpoint("dynamo_go_leases_are_held_shown_and_breakable") else {
        return;
    };
    let store = tempfile::tempdir().expect("tempdir");
    let table = unused_table("lease-cli-go");
    let credentials = |command: &mut Command| {
        command
            .env("AWS_ACCESS_KEY_ID", "local")
            .env("AWS_SECRET_ACCESS_KEY", "local");
    };
    let mut create = lease(store.path());
    create.args(["table", "create", "--dynamo", &table, "--endpoint", &endpoint]);
    credentials(&mut create);
    assert_eq!(code(output(&mut create).status), 0);

    // Plant the item exactly as Go's Manager.Acquire writes it: seconds, no fencing counter,
    // and a token from a generator that returned a line break.
    let expires = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs()
        + 600;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let client = lease_dynamo::sdk_client(Some(&endpoint), Some("us-east-1")).await;
        use aws_sdk_dynamodb::types::AttributeValue::{N, S};
        client
            .put_item()
            .table_name(&table)
            .item("pk", S("nightly".into()))
            .item("sk", S("LOCK".into()))
            .item("lease_token", S("go\ntoken".into()))
            .item("lease_expires_at", N(expires.to_string()))
            .item("ttl", N((expires + 3600).to_string()))
            .condition_expression("attribute_not_exists(#pk) OR #lease_expires_at <= :now")
            .expression_attribute_names("#pk", "pk")
            .expression_attribute_names("#lease_expires_at", "lease_expires_at")
            .expression_attribute_values(":now", N((expires - 600).to_string()))
            .send()
            .await
            .expect("planted as Go writes it");
    });

    let backend = ["--dynamo", table.as_str(), "--endpoint", endpoint.as_str()];
    let mut run = lease(store.path());
    run.arg("run")
        .args(backend)
        .args(["--key", "nightly", "--wait", "0", "--", "true"]);
    credentials(&mut run);
    let refused = output(&mut run);
    assert_eq!(code(refused.status), HELD, "{}", stderr(&refused));

    let mut status = lease(store.path());
    status
        .arg("status")
        .args(backend)
        .args(["--key", "nightly", "--json"]);
    credentials(&mut status);
    let shown = stdout(&output(&mut status));
    assert!(shown.contains(r#""state":"held""#), "{shown}");
    assert!(!shown.contains("1970"), "{shown}");

    let mut list = lease(store.path());
    list.arg("status")
        .args(backend)
        .args(["--all", "--partition", "nightly"]);
    credentials(&mut list);
    let listed = output(&mut list);
    assert!(stdout(&listed).contains("nightly"), "{}{}", stdout(&listed), stderr(&listed));

    let mut release = lease(store.path());
    release
        .arg("release")
        .args(backend)
        .args(["--key", "nightly", "--force", "--yes-i-know"]);
    credentials(&mut release);
    let broken = output(&mut release);
    assert_eq!(code(broken.status), 0, "{}", stderr(&broken));
    assert!(stdout(&broken).contains("released"), "{}", stdout(&broken));

    let mut run = lease(store.path());
    run.arg("run")
        .args(backend)
        .args(["--key", "nightly", "--wait", "0", "--", "true"]);
    credentials(&mut run);
    let ran = output(&mut run);
    assert_eq!(code(ran.status), 0, "{}", stderr(&ran));
}
