//! DynamoDB Local killed (SIGKILL) and restarted in memory under a running `lease run`: the table
//! and every item in it are gone at once. An operator recreates the table and a second
//! `lease run` waits for the same key; a checker on the two commands' claims shows the second
//! command never starts while the first still runs (the recreation grace, default the --ttl,
//! holds the new table's keys until the old holder has stopped at its deadline).
//!
//! The test runs its own DynamoDB Local on a free loopback port, from the jar that
//! `cargo xtask dynamo` (or `cargo xtask test`) caches in `target/dynamodb-local/`, or from the
//! folder in `LEASE_DYNAMO_JAR_DIR` (set by xtask; empty when its run has no jar, and then this
//! test skips). Without the jar or `java` it skips with the reason printed, unless
//! `LEASE_REQUIRE_DYNAMO=1`. Its server is
//! killed on every path (a `Drop` guard, and the server's watcher ends it when this process
//! dies).
//!
//! Rounds: 2 by default, 20 with `LEASE_LONG=1`; one server restart each, and the restarted
//! server carries the next round. In the first round the table is recreated only after the old
//! holder stopped: renewing against the restarted server, it must learn at once that its lease
//! is gone, not trust it until its deadline.

use std::fs::File;
use std::io::Write;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The lease of the holders that contend with a recreated table; the recreation grace defaults
/// to it.
const TTL: Duration = Duration::from_secs(3);
/// The lease of the first holder, long enough that it renews against the restarted server
/// before its deadline: it must learn there that its lease is gone (the table is).
const FIRST_TTL: Duration = Duration::from_secs(10);
/// How long DynamoDB Local may take to answer after it was started (the JVM needs ~2 s).
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Runs the JVM (`"$@"`) and stops it when this test's end of the pipe on stdin closes, so
/// that a test killed outright (where no `Drop` runs) leaves no server behind. The same
/// supervisor as xtask's (`xtask/src/dynamo_local.rs`).
const SUPERVISOR: &str = r#"exec 3<&0; "$@" </dev/null & jvm=$!; (cat <&3 >/dev/null; kill -9 $jvm 2>/dev/null) & wait $jvm"#;

fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Skips (returns `None`, reason printed) or, under `LEASE_REQUIRE_DYNAMO=1`, fails.
fn skip(reason: &str) -> Option<PathBuf> {
    assert!(
        std::env::var("LEASE_REQUIRE_DYNAMO").as_deref() != Ok("1"),
        "LEASE_REQUIRE_DYNAMO=1 but {reason}"
    );
    say(&format!("SKIPPED: lease-cli dynamo_restart ({reason})"));
    None
}

