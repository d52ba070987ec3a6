//! `lease run --dynamo` against endpoints that fail on purpose, served by this test on
//! loopback: one that accepts connections and never answers (`--wait` is a deadline for
//! everything, retries inside one attempt included; the final release is bounded), and an
//! instance metadata endpoint that answers 403 (no credentials: at once, with the help text).
//! No DynamoDB Local needed.

mod support;
use support::stderr;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The DynamoDB client's default attempt timeout (`RetryPolicy::default`).
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);
/// What `lease` may add to the bounds: process start, configuration, the reply. 100 ms was
/// too little on a loaded 2-core host (CI: `--wait 0` took 2.17 s); a second attempt would add
/// a whole [`ATTEMPT_TIMEOUT`], so a second still tells one attempt from two.
const SLACK: Duration = Duration::from_millis(1000);
/// `lease run`'s release budget after the command stops (`RELEASE_BUDGET` in run.rs).
const RELEASE_BUDGET: Duration = Duration::from_secs(2);

/// A loopback server: answers the first `answered` requests with `reply(n)`, then accepts
/// connections (and reads them) but never answers. Returns its `http://` URL.
fn serve(answered: usize, reply: fn(usize, &str) -> (u16, String)) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let served = Arc::new(AtomicUsize::new(0));
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let served = served.clone();
            std::thread::spawn(move || handle(stream, &served, answered, reply));
        }
    });
    url
}

fn handle(
    stream: TcpStream,
    served: &AtomicUsize,
    answered: usize,
    reply: fn(usize, &str) -> (u16, String),
) {
    let mut reader = BufReader::new(match stream.try_clone() {
        Ok(s) => s,
        Err(_) => return,
    });
    let mut stream = stream;
    loop {
        let mut head = String::new();
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if let Some(value) = line
                .to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().to_owned())
            {
                length = value.parse().unwrap_or(0);
            }
            if line == "\r\n" {
                break;
            }
            head.push_str(&line);
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let n = served.fetch_add(1, Ordering::SeqCst);
        if n >= answered {
            // Black hole: keep the connection open, never answer.
            std::thread::sleep(Duration::from_secs(600));
            return;
        }
        let (status, text) = reply(n, &head);
        let response = format!(
            "HTTP/1.1 {status} X\r\ncontent-type: application/x-amz-json-1.0\r\ncontent-length: {}\r\n\r\n{text}",
            text.len()
        );
        if stream.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}

fn never(_: usize, _: &str) -> (u16, String) {
    (500, String::new())
}

/// The acquire's `UpdateItem` reply: the item as written (only the counter is read).
fn acquired(_: usize, _: &str) -> (u16, String) {
    (
        200,
        r#"{"Attributes":{"lease_fence":{"N":"7"}}}"#.to_owned(),
    )
}

/// The metadata endpoint of a host where instance metadata is disabled.
fn forbidden(_: usize, _: &str) -> (u16, String) {
    (403, String::new())
}

/// `lease` with static credentials (so only the endpoint matters) and no instance metadata.
fn lease(dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lease"));
    command
        .env("LEASE_DIR", dir)
        .env_remove("LEASE_LOG")
        .env("AWS_ACCESS_KEY_ID", "local")
        .env("AWS_SECRET_ACCESS_KEY", "local")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

fn timed(command: &mut Command) -> (Output, Duration) {
    let started = Instant::now();
    let output = command.output().expect("lease runs");
    (output, started.elapsed())
}

fn run_args<'a>(endpoint: &'a str, wait: &'a str) -> Vec<&'a str> {
    vec![
        "run",
        "--dynamo",
        "leases",
        "--endpoint",
        endpoint,
        "--key",
        "k",
        "--wait",
        wait,
        "--",
        "true",
    ]
}

/// Issue 23: `--wait 0` took 10.34 s against a silent endpoint (5 attempts of 2 s inside one
/// try); it is one attempt, bounded by one attempt timeout.
#[test]
fn wait_zero_is_one_attempt_against_a_silent_endpoint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let endpoint = serve(0, never);
    let (output, took) = timed(lease(dir.path()).args(run_args(&endpoint, "0")));
    assert_eq!(output.status.code(), Some(69), "{}", stderr(&output));
    assert!(
        took < ATTEMPT_TIMEOUT + SLACK,
        "--wait 0 took {took:?}: {}",
        stderr(&output)
    );
    let text = stderr(&output);
    assert!(text.contains("cannot acquire lease k"), "{text}");
}

