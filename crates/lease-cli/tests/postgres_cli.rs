//! `lease` on PostgreSQL (`--postgres URL`, or `LEASE_POSTGRES_URL`), against the real server in
//! `LEASE_POSTGRES_URL`: skipped visibly without it, unless `LEASE_REQUIRE_POSTGRES=1`. Each test
//! makes its own table with `lease table create`, so they run in parallel on one server. The URL
//! is given a password (a marker the trusting test server ignores, or its own), which no output
//! of any command may contain.

mod support;

use std::io::{BufRead as _, BufReader};
use std::net::{Ipv4Addr, TcpListener};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use support::{postgres_url, stderr, unique_name, unix_nanos, wait_for, with_secret};

const HELD: i32 = 75;
const LOST: i32 = 76;
const USAGE: i32 = 64;
const UNAVAILABLE: i32 = 69;

/// A database, a table in it, and the password that must never be printed.
struct Pg {
    url: String,
    secret: String,
    table: String,
    dir: tempfile::TempDir,
}

impl Pg {
    /// The server of `LEASE_POSTGRES_URL` with a fresh table made by `lease table create`, or
    /// `None` (skipped).
    fn new(test: &str) -> Option<Self> {
        let url = postgres_url(test)?;
        let (url, secret) = with_secret(&url);
        let pg = Self {
            url,
            secret,
            table: unique_name("cli"),
            dir: tempfile::tempdir().expect("tempdir"),
        };
        let created = pg.output(pg.lease().args(["table", "create", "--table", &pg.table]));
        assert_eq!(code(&created), 0, "table create: {}", text(&created));
        assert_eq!(
            String::from_utf8_lossy(&created.stdout).trim(),
            format!("table {} is ready", pg.table)
        );
        Some(pg)
    }

    /// `lease` with the URL in `LEASE_POSTGRES_URL` (the way to keep a password out of the
    /// process list), a private file store that must stay unused, and quiet logs.
    fn lease(&self) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_lease"));
        command
            .env("LEASE_DIR", self.dir.path())
            .env("LEASE_POSTGRES_URL", &self.url)
            .env_remove("LEASE_REDIS_URL")
            .env_remove("LEASE_LOG")
            .stdin(Stdio::null());
        command
    }

    /// `lease SUBCOMMAND --table T ...` on this test's table.
    fn on_table(&self, subcommand: &str) -> Command {
        let mut command = self.lease();
        command.args([subcommand, "--table", &self.table]);
        command
    }

    /// `lease run --recreation-grace 0` on this test's table: the table is new, no holder of a
    /// table it replaced can run (`a_fresh_table_grants_after_one_ttl` shows the default).
    fn run(&self) -> Command {
        let mut command = self.on_table("run");
        command.args(["--recreation-grace", "0"]);
        command
    }

    /// Runs `command` to its end; fails if any output holds the password.
    fn output(&self, command: &mut Command) -> Output {
        let out = command.output().expect("lease runs");
        self.assert_secret_kept(&text(&out));
        out
    }

    fn assert_secret_kept(&self, said: &str) {
        assert!(
            !said.contains(&self.secret),
            "the password was printed: {said}"
        );
    }

    /// `lease status --key KEY --json` on this table, as JSON text.
    fn status_json(&self, key: &str) -> String {
        let out = self.output(self.on_table("status").args(["--key", key, "--json"]));
        assert_eq!(code(&out), 0, "status: {}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn wait_until_held(&self, key: &str) -> String {
        let mut seen = String::new();
        wait_for("the lease is held", Duration::from_secs(10), || {
            seen = self.status_json(key);
            seen.contains(r#""state":"held""#)
        });
        seen
    }
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(out))
}

fn spawn(command: &mut Command) -> Child {
    command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("lease starts")
}