/// The folder holding `DynamoDBLocal.jar` and `DynamoDBLocal_lib/`, if it and `java` are there.
fn jar_dir() -> Option<PathBuf> {
    let named = std::env::var_os("LEASE_DYNAMO_JAR_DIR");
    if named.as_ref().is_some_and(|dir| dir.is_empty()) {
        // xtask's way of saying that this run has DynamoDB (in Docker, say) but no jar.
        say(
            "SKIPPED: lease-cli dynamo_restart (LEASE_DYNAMO_JAR_DIR is empty: no DynamoDB Local jar)",
        );
        return None;
    }
    let dir = named.map_or_else(
        || {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../target/dynamodb-local")
                .to_path_buf()
        },
        PathBuf::from,
    );
    if !dir.join("DynamoDBLocal.jar").is_file() || !dir.join("DynamoDBLocal_lib").is_dir() {
        return skip(&format!(
            "no DynamoDB Local jar in {}: run `cargo xtask dynamo` once to cache it, or set \
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
        return skip("`java -version` did not run: DynamoDB Local needs a Java runtime");
    }
    Some(dir)
}

/// DynamoDB Local in memory on one loopback port, in a process group of its own; SIGKILLed as
/// a whole on [`LocalDynamo::crash`] and on drop (also when the test panics).
struct LocalDynamo {
    jar_dir: PathBuf,
    port: u16,
    log: PathBuf,
    child: Option<Child>,
}

impl LocalDynamo {
    fn start(jar_dir: PathBuf, log: PathBuf) -> Self {
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

    fn endpoint(&self) -> String {
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
            // The JVM's quick start-up (C1 only, serial GC): about half the time to answer.
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
            if let Ok(pid) = i32::try_from(child.id()) {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn restart(&mut self) {
        self.crash();
        self.launch();
    }

    /// Returns once the server answers `ListTables`.
    fn wait_until_ready(&mut self, runtime: &tokio::runtime::Runtime) {
        // The credentials are DynamoDB Local's dummies, whatever this process's environment says.
        let config = aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
            .endpoint_url(self.endpoint())
            .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
                "local", "local", None, None, "test",
            ))
            .build();
        let client = aws_sdk_dynamodb::Client::from_conf(config);
        let until = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|child| child.try_wait().ok().flatten())
            {
                panic!(
                    "DynamoDB Local exited during start-up ({status}); log:\n{}",
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                );
            }
            let answered = runtime.block_on(async {
                tokio::time::timeout(Duration::from_secs(2), client.list_tables().send()).await
            });
            if matches!(answered, Ok(Ok(_))) {
                return;
            }
            assert!(
                Instant::now() < until,
                "DynamoDB Local did not answer within {READY_TIMEOUT:?}; log:\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for LocalDynamo {
    fn drop(&mut self) {
        self.crash();
    }
}

fn lease(dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lease"));
    command
        .env("LEASE_DIR", dir)
        .env_remove("LEASE_LOG")
        .env("AWS_ACCESS_KEY_ID", "local")
        .env("AWS_SECRET_ACCESS_KEY", "local")
        .env("AWS_REGION", "us-east-1")
        .stdin(Stdio::null());
    command
}

fn unix_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

fn create_table(dir: &Path, table: &str, endpoint: &str) {
    let out = lease(dir)
        .args(["table", "create", "--dynamo", table, "--endpoint", endpoint])
        .output()
        .expect("lease table create");
    assert!(
        out.status.success(),
        "lease table create: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A `lease run` whose command appends `start NAME <ns>` to `claims`, sleeps, and appends
/// `end NAME <ns>` when it is told to stop (SIGTERM).
struct Holder {
    name: String,
    lease: Child,
    stderr: PathBuf,
}

impl Holder {
    fn spawn(
        dir: &Path,
        table: &str,
        endpoint: &str,
        name: &str,
        claims: &Path,
        lease_args: &[&str],
    ) -> Self {
        let claims = claims.display();
        let script = format!(
            "echo \"start {name} $(date +%s%N)\" >> {claims}; \
             trap 'echo \"end {name} $(date +%s%N)\" >> {claims}; kill $pid 2>/dev/null; exit 143' TERM; \
             sleep 60 & pid=$!; wait $pid"
        );
        let stderr = dir.join(format!("{name}.stderr"));
        let lease = lease(dir)
            .args([
                "run",
                "--dynamo",
                table,
                "--endpoint",
                endpoint,
                "--key",
                "k",
            ])
            .args(["--wait", "30s"])
            .args(lease_args)
            .args(["--", "sh", "-c", &script])
            .stdout(Stdio::null())
            .stderr(File::create(&stderr).expect("stderr file"))
            .spawn()
            .expect("lease starts");
        Self {
            name: name.to_owned(),
            lease,
            stderr,
        }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.lease.kill();
        let _ = self.lease.wait();
    }
}

/// When `name`'s command made the claim `what` (`start` or `end`), from the claims file.
fn claim(claims: &Path, what: &str, name: &str) -> Option<u128> {
    let text = std::fs::read_to_string(claims).ok()?;
    let prefix = format!("{what} {name} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix)?.trim().parse().ok())
}

fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let until = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < until, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_restarted_dynamodb_local_never_grants_a_lease_while_its_old_holder_runs() {
    let Some(jar_dir) = jar_dir() else { return };
    let rounds = if std::env::var("LEASE_LONG").as_deref() == Ok("1") {
        20
    } else {
        2
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = LocalDynamo::start(jar_dir, dir.path().join("dynamodb-local.log"));
    server.wait_until_ready(&runtime);
    let endpoint = server.endpoint();
    let table = "restart";
    let claims = dir.path().join("claims");
    let mut jitter = unix_nanos() as u64 | 1;

    create_table(dir.path(), table, &endpoint);
    // The fresh table replaced none: its first holder need not wait.
    let first_ttl = format!("{}s", FIRST_TTL.as_secs());
    let first_args = ["--ttl", &first_ttl, "--recreation-grace", "0"];
    let mut first = Holder::spawn(dir.path(), table, &endpoint, "h0", &claims, &first_args);
    wait_for("the first command starts", Duration::from_secs(20), || {
        claim(&claims, "start", "h0").is_some()
    });
    for round in 1..=rounds {
        // The server dies at a random moment of the holder's renewal cycle (every --ttl/3).
        jitter ^= jitter << 13;
        jitter ^= jitter >> 7;
        jitter ^= jitter << 17;
        std::thread::sleep(Duration::from_millis(jitter % 1000));
        let crashed = Instant::now();
        let crashed_at = unix_nanos();
        server.restart();
        server.wait_until_ready(&runtime);
        let restarted = crashed.elapsed();
        // Round 1: the operator recreates the table only after the old holder has stopped,
        // which it must do at its first renewal against the restarted server, not at its
        // deadline. Later rounds: recreated at once, a new holder waiting.
        let late = round == 1;
        let ttl = if late { FIRST_TTL } else { TTL };
        let mut first_exit = None;
        let mut first_exited = |first: &mut Holder| {
            if let Some(status) = first.lease.try_wait().expect("try_wait") {
                first_exit = Some((unix_nanos(), status));
            }
            first_exit.is_some()
        };
        if late {
            wait_for("the old lease run exits", Duration::from_secs(20), || {
                first_exited(&mut first)
            });
            let said = first.stderr();
            assert!(
                said.contains("lease lost") && !said.contains("could not be renewed"),
                "round {round}: {} renewed against a server without its table and did not \
                 learn that its lease is gone: {said}",
                first.name
            );
        }
        create_table(dir.path(), table, &endpoint);
        let name = format!("h{round}");
        let ttl_arg = format!("{}s", TTL.as_secs());
        let second = Holder::spawn(
            dir.path(),
            table,
            &endpoint,
            &name,
            &claims,
            &["--ttl", &ttl_arg],
        );

        // The old `lease run` exits once it has stopped its command (at its deadline at the
        // latest: one --ttl after its last renewal, which was before the crash).
        wait_for("the old lease run exits", Duration::from_secs(20), || {
            first_exited(&mut first)
        });
        let (first_exit, status) = first_exit.expect("exited");
        wait_for("the new command starts", Duration::from_secs(30), || {
            claim(&claims, "start", &name).is_some()
        });
        let second_start = claim(&claims, "start", &name).expect("started");
        let first_end = claim(&claims, "end", &first.name);
        let ms = |nanos: u128| nanos / 1_000_000;
        say(&format!(
            "round {round}: server back after {} ms; {} exited {status} {} ms after the crash \
             (its command ended at +{} ms), {name} started at +{} ms; {} said: {}",
            restarted.as_millis(),
            first.name,
            ms(first_exit.saturating_sub(crashed_at)),
            first_end.map_or("?".to_owned(), |end| ms(end.saturating_sub(crashed_at))
                .to_string()),
            ms(second_start.saturating_sub(crashed_at)),
            first.name,
            first.stderr().trim().replace('\n', " | "),
        ));
        assert!(
            second_start > first_exit,
            "round {round}: {name}'s command started {} ms before {}'s lease run exited: \
             two holders at once",
            ms(first_exit - second_start),
            first.name,
        );
        if let Some(end) = first_end {
            assert!(
                second_start > end,
                "round {round}: {name} started before {} ended",
                first.name
            );
            // Its last renewal was before the crash, so its deadline was at most one --ttl
            // after it; the command is told to stop then (slack for a loaded machine).
            let bound = crashed_at + ttl.as_nanos() + Duration::from_secs(1).as_nanos();
            assert!(
                end <= bound,
                "round {round}: {}'s command ended {} ms after the crash, later than one --ttl \
                 (its deadline at the latest) plus 1 s",
                first.name,
                ms(end - crashed_at),
            );
        } else {
            panic!(
                "round {round}: {}'s command recorded no end (not stopped by SIGTERM?); \
                 lease said: {}",
                first.name,
                first.stderr()
            );
        }
        first = second;
    }
    drop(first);
    drop(server);
}
