//! `lease` on Redis (`--redis URL`, or `LEASE_REDIS_URL`), against the real server in
//! `LEASE_REDIS_URL`: skipped visibly without it, unless `LEASE_REQUIRE_REDIS=1`. Each test
//! uses its own key prefix (`--prefix`), so they run in parallel on one server. The URL is
//! given a password (the server's own, or a marker as the `default` user's, which a server
//! without a password accepts), which no output of any command may contain.

mod support;

use std::io::{BufRead as _, BufReader};
use std::net::{Ipv4Addr, TcpListener};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use support::{redis_url, stderr, unique_name, unix_nanos, wait_for, with_redis_secret};

const HELD: i32 = 75;
const LOST: i32 = 76;
const USAGE: i32 = 64;
const UNAVAILABLE: i32 = 69;

/// A server, a prefix of this test's own, and the password that must never be printed.
struct Rd {
    url: String,
    secret: String,
    prefix: String,
    dir: tempfile::TempDir,
}

impl Rd {
    /// The server of `LEASE_REDIS_URL` and a fresh prefix, or `None` (skipped).
    fn new(test: &str) -> Option<Self> {
        let url = redis_url(test)?;
        let (url, secret) = with_redis_secret(&url);
        Some(Self {
            url,
            secret,
            prefix: unique_name("cli"),
            dir: tempfile::tempdir().expect("tempdir"),
        })
    }