/// Issue 23: `--wait 3s` took 10.33 s; the wait ends the store's retries too.
#[test]
fn a_wait_is_a_deadline_for_the_retries_inside_each_attempt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let endpoint = serve(0, never);
    let wait = Duration::from_secs(3);
    let (output, took) = timed(lease(dir.path()).args(run_args(&endpoint, "3s")));
    assert_eq!(output.status.code(), Some(69), "{}", stderr(&output));
    assert!(
        took < wait + ATTEMPT_TIMEOUT + SLACK,
        "--wait 3s took {took:?}: {}",
        stderr(&output)
    );
}

/// Issue 23: after the command stopped, `lease` took another 10 s to exit (the final release
/// retried like any request); the release now has a budget.
#[test]
fn the_final_release_is_bounded_when_the_store_stops_answering() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The acquire is answered; the release (and anything after) never is. No recreation
    // grace: its checks after the acquire (`DescribeTable`, a fence raise) are not this test's.
    let endpoint = serve(1, acquired);
    let mut command = lease(dir.path());
    command.args([
        "run",
        "--dynamo",
        "leases",
        "--endpoint",
        &endpoint,
        "--recreation-grace",
        "0s",
        "--key",
        "k",
        "--wait",
        "0",
        "--",
        "sh",
        "-c",
        "exit 3",
    ]);
    let (output, took) = timed(&mut command);
    let text = stderr(&output);
    assert_eq!(output.status.code(), Some(3), "{text}");
    assert!(
        took < RELEASE_BUDGET + Duration::from_secs(1),
        "took {took:?}: {text}"
    );
    assert!(
        text.contains("could not release lease k within 2s"),
        "{text}"
    );
}