/// Five `lease run --wait 0` started at once on one key: exactly one runs its command, the
/// other four exit 75 naming the holder.
#[test]
fn five_contenders_exactly_one_runs() {
    let Some(pg) = Pg::new("five_contenders_exactly_one_runs") else {
        return;
    };
    let ran = pg.dir.path().join("ran");
    let script = format!("echo x >> {}; sleep 2", ran.display());
    let contenders: Vec<Child> = (0..5)
        .map(|_| {
            spawn(pg.run().args([
                "--key", "five", "--ttl", "5s", "--wait", "0", "--", "sh", "-c", &script,
            ]))
        })
        .collect();
    let outputs: Vec<Output> = contenders
        .into_iter()
        .map(|child| child.wait_with_output().expect("lease ends"))
        .collect();
    for out in &outputs {
        pg.assert_secret_kept(&text(out));
    }
    let codes: Vec<i32> = outputs.iter().map(code).collect();
    assert_eq!(
        codes.iter().filter(|c| **c == 0).count(),
        1,
        "exactly one runs: {codes:?}"
    );
    assert_eq!(
        codes.iter().filter(|c| **c == HELD).count(),
        4,
        "the others are refused as held: {codes:?}"
    );
    // The holder is named (`held by pid N on host H`), or, for a contender whose statement
    // raced the winner's insert, `held by another owner`.
    for out in outputs.iter().filter(|out| code(out) == HELD) {
        assert!(
            stderr(out).contains("lease five is held by"),
            "{}",
            stderr(out)
        );
    }
    let lines = std::fs::read_to_string(&ran).expect("the command ran");
    assert_eq!(lines.lines().count(), 1, "commands run: {lines:?}");
}