    /// `lease` with the URL in `LEASE_REDIS_URL` (the way to keep a password out of the
    /// process list), a private file store that must stay unused, and quiet logs.
    fn lease(&self) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_lease"));
        command
            .env("LEASE_DIR", self.dir.path())
            .env("LEASE_REDIS_URL", &self.url)
            .env_remove("LEASE_POSTGRES_URL")
            .env_remove("LEASE_LOG")
            .stdin(Stdio::null());
        command
    }

    /// `lease SUBCOMMAND --prefix P ...` under this test's prefix.
    fn on_prefix(&self, subcommand: &str) -> Command {
        let mut command = self.lease();
        command.args([subcommand, "--prefix", &self.prefix]);
        command
    }

    /// `lease run --recreation-grace 0` under this test's prefix: the prefix is new, no holder
    /// of a data set it replaced can run (`a_fresh_prefix_grants_after_one_ttl` shows the
    /// default).
    fn run(&self) -> Command {
        let mut command = self.on_prefix("run");
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

    /// `lease status --key KEY --json` under this prefix, as JSON text.
    fn status_json(&self, key: &str) -> String {
        let out = self.output(self.on_prefix("status").args(["--key", key, "--json"]));
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
    let Some(rd) = Rd::new("five_contenders_exactly_one_runs") else {
        return;
    };
    let ran = rd.dir.path().join("ran");
    let script = format!("echo x >> {}; sleep 2", ran.display());
    let contenders: Vec<Child> = (0..5)
        .map(|_| {
            spawn(rd.run().args([
                "--key", "five", "--ttl", "5s", "--wait", "0", "--", "sh", "-c", &script,
            ]))
        })
        .collect();
    let outputs: Vec<Output> = contenders
        .into_iter()
        .map(|child| child.wait_with_output().expect("lease ends"))
        .collect();
    for out in &outputs {
        rd.assert_secret_kept(&text(out));
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
/// between (a release, a lease left to expire, a takeover, an operator's break); `--value`
/// reaches the command and `lease status`; `--holders 2` lets two run and refuses a third.
#[test]
fn tokens_increase_values_publish_and_slots_count() {
    let Some(rd) = Rd::new("tokens_increase_values_publish_and_slots_count") else {
        return;
    };
    let token = |args: &[&str]| -> u64 {
        let out = rd.output(rd.run().args(["--key", "seq", "--ttl", "1s"]).args(args));
        assert_eq!(code(&out), 0, "{}", text(&out));
        let printed = String::from_utf8_lossy(&out.stdout);
        printed
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("a token: {printed:?}"))
    };
    let echo = ["--", "sh", "-c", "echo $LEASE_FENCING_TOKEN"];
    // Two releases.
    let mut tokens = vec![token(&echo), token(&echo)];
    // Killed without a release: the next holder takes over the expired lease (--ttl 1s).
    let abandoned = spawn(
        rd.run()
            .args(["--key", "seq", "--ttl", "1s", "--", "sleep", "30"]),
    );
    let seen = rd.wait_until_held("seq");
    tokens.push(json_number(&seen, "fencing").expect("a fencing token"));
    kill9(abandoned);
    tokens.push(token(&[
        "--wait",
        "10s",
        "--",
        "sh",
        "-c",
        "echo $LEASE_FENCING_TOKEN",
    ]));
    // Left to expire with nobody waiting, then acquired again.
    let abandoned = spawn(
        rd.run()
            .args(["--key", "seq", "--ttl", "1s", "--", "sleep", "30"]),
    );
    let seen = rd.wait_until_held("seq");
    tokens.push(json_number(&seen, "fencing").expect("a fencing token"));
    kill9(abandoned);
    std::thread::sleep(Duration::from_millis(1500));
    tokens.push(token(&echo));
    // Broken by an operator under a running holder, then acquired again.
    let broken = spawn(
        rd.run()
            .args(["--key", "seq", "--ttl", "3s", "--", "sleep", "30"]),
    );
    let seen = rd.wait_until_held("seq");
    tokens.push(json_number(&seen, "fencing").expect("a fencing token"));
    let out = rd.output(
        rd.on_prefix("release")
            .args(["--key", "seq", "--force", "--yes-i-know"]),
    );
    assert_eq!(code(&out), 0, "{}", text(&out));
    tokens.push(token(&echo));
    let out = broken.wait_with_output().expect("the broken holder ends");
    assert_eq!(code(&out), LOST, "{}", text(&out));
    eprintln!("fencing tokens across release, takeover, expiry and a break: {tokens:?}");
    assert!(
        tokens.windows(2).all(|pair| pair[0] < pair[1]),
        "tokens must increase: {tokens:?}"
    );

    // --value: in the command's environment and in the record while it runs.
    let said = rd.dir.path().join("said");
    let holder = spawn(rd.run().args([
        "--key",
        "leader",
        "--value",
        "10.0.0.7:6379",
        "--",
        "sh",
        "-c",
        &format!("echo value $LEASE_VALUE >> {}; sleep 30", said.display()),
    ]));
    let seen = rd.wait_until_held("leader");
    assert!(seen.contains(r#""value":"10.0.0.7:6379""#), "{seen}");
    wait_for_lines(&said, 1);
    kill9(holder);

    // --holders 2: two run at once in slots 0 and 1, a third is refused.
    let slots: Vec<Child> = (0..2)
        .map(|_| {
            spawn(rd.run().args([
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
        let out = rd.output(
            rd.on_prefix("status")
                .args(["--key", "pool", "--holders", "2"]),
        );
        String::from_utf8_lossy(&out.stdout).contains("2 of 2 slots held")
    });
    let third = rd.output(rd.run().args([
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
    assert_eq!(lines, ["slot 0", "slot 1", "value 10.0.0.7:6379"]);
}

/// Waits until `file` has `count` whole lines.
fn wait_for_lines(file: &std::path::Path, count: usize) {
    wait_for("the commands run", Duration::from_secs(10), || {
        std::fs::read_to_string(file)
            .is_ok_and(|text| text.ends_with('\n') && text.lines().count() >= count)
    });
}

/// `lease run` sets the recreation grace to its --ttl, as on PostgreSQL: a prefix nobody has
/// used yet cannot be told from one whose data set was lost (a restart without persistence, a
/// flush) while its holders still run, so its first grant waits one --ttl, with the reason
/// said; `--wait 0` is refused as held.
#[test]
fn a_fresh_prefix_grants_after_one_ttl() {
    let Some(rd) = Rd::new("a_fresh_prefix_grants_after_one_ttl") else {
        return;
    };
    let refused = rd.output(
        rd.on_prefix("run")
            .args(["--key", "k", "--ttl", "1s", "--wait", "0", "--", "true"]),
    );
    assert_eq!(code(&refused), HELD, "{}", text(&refused));
    assert!(
        stderr(&refused).contains("incarnation"),
        "{}",
        text(&refused)
    );
    let started = Instant::now();
    let waited = rd.output(
        rd.on_prefix("run")
            .args(["--key", "k", "--ttl", "1s", "--wait", "5s", "--", "true"]),
    );
    let took = started.elapsed();
    assert_eq!(code(&waited), 0, "{}", text(&waited));
    eprintln!("a fresh prefix: first grant after {took:?} (--ttl 1s)");
    assert!(took < Duration::from_secs(3), "{took:?}");
}

/// A holder killed with SIGKILL (its guard kills the command) is taken over by a waiting
/// contender within the holder's --ttl: the lease ends one --ttl after its last renewal at the
/// latest, and the contender, woken by the server's expiry or polling, acquires it then.
#[test]
fn a_sigkilled_holder_is_taken_over_within_its_ttl() {
    let Some(rd) = Rd::new("a_sigkilled_holder_is_taken_over_within_its_ttl") else {
        return;
    };
    const TTL: Duration = Duration::from_secs(2);
    let mut takeovers = Vec::new();
    for round in 0..3u64 {
        let holder = spawn(
            rd.run()
                .args(["--key", "crash", "--ttl", "2s", "--", "sleep", "30"]),
        );
        rd.wait_until_held("crash");
        let started = rd.dir.path().join(format!("started-{round}"));
        let contender = spawn(rd.run().args([
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
        // Let the contender start waiting, then kill the holder at a point of its renewals
        // that differs round to round.
        std::thread::sleep(Duration::from_millis(
            300 + (u64::from(std::process::id()) + round * 233) % 600,
        ));
        let killed_at = unix_nanos();
        kill9(holder);
        let out = contender.wait_with_output().expect("the contender ends");
        rd.assert_secret_kept(&text(&out));
        assert_eq!(code(&out), 0, "{}", text(&out));
        let took_over_at: u128 = std::fs::read_to_string(&started)
            .expect("the contender's command ran")
            .trim()
            .parse()
            .expect("a time");
        let takeover =
            Duration::from_nanos(u64::try_from(took_over_at - killed_at).unwrap_or(u64::MAX));
        takeovers.push(takeover);
        assert!(
            takeover <= TTL + Duration::from_millis(300),
            "taken over {takeover:?} after the kill, later than the --ttl {TTL:?} (+300 ms for \
             process start-up)"
        );
    }
    eprintln!("takeovers after SIGKILL (--ttl {TTL:?}): {takeovers:?}");
}

/// `lease status`, `watch` and `release` on Redis; the password shows nowhere, and an
/// unreachable server, one that never answers, a bad prefix and a second store named with
/// `--redis` get exit statuses as on PostgreSQL.
#[test]
fn status_watch_release_and_failures() {
    let Some(rd) = Rd::new("status_watch_release_and_failures") else {
        return;
    };
    let holder = spawn(rd.run().args([
        "--key", "ops", "--ttl", "3s", "--value", "v1", "--", "sleep", "30",
    ]));
    let seen = rd.wait_until_held("ops");
    let fencing = json_number(&seen, "fencing").expect("a fencing token");
    assert!(seen.contains(r#""value":"v1""#), "{seen}");
    // --all lists it; the text form names the store without the password.
    let all = rd.output(rd.on_prefix("status").args(["--all", "--partition", "ops"]));
    assert_eq!(code(&all), 0, "{}", text(&all));
    assert!(
        String::from_utf8_lossy(&all.stdout).contains("ops"),
        "{}",
        text(&all)
    );
    let one = rd.output(rd.on_prefix("status").args(["--key", "ops"]));
    assert_eq!(code(&one), 0, "{}", text(&one));

    // watch: the holder, as its first line; then its release by an operator.
    let mut watch = rd
        .on_prefix("watch")
        .args(["--key", "ops", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("lease watch starts");
    let mut lines = BufReader::new(watch.stdout.take().expect("stdout"));
    let mut first = String::new();
    lines.read_line(&mut first).expect("a line");
    assert!(first.contains(r#""state":"held""#), "{first}");
    assert!(
        first.contains(&format!(r#""fencing":{fencing}"#)),
        "{first}"
    );

    // release --force: the holder learns at its next renewal and stops its command (76).
    let broke =
        rd.output(
            rd.on_prefix("release")
                .args(["--key", "ops", "--force", "--yes-i-know"]),
        );
    assert_eq!(code(&broke), 0, "{}", text(&broke));
    let mut next = String::new();
    lines.read_line(&mut next).expect("a second line");
    let _ = watch.kill();
    let watched = watch.wait_with_output().expect("watch ends");
    rd.assert_secret_kept(&format!("{first}{next}{}", text(&watched)));
    assert!(next.contains(r#""state":"free""#), "{next}");
    let out = holder.wait_with_output().expect("the holder ends");
    rd.assert_secret_kept(&text(&out));
    assert_eq!(code(&out), LOST, "{}", text(&out));
    assert!(rd.status_json("ops").contains(r#""state":"free""#));

    // A prefix Redis keys cannot carry: bad input.
    let bad = rd.output(rd.lease().args([
        "run", "--prefix", "a{b}", "--key", "k", "--wait", "0", "--", "true",
    ]));
    assert_eq!(code(&bad), USAGE, "{}", text(&bad));

    // Nothing listens: 69 at once, the URL named without its password.
    let refused_url = format!("redis://default:{}@127.0.0.1:1", rd.secret);
    let started = Instant::now();
    let refused = rd.output(rd.lease().env("LEASE_REDIS_URL", &refused_url).args([
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

    // A server that accepts connections and never answers: given up after --timeout.
    let silent = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("a port");
    let silent_url = format!(
        "redis://default:{}@127.0.0.1:{}",
        rd.secret,
        silent.local_addr().expect("addr").port()
    );
    let started = Instant::now();
    let hung = rd.output(rd.lease().env("LEASE_REDIS_URL", &silent_url).args([
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
    let hung = rd.output(
        rd.lease()
            .env("LEASE_REDIS_URL", &silent_url)
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
    let both = rd.output(rd.lease().args([
        "run",
        "--redis",
        &rd.url,
        "--file",
        "/nonexistent",
        "--key",
        "k",
        "--",
        "true",
    ]));
    assert_eq!(code(&both), USAGE, "{}", text(&both));
    let files = rd.dir.path().join("files");
    std::fs::create_dir(&files).expect("mkdir");
    let on_files = rd.output(
        rd.lease()
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
    // Both URLs from the environment and no store named: which one was meant is not guessed.
    let ambiguous = rd.output(
        rd.lease()
            .env("LEASE_POSTGRES_URL", "postgres://app@127.0.0.1:1/app")
            .args(["status", "--key", "k"]),
    );
    assert_eq!(code(&ambiguous), USAGE, "{}", text(&ambiguous));
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
