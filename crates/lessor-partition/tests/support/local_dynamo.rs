//! A DynamoDB Local of a test's own, in memory, that the test can kill and start again: the
//! same server as `lease-cli/tests/dynamo_restart.rs` runs (the jar `cargo xtask dynamo` caches
//! in `target/dynamodb-local/`, or the folder in `LEASE_DYNAMO_JAR_DIR`).

use std::fs::File;
use std::io::Write as _;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Runs the JVM (`"$@"`) and stops it when the test's end of the pipe on stdin closes, so a test
/// killed outright leaves no server behind (xtask's supervisor).
const SUPERVISOR: &str = r#"exec 3<&0; "$@" </dev/null & jvm=$!; (cat <&3 >/dev/null; kill -9 $jvm 2>/dev/null) & wait $jvm"#;

/// How long DynamoDB Local may take to answer after it was started.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

fn skip(reason: &str) -> Option<PathBuf> {
    assert!(
        std::env::var("LEASE_REQUIRE_DYNAMO").as_deref() != Ok("1"),
        "LEASE_REQUIRE_DYNAMO=1 but {reason}"
    );
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: lessor-partition dynamo_store_loss restart ({reason})"
    );
    None
}

/// The folder holding `DynamoDBLocal.jar` and `DynamoDBLocal_lib/`, if it and `java` are there.
pub(crate) fn jar_dir() -> Option<PathBuf> {
    let named = std::env::var_os("LEASE_DYNAMO_JAR_DIR");
    if named.as_ref().is_some_and(|dir| dir.is_empty()) {
        return skip("LEASE_DYNAMO_JAR_DIR is empty: no DynamoDB Local jar");
    }
    let dir = named.map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/dynamodb-local"),
        PathBuf::from,
    );
    if !dir.join("DynamoDBLocal.jar").is_file() || !dir.join("DynamoDBLocal_lib").is_dir() {
        return skip(&format!(
            "no DynamoDB Local jar in {}: run `cargo xtask dynamo` once, or set \
             LEASE_DYNAMO_JAR_DIR",
            dir.display()
        ));
    }
    let java = Command::new("java")
        .arg("-version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !java.is_ok_and(|status| status.success()) {
        return skip("`java -version` did not run");
    }
    Some(dir)
}

/// DynamoDB Local in memory on one loopback port, in a process group of its own; killed as a
/// whole on [`LocalDynamo::restart`] and on drop.
pub(crate) struct LocalDynamo {
    jar_dir: PathBuf,
    port: u16,
    log: PathBuf,
    child: Option<Child>,
}

impl LocalDynamo {
    pub(crate) fn start(jar_dir: PathBuf, log: PathBuf) -> Self {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|listener| listener.local_addr())
            .expect("a free loopback port")
            .port();
        let mut server = Self {
            jar_dir,
            port,
            log,
            child: None,
        };
        server.launch();
        server
    }

    pub(crate) fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn launch(&mut self) {
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("server log");
        let mut command = Command::new("sh");
        command
            .args(["-c", SUPERVISOR, "supervisor", "java"])
            .args(["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"])
            .arg("-Djava.library.path=DynamoDBLocal_lib")
            .args([
                "-jar",
                "DynamoDBLocal.jar",
                "-disableTelemetry",
                "-inMemory",
            ])
            .args(["-port", &self.port.to_string()])
            .current_dir(&self.jar_dir)
            .stdin(Stdio::piped())
            .stdout(log.try_clone().expect("server log"))
            .stderr(log);
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        self.child = Some(command.spawn().expect("sh starts DynamoDB Local"));
    }

    /// SIGKILL to the server's whole process group, as a crash of its host would.
    fn crash(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .stdin(Stdio::null())
                .stderr(Stdio::null())
                .status();
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server and starts a new, empty one on the same port.
    pub(crate) fn restart(&mut self) {
        self.crash();
        self.launch();
    }
}

impl Drop for LocalDynamo {
    fn drop(&mut self) {
        self.crash();
    }
}

/// Returns once the server at `endpoint` answers `ListTables`.
pub(crate) async fn wait_until_answers(endpoint: &str) {
    let client = lease_dynamo::client_for_endpoint(endpoint).await;
    let until = Instant::now() + READY_TIMEOUT;
    loop {
        let answered =
            tokio::time::timeout(Duration::from_secs(2), client.list_tables().send()).await;
        if matches!(answered, Ok(Ok(_))) {
            return;
        }
        assert!(
            Instant::now() < until,
            "DynamoDB Local did not answer within {READY_TIMEOUT:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