/// Successive holders of one key get strictly increasing fencing tokens, whatever happened in
/// between (a release, a lease left to expire, an operator's break); `--value` reaches the
/// command and `lease status`; `--holders 2` lets two run and refuses a third.
#[test]
fn tokens_increase_values_publish_and_slots_count() {
    let Some(pg) = Pg::new("tokens_increase_values_publish_and_slots_count") else {
        return;
    };
    let token = |args: &[&str]| -> u64 {
        let out = pg.output(pg.run().args(["--key", "seq", "--ttl", "1s"]).args(args));
        assert_eq!(code(&out), 0, "{}", text(&out));
        let printed = String::from_utf8_lossy(&out.stdout);
        printed
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("a token: {printed:?}"))
    };
    let echo = ["--", "sh", "-c", "echo $LEASE_FENCING_TOKEN"];
    let mut tokens = vec![token(&echo), token(&echo)];
    // Killed without a release: the next holder takes the expired lease (--ttl 1s).
    let abandoned = spawn(
        pg.run()
            .args(["--key", "seq", "--ttl", "1s", "--", "sleep", "30"]),
    );
    let seen = pg.wait_until_held("seq");
    let abandoned_token: u64 = json_number(&seen, "fencing").expect("a fencing token");
    kill9(abandoned);
    tokens.push(abandoned_token);
    tokens.push(token(&[
        "--wait",
        "10s",
        "--",
        "sh",
        "-c",
        "echo $LEASE_FENCING_TOKEN",
    ]));
    assert!(
        tokens.windows(2).all(|pair| pair[0] < pair[1]),
        "tokens must increase: {tokens:?}"
    );

    // --value: in the command's environment and in the record while it runs.
    let said = pg.dir.path().join("said");
    let holder = spawn(pg.run().args([
        "--key",
        "leader",
        "--value",
        "10.0.0.7:5432",
        "--",
        "sh",
        "-c",
        &format!("echo value $LEASE_VALUE >> {}; sleep 30", said.display()),
    ]));
    let seen = pg.wait_until_held("leader");
    assert!(seen.contains(r#""value":"10.0.0.7:5432""#), "{seen}");
    wait_for_lines(&said, 1);
    kill9(holder);

    // --holders 2: two run at once in slots 0 and 1, a third is refused.
    let slots: Vec<Child> = (0..2)
        .map(|_| {
            spawn(pg.run().args([
                "--key",
                "pool",
                "--holders",
                "2",
                "--wait",
                "5s",
                "--",
                "sh",
                "-c",
                &format!("echo slot $LEASE_SLOT >> {}; sleep 30", said.display()),
            ]))
        })
        .collect();
    wait_for("both slots are held", Duration::from_secs(10), || {
        let out = pg.output(
            pg.on_table("status")
                .args(["--key", "pool", "--holders", "2"]),
        );
        String::from_utf8_lossy(&out.stdout).contains("2 of 2 slots held")
    });
    let third = pg.output(pg.run().args([
        "--key",
        "pool",
        "--holders",
        "2",
        "--wait",
        "0",
        "--",
        "true",
    ]));
    assert_eq!(code(&third), HELD, "{}", text(&third));
    wait_for_lines(&said, 3);
    for child in slots {
        kill9(child);
    }
    let mut lines: Vec<String> = std::fs::read_to_string(&said)
        .expect("said")
        .lines()
        .map(str::to_owned)
        .collect();
    lines.sort();
    assert_eq!(lines, ["slot 0", "slot 1", "value 10.0.0.7:5432"]);
}

/// Waits until `file` has `count` whole lines.
fn wait_for_lines(file: &std::path::Path, count: usize) {
    wait_for("the commands run", Duration::from_secs(10), || {
        std::fs::read_to_string(file)
            .is_ok_and(|text| text.ends_with('\n') && text.lines().count() >= count)
    });
}

/// `lease run` sets the recreation grace to its --ttl, as on DynamoDB: a table nobody has used
/// yet may have replaced one whose holders still run (a drop and `lease table create`), so its
/// first grant waits one --ttl, with the reason said; `--wait 0` is refused as held.
#[test]
fn a_fresh_table_grants_after_one_ttl() {
    let Some(pg) = Pg::new("a_fresh_table_grants_after_one_ttl") else {
        return;
    };
    let refused = pg.output(
        pg.on_table("run")
            .args(["--key", "k", "--ttl", "1s", "--wait", "0", "--", "true"]),
    );
    assert_eq!(code(&refused), HELD, "{}", text(&refused));
    assert!(
        stderr(&refused).contains("new incarnation"),
        "{}",
        text(&refused)
    );
    let started = Instant::now();
    let waited = pg.output(
        pg.on_table("run")
            .args(["--key", "k", "--ttl", "1s", "--wait", "5s", "--", "true"]),
    );
    let took = started.elapsed();
    assert_eq!(code(&waited), 0, "{}", text(&waited));
    eprintln!("a fresh table: first grant after {took:?} (--ttl 1s)");
    assert!(took < Duration::from_secs(3), "{took:?}");
}

/// A holder killed with SIGKILL (its guard kills the command) is taken over by a waiting
/// contender within the holder's --ttl: the lease ends one --ttl after its last renewal at the
/// latest, and the contender acquires it then.
#[test]
fn a_sigkilled_holder_is_taken_over_within_its_ttl() {
    let Some(pg) = Pg::new("a_sigkilled_holder_is_taken_over_within_its_ttl") else {
        return;
    };
    const TTL: Duration = Duration::from_secs(2);
    let holder = spawn(
        pg.run()
            .args(["--key", "crash", "--ttl", "2s", "--", "sleep", "30"]),
    );
    pg.wait_until_held("crash");
    let started = pg.dir.path().join("started");
    let contender = spawn(pg.run().args([
        "--key",
        "crash",
        "--ttl",
        "2s",
        "--wait",
        "10s",
        "--",
        "sh",
        "-c",
        &format!("date +%s%N > {}", started.display()),
    ]));
    // Let the contender start waiting, then kill the holder at a random point of its renewals.
    std::thread::sleep(Duration::from_millis(
        300 + u64::from(std::process::id() % 600),
    ));
    let killed_at = unix_nanos();
    kill9(holder);
    let out = contender.wait_with_output().expect("the contender ends");
    pg.assert_secret_kept(&text(&out));
    assert_eq!(code(&out), 0, "{}", text(&out));
    let took_over_at: u128 = std::fs::read_to_string(&started)
        .expect("the contender's command ran")
        .trim()
        .parse()
        .expect("a time");
    let takeover =
        Duration::from_nanos(u64::try_from(took_over_at - killed_at).unwrap_or(u64::MAX));
    eprintln!("takeover {takeover:?} after SIGKILL (--ttl {TTL:?})");
    assert!(
        takeover <= TTL + Duration::from_millis(300),
        "taken over {takeover:?} after the kill, later than the --ttl {TTL:?} (+300 ms for \
         process start-up)"
    );
}

/// `lease status`, `watch` and `release` on PostgreSQL; `table create` again changes nothing;
/// the password shows nowhere, and a missing table, an unreachable server, one that never
/// answers and a second store named with `--postgres` get exit statuses as on DynamoDB.
#[test]
fn status_watch_release_and_failures() {
    let Some(pg) = Pg::new("status_watch_release_and_failures") else {
        return;
    };
    let again = pg.output(pg.lease().args(["table", "create", "--table", &pg.table]));
    assert_eq!(code(&again), 0, "{}", text(&again));

    let holder = spawn(pg.run().args([
        "--key", "ops", "--ttl", "3s", "--value", "v1", "--", "sleep", "30",
    ]));
    let seen = pg.wait_until_held("ops");
    let fencing = json_number(&seen, "fencing").expect("a fencing token");
    // Text and --all list it.
    let all = pg.output(pg.on_table("status").args(["--all", "--partition", "ops"]));
    assert_eq!(code(&all), 0, "{}", text(&all));
    assert!(
        String::from_utf8_lossy(&all.stdout).contains("ops"),
        "{}",
        text(&all)
    );

    // watch: the holder, as its first line.
    let mut watch = pg
        .on_table("watch")
        .args(["--key", "ops", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("lease watch starts");
    let mut first = String::new();
    BufReader::new(watch.stdout.take().expect("stdout"))
        .read_line(&mut first)
        .expect("a line");
    let _ = watch.kill();
    let watched = watch.wait_with_output().expect("watch ends");
    pg.assert_secret_kept(&format!("{first}{}", text(&watched)));
    assert!(first.contains(r#""state":"held""#), "{first}");
    assert!(
        first.contains(&format!(r#""fencing":{fencing}"#)),
        "{first}"
    );

    // release --force: the holder learns at its next renewal and stops its command (76).
    let broke = pg.output(
        pg.on_table("release")
            .args(["--key", "ops", "--force", "--yes-i-know"]),
    );
    assert_eq!(code(&broke), 0, "{}", text(&broke));
    let out = holder.wait_with_output().expect("the holder ends");
    pg.assert_secret_kept(&text(&out));
    assert_eq!(code(&out), LOST, "{}", text(&out));
    assert!(pg.status_json("ops").contains(r#""state":"free""#));

    // A table nobody created: 69, saying how to create it.
    let missing = pg.output(pg.lease().args([
        "run",
        "--table",
        "no_such_table",
        "--key",
        "k",
        "--wait",
        "0",
        "--",
        "true",
    ]));
    assert_eq!(code(&missing), UNAVAILABLE, "{}", text(&missing));
    assert!(
        stderr(&missing).contains("lease table create"),
        "{}",
        text(&missing)
    );

    // Nothing listens: 69 at once, the URL named without its password.
    let refused_url = format!("postgres://app:{}@127.0.0.1:1/app", pg.secret);
    let started = Instant::now();
    let refused = pg.output(pg.lease().env("LEASE_POSTGRES_URL", &refused_url).args([
        "status",
        "--key",
        "k",
        "--timeout",
        "3s",
    ]));
    assert_eq!(code(&refused), UNAVAILABLE, "{}", text(&refused));
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );

    // A server that accepts connections and never answers: given up after --timeout, as on
    // DynamoDB.
    let silent = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("a port");
    let silent_url = format!(
        "postgres://app:{}@127.0.0.1:{}/app",
        pg.secret,
        silent.local_addr().expect("addr").port()
    );
    let started = Instant::now();
    let hung = pg.output(pg.lease().env("LEASE_POSTGRES_URL", &silent_url).args([
        "status",
        "--key",
        "k",
        "--timeout",
        "1s",
    ]));
    let took = started.elapsed();
    assert_eq!(code(&hung), UNAVAILABLE, "{}", text(&hung));
    assert!(stderr(&hung).contains("(--timeout)"), "{}", text(&hung));
    assert!(took < Duration::from_secs(3), "--timeout 1s took {took:?}");
    let started = Instant::now();
    let hung = pg.output(
        pg.lease()
            .env("LEASE_POSTGRES_URL", &silent_url)
            .args(["run", "--key", "k", "--wait", "0", "--", "true"]),
    );
    let took_run = started.elapsed();
    assert_eq!(code(&hung), UNAVAILABLE, "{}", text(&hung));
    eprintln!(
        "a silent server: status --timeout 1s gave up after {took:?}, run --wait 0 after {took_run:?}"
    );
    drop(silent);

    // On the command line with another store: refused as clap refuses --file with --dynamo;
    // from the environment, the store named on the command line wins.
    let both = pg.output(pg.lease().args([
        "run",
        "--postgres",
        &pg.url,
        "--file",
        "/nonexistent",
        "--key",
        "k",
        "--",
        "true",
    ]));
    assert_eq!(code(&both), USAGE, "{}", text(&both));
    let files = pg.dir.path().join("files");
    std::fs::create_dir(&files).expect("mkdir");
    let on_files = pg.output(
        pg.lease()
            .arg("run")
            .arg("--file")
            .arg(&files)
            .args(["--key", "k", "--wait", "0", "--", "true"]),
    );
    assert_eq!(code(&on_files), 0, "{}", text(&on_files));
    let entries = std::fs::read_dir(&files).expect("ls").count();
    assert!(
        entries > 0,
        "the file store named on the command line was not used"
    );
}

/// The number in `"name":N` of a JSON text.
fn json_number(json: &str, name: &str) -> Option<u64> {
    let at = json.find(&format!(r#""{name}":"#))? + name.len() + 3;
    let digits: String = json[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// SIGKILL to a `lease run`, as the OOM killer would; its guard kills the command.
fn kill9(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}
