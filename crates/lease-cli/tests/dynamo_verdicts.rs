//! One verdict for a DynamoDB record (issue 37, item 7): an item that every acquisition refuses
//! is corrupt to `lease status` (text and `--json`), `lease watch` and `lease run --wait 0`
//! alike, and never free. Before, a holder token that is a number read free to status and watch
//! while run said held, and a negative, fractional or too large counter read free to watch.
//! Needs `LEASE_DYNAMO_ENDPOINT`; skipped visibly without it.

mod support;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::types::AttributeValue::{self, N, S};

/// `lease`'s exit status for a corrupt record.
const CORRUPT: i32 = 65;

fn lease(dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lease"));
    command
        .env("LEASE_DIR", dir)
        .env_remove("LEASE_LOG")
        .env("AWS_ACCESS_KEY_ID", "local")
        .env("AWS_SECRET_ACCESS_KEY", "local")
        .stdin(Stdio::null());
    command
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        support::stderr(output)
    )
}

/// `lease watch` for at most `limit`: its output, and its exit status (`None`: still running,
/// then killed).
fn watch(command: &mut Command, limit: Duration) -> (String, Option<i32>) {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("lease watch starts");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status.code();
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let output = child.wait_with_output().expect("output");
    (text(&output), status)
}

#[test]
fn a_corrupt_record_is_corrupt_to_every_command() {
    let Some(endpoint) = support::dynamo_endpoint("a_corrupt_record_is_corrupt_to_every_command")
    else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let table = format!(
        "verdicts-{}-{}",
        std::process::id(),
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
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
    assert_eq!(created.status.code(), Some(0), "{}", text(&created));

    let later = (SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs()
        + 600)
        .to_string();
    let cases: Vec<(&str, Vec<(&str, AttributeValue)>)> = vec![
        (
            "number-token",
            vec![
                ("lease_token", N("42".into())),
                ("lease_expires_at", N(later)),
            ],
        ),
        ("negative", vec![("lease_fence", N("-5".into()))]),
        ("fraction", vec![("lease_fence", N("1.5".into()))]),
        (
            "too-large",
            vec![("lease_fence", N("18446744073709551615".into()))],
        ),
    ];
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let client = runtime.block_on(lease_dynamo::client_for_endpoint(&endpoint));
    for (pk, attributes) in &cases {
        let mut put = client
            .put_item()
            .table_name(&table)
            .item("pk", S((*pk).into()))
            .item("sk", S("LOCK".into()));
        for (name, value) in attributes {
            put = put.item(*name, value.clone());
        }
        runtime.block_on(put.send()).expect("planted");
    }

    let backend = ["--dynamo", table.as_str(), "--endpoint", endpoint.as_str()];
    let mut verdicts = Vec::new();
    for (pk, attributes) in &cases {
        let status = lease(dir.path())
            .arg("status")
            .args(backend)
            .args(["--key", pk])
            .output()
            .expect("lease status");
        let json = lease(dir.path())
            .arg("status")
            .args(backend)
            .args(["--key", pk, "--json"])
            .output()
            .expect("lease status --json");
        let run = lease(dir.path())
            .arg("run")
            .args(backend)
            .args([
                "--key",
                pk,
                "--wait",
                "0",
                "--recreation-grace",
                "0",
                "--",
                "true",
            ])
            .output()
            .expect("lease run");
        let (watched, watch_status) = watch(
            lease(dir.path()).arg("watch").args(backend).args([
                "--key",
                pk,
                "--poll-interval",
                "200ms",
            ]),
            Duration::from_secs(10),
        );
        verdicts.push(format!(
            "{pk}: status {:?}, json {:?}, run {:?}, watch {watch_status:?} {:?}",
            status.status.code(),
            String::from_utf8_lossy(&json.stdout).trim(),
            run.status.code(),
            watched.lines().next().unwrap_or(""),
        ));
        assert_eq!(
            status.status.code(),
            Some(CORRUPT),
            "{pk}: {}",
            text(&status)
        );
        assert!(text(&status).contains("corrupt"), "{pk}: {}", text(&status));
        assert!(
            String::from_utf8_lossy(&json.stdout).contains("\"state\":\"corrupt\""),
            "{pk}: {}",
            text(&json)
        );
        assert_eq!(run.status.code(), Some(CORRUPT), "{pk}: {}", text(&run));
        assert!(
            !watched.contains("free"),
            "{pk}: watch said free: {watched}"
        );
        assert_eq!(watch_status, Some(CORRUPT), "{pk}: watch: {watched}");
        // Nothing was taken over or changed, a fractional counter included.
        let item = runtime
            .block_on(
                client
                    .get_item()
                    .table_name(&table)
                    .key("pk", S((*pk).into()))
                    .key("sk", S("LOCK".into()))
                    .consistent_read(true)
                    .send(),
            )
            .expect("read back")
            .item
            .unwrap_or_default();
        for (name, value) in attributes {
            assert_eq!(item.get(*name), Some(value), "{pk}: {item:?}");
        }
    }
    eprintln!("{}", verdicts.join("\n"));
    let _ = runtime.block_on(client.delete_table().table_name(&table).send());
}
