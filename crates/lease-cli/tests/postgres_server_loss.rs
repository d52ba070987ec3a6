//! The PostgreSQL server stopped under a running `lease run` (immediate: every server process
//! killed, as a crash; fast: sessions ended by the server): the command is stopped before the
//! lease could end, and a contender gets the lease only after it stopped, once the server is
//! back. The lease's end is the server's own (`until` of `lease status --json`, read until the
//! stop: the last expiry seen, a lower bound of the true one), the command's end what its TERM
//! trap wrote.
//!
//! Each test runs a private server (`lease_testservers::PgCluster`, the distribution's
//! binaries); without them it skips with the reason printed, unless `LEASE_REQUIRE_POSTGRES=1`.

mod support;

use std::fs::File;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use lease_testservers::{PgCluster, StopMode};
use support::{stderr, unix_nanos, wait_for, with_secret};

const LOST: i32 = 76;
/// The holder's lease: renewed every second.
const TTL: &str = "3s";

fn lease(dir: &Path, url: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lease"));
    command
        .env("LEASE_DIR", dir)
        .env("LEASE_POSTGRES_URL", url)
        .env_remove("LEASE_REDIS_URL")
        .env_remove("LEASE_LOG")
        .stdin(Stdio::null());
    command
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(out))
}

/// A private server, or `None` after saying why the test is skipped.
fn cluster(test: &str) -> Option<PgCluster> {
    match PgCluster::start() {
        Ok(cluster) => Some(cluster),
        Err(error) => {
            assert!(
                std::env::var("LEASE_REQUIRE_POSTGRES").as_deref() != Ok("1"),
                "LEASE_REQUIRE_POSTGRES=1 but no PostgreSQL server could be started: {error}"
            );
            eprintln!("SKIPPED: lease-cli {test} (no PostgreSQL server binaries: {error})");
            None
        }
    }
}