/// Issue 23: with instance metadata disabled (403) and no other credentials, `lease run` waited
/// its whole `--wait` silently and exited without the credentials help.
#[test]
fn no_credentials_behind_a_forbidden_metadata_endpoint_fail_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = tempfile::tempdir().expect("home");
    let metadata = serve(usize::MAX, forbidden);
    let dynamo = serve(0, never);
    let mut command = Command::new(env!("CARGO_BIN_EXE_lease"));
    for name in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_DEFAULT_PROFILE",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_ROLE_ARN",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_EC2_METADATA_DISABLED",
        "LEASE_LOG",
    ] {
        command.env_remove(name);
    }
    command
        .env("LEASE_DIR", dir.path())
        .env("HOME", home.path())
        .env("AWS_CONFIG_FILE", home.path().join("missing-config"))
        .env(
            "AWS_SHARED_CREDENTIALS_FILE",
            home.path().join("missing-credentials"),
        )
        .env("AWS_EC2_METADATA_SERVICE_ENDPOINT", &metadata)
        .env("AWS_REGION", "us-east-1")
        .args(run_args(&dynamo, "1m"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let (output, took) = timed(&mut command);
    let text = stderr(&output);
    assert_eq!(output.status.code(), Some(69), "{text}");
    assert!(took < Duration::from_secs(1), "took {took:?}: {text}");
    assert!(text.contains("no AWS credentials found"), "{text}");
    assert!(text.contains("set AWS_ACCESS_KEY_ID"), "{text}");
}

/// A cold endpoint: the control plane answers slowly (DynamoDB Local starting its JVM).
fn cold_control_plane(_: usize, head: &str) -> (u16, String) {
    let target = head.to_ascii_lowercase();
    if target.contains("createtable") {
        std::thread::sleep(Duration::from_millis(2500));
        return (200, format!(r#"{{"TableDescription":{}}}"#, TABLE));
    }
    if target.contains("describetable") {
        return (200, format!(r#"{{"Table":{}}}"#, TABLE));
    }
    (
        200,
        r#"{"TimeToLiveSpecification":{"Enabled":true,"AttributeName":"ttl"}}"#.to_owned(),
    )
}

const TABLE: &str = r#"{"TableName":"leases","TableStatus":"ACTIVE","CreationDateTime":1.7E9,"KeySchema":[{"AttributeName":"pk","KeyType":"HASH"},{"AttributeName":"sk","KeyType":"RANGE"}],"AttributeDefinitions":[{"AttributeName":"pk","AttributeType":"S"},{"AttributeName":"sk","AttributeType":"S"}]}"#;

/// Issue 23: the first `lease table create` on a cold endpoint failed after 2 s (the lease
/// requests' attempt timeout) although the table was created.
#[test]
fn table_create_waits_for_a_slow_control_plane() {
    let dir = tempfile::tempdir().expect("tempdir");
    let endpoint = serve(usize::MAX, cold_control_plane);
    let (output, took) = timed(lease(dir.path()).args([
        "table",
        "create",
        "--dynamo",
        "leases",
        "--endpoint",
        &endpoint,
    ]));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(took < Duration::from_secs(10), "took {took:?}");
}

/// A loopback port nothing listens on: connections are refused.
fn refused_port() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    drop(listener);
    url
}

/// Issue 37 item 6: `lease status` took 10 s against an endpoint that never answers; it gives
/// up at its `--timeout` (5 s by default) with exit 69, and so does a refused port.
#[test]
fn status_gives_up_at_its_timeout() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (what, endpoint) in [("silent", serve(0, never)), ("refused", refused_port())] {
        let (output, took) = timed(lease(dir.path()).args([
            "status",
            "--dynamo",
            "leases",
            "--endpoint",
            &endpoint,
            "--key",
            "k",
        ]));
        eprintln!("status against a {what} endpoint: {took:?}");
        assert_eq!(
            output.status.code(),
            Some(69),
            "{what}: {}",
            stderr(&output)
        );
        assert!(
            took < Duration::from_secs(5) + Duration::from_millis(500),
            "{what}: took {took:?}"
        );
    }
}

/// Issue 37 item 6: `lease table create` took 150 s against an endpoint that never answers; a
/// first read that gets no answer within 10 s fails it at once (exit 69), naming the endpoint.
#[test]
fn table_create_reports_a_silent_endpoint_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let endpoint = serve(0, never);
    let mut child = lease(dir.path())
        .args([
            "table",
            "create",
            "--dynamo",
            "leases",
            "--endpoint",
            &endpoint,
        ])
        .spawn()
        .expect("lease runs");
    let started = Instant::now();
    let limit = Duration::from_secs(20);
    while child.try_wait().expect("try_wait").is_none() && started.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = started.elapsed();
    let _ = child.kill();
    let output = child.wait_with_output().expect("output");
    eprintln!("table create against a silent endpoint: {took:?}");
    assert_eq!(
        output.status.code(),
        Some(69),
        "after {took:?}: {}",
        stderr(&output)
    );
    assert!(took < Duration::from_secs(11), "took {took:?}");
    assert!(stderr(&output).contains(&endpoint), "{}", stderr(&output));
}

/// Issue 37 item 6: `lease watch` printed nothing at all, forever, against an endpoint that
/// never answers or a refused port. It says on stderr within seconds that the store cannot be
/// reached (its `--timeout` plus a 2 s read), and goes on watching.
#[test]
fn watch_says_when_the_store_cannot_be_reached() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (what, endpoint) in [("silent", serve(0, never)), ("refused", refused_port())] {
        let mut child = lease(dir.path())
            .args([
                "watch",
                "--dynamo",
                "leases",
                "--endpoint",
                &endpoint,
                "--key",
                "k",
            ])
            .spawn()
            .expect("lease watch starts");
        let stderr_pipe = child.stderr.take().expect("piped");
        let (send, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr_pipe).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        let started = Instant::now();
        let said = lines.recv_timeout(Duration::from_secs(12));
        let took = started.elapsed();
        let _ = child.kill();
        let _ = child.wait();
        eprintln!("watch against a {what} endpoint said {said:?} after {took:?}");
        let said = said.unwrap_or_else(|_| panic!("{what}: nothing said in {took:?}"));
        assert!(said.contains("cannot reach"), "{what}: {said}");
        assert!(took < Duration::from_secs(8), "{what}: took {took:?}");
    }
}