/// The time `name`'s command wrote `what` (`start`, `end`) into `claims`.
fn claim(claims: &Path, what: &str, name: &str) -> Option<u128> {
    let text = std::fs::read_to_string(claims).ok()?;
    let prefix = format!("{what} {name} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix)?.trim().parse().ok())
}

/// A `lease run` whose command writes `start NAME <ns>` to `claims`, and `end NAME <ns>` when
/// told to stop (SIGTERM to its group, which ends its `sleep` too).
fn holder(dir: &Path, url: &str, name: &str, claims: &Path, args: &[&str]) -> Child {
    let claims = claims.display();
    let script = format!(
        "trap 'echo \"end {name} $(date +%s%N)\" >> {claims}; exit 143' TERM; \
         echo \"start {name} $(date +%s%N)\" >> {claims}; sleep 60 & wait $!"
    );
    lease(dir, url)
        .args(["run", "--key", "k", "--ttl", TTL])
        .args(args)
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(File::create(dir.join(format!("{name}.stderr"))).expect("stderr file"))
        .spawn()
        .expect("lease starts")
}

/// The lease's end as the server recorded it: `until` of `lease status --json`
/// (`2026-11-29T01:00:29.868Z`, the server's clock, which is this machine's), in nanoseconds
/// since the epoch, cut to the millisecond: a lower bound.
fn recorded_end(dir: &Path, url: &str) -> Option<u128> {
    let out = lease(dir, url)
        .args(["status", "--key", "k", "--json", "--timeout", "1s"])
        .output()
        .ok()?;
    let json = String::from_utf8_lossy(&out.stdout);
    let at = json.find(r#""until":""#)? + r#""until":""#.len();
    parse_utc_ms(json.get(at..at + 24)?)
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` as nanoseconds since the epoch (Howard Hinnant's
/// days-from-civil).
fn parse_utc_ms(text: &str) -> Option<u128> {
    let number = |range: std::ops::Range<usize>| text.get(range)?.parse::<i64>().ok();
    let (y, m, d) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hh, mm, ss, ms) = (
        number(11..13)?,
        number(14..16)?,
        number(17..19)?,
        number(20..23)?,
    );
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let ms_total = ((days * 86_400 + hh * 3600 + mm * 60 + ss) * 1000) + ms;
    u128::try_from(ms_total).ok().map(|ms| ms * 1_000_000)
}

fn server_stopped_under_a_holder(mode: StopMode, test: &str) {
    let Some(mut server) = cluster(test) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let (url, secret) = with_secret(&server.url());
    let created = lease(dir, &url)
        .args(["table", "create"])
        .output()
        .expect("lease table create");
    assert!(created.status.success(), "{}", text(&created));
    let claims = dir.join("claims");

    // The table is new: no holder of one it replaced can run.
    let mut first = holder(dir, &url, "h1", &claims, &["--recreation-grace", "0"]);
    wait_for("the first command starts", Duration::from_secs(10), || {
        claim(&claims, "start", "h1").is_some()
    });
    // A renewal or two, then the stop at a point of the renewal cycle that differs run to run;
    // the lease's end is read until then.
    let stop_after = Duration::from_millis(1200 + u64::from(std::process::id() % 1000));
    let until = std::time::Instant::now() + stop_after;
    let mut lease_end: u128 = 0;
    while std::time::Instant::now() < until {
        if let Some(end) = recorded_end(dir, &url) {
            lease_end = lease_end.max(end);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(lease_end > 0, "lease status never showed the holder");
    let now = unix_nanos();
    assert!(
        lease_end.abs_diff(now) < Duration::from_secs(10).as_nanos(),
        "`until` read as {lease_end} ns, now is {now} ns"
    );
    let stopped_at = unix_nanos();
    server.stop(mode).expect("the server stops");

    let mut exit = None;
    wait_for(
        "the holder's lease run exits",
        Duration::from_secs(10),
        || {
            exit = first.try_wait().expect("try_wait");
            exit.is_some()
        },
    );
    let exited_at = unix_nanos();
    let said = std::fs::read_to_string(dir.join("h1.stderr")).unwrap_or_default();
    assert!(!said.contains(&secret), "the password was printed: {said}");
    assert_eq!(exit.and_then(|s| s.code()), Some(LOST), "{said}");
    let ended = claim(&claims, "end", "h1").expect("the command was told to stop (SIGTERM)");
    let ms = |nanos: i128| nanos as f64 / 1e6;
    let margin = lease_end as i128 - ended as i128;
    eprintln!(
        "{mode:?} stop: the command ended {:.0} ms after the stop, {:.0} ms before the lease's \
         end (lease run exited {:.0} ms before it); said: {}",
        ms(ended as i128 - stopped_at as i128),
        ms(margin),
        ms(lease_end as i128 - exited_at as i128),
        said.trim().replace('\n', " | ")
    );
    assert!(
        margin > 0,
        "the command ended {:.0} ms after the lease's end",
        ms(-margin)
    );

    // Back up: a contender gets the lease only after the first command ended.
    server.start_again().expect("the server starts again");
    // The default grace: a restarted server is the same database, not a new incarnation.
    let mut second = holder(dir, &url, "h2", &claims, &["--wait", "20s"]);
    wait_for("the second command starts", Duration::from_secs(20), || {
        claim(&claims, "start", "h2").is_some()
    });
    let started = claim(&claims, "start", "h2").expect("started");
    assert!(started > ended, "two holders at once");
    assert!(
        started + 5_000_000 >= lease_end,
        "the second holder started {:.0} ms before the first lease's end",
        ms(lease_end as i128 - started as i128)
    );
    let _ = second.kill();
    let _ = second.wait();
}

#[test]
fn a_server_stopped_immediately_stops_the_command_before_the_lease_ends() {
    server_stopped_under_a_holder(
        StopMode::Immediate,
        "a_server_stopped_immediately_stops_the_command_before_the_lease_ends",
    );
}

#[test]
fn a_server_stopped_fast_stops_the_command_before_the_lease_ends() {
    server_stopped_under_a_holder(
        StopMode::Fast,
        "a_server_stopped_fast_stops_the_command_before_the_lease_ends",
    );
}
