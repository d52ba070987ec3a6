//! The Redis server lost under a running `lease run`: stopped (`SIGTERM`), killed (`SIGKILL`),
//! or killed and started again at once EMPTY (no persistence: every lease forgotten while its
//! holder still runs). The command is stopped before its lease could end, and a second
//! command starts only after the first ended and after the lease's end; after the empty
//! restart, only once the recreation grace (`lease run`'s default: its --ttl) is over, however
//! early it asks. The lease's end is the server's own (`until` of `lease status --json`, read
//! until the loss: the last expiry seen, a lower bound of the true one), the command's end what
//! its TERM trap wrote.
//!
//! Each test runs a private server (`lease_testservers::RedisServer`, Debian's `redis-server`,
//! without persistence); without one it skips with the reason printed, unless
//! `LEASE_REQUIRE_REDIS=1`.

mod support;

use std::fs::File;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use lease_testservers::RedisServer;
use support::{unix_nanos, wait_for, with_redis_secret};

const LOST: i32 = 76;
/// The holder's lease: renewed every second.
const TTL: &str = "3s";
const TTL_NANOS: u128 = 3_000_000_000;

fn lease(dir: &Path, url: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lease"));
    command
        .env("LEASE_DIR", dir)
        .env("LEASE_REDIS_URL", url)
        .env_remove("LEASE_POSTGRES_URL")
        .env_remove("LEASE_LOG")
        .stdin(Stdio::null());
    command
}

/// A private server, or `None` after saying why the test is skipped.
fn server(test: &str) -> Option<RedisServer> {
    match RedisServer::start() {
        Ok(server) => Some(server),
        Err(error) => {
            assert!(
                std::env::var("LEASE_REQUIRE_REDIS").as_deref() != Ok("1"),
                "LEASE_REQUIRE_REDIS=1 but no Redis server could be started: {error}"
            );
            eprintln!("SKIPPED: lease-cli {test} (no redis-server: {error})");
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

/// The lease's end as the server recorded it: `until` of `lease status --json` (the server's
/// clock, which is this machine's), in nanoseconds since the epoch, cut to the millisecond: a
/// lower bound.
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

/// What happens to the server under the holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Loss {
    /// `SIGTERM`; started again once the holder has exited.
    Stopped,
    /// `SIGKILL`; started again once the holder has exited.
    Killed,
    /// `SIGKILL` and started again at once, empty, with a second `lease run` waiting from then
    /// on while the first still runs.
    RestartedEmpty,
}

fn server_lost_under_a_holder(loss: Loss, test: &str) {
    let Some(mut server) = server(test) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let (url, secret) = with_redis_secret(&server.url());
    let claims = dir.join("claims");
    let ms = |nanos: i128| nanos as f64 / 1e6;

    // The server is new: no holder of a data set it replaced can run.
    let mut first = holder(dir, &url, "h1", &claims, &["--recreation-grace", "0"]);
    wait_for("the first command starts", Duration::from_secs(10), || {
        claim(&claims, "start", "h1").is_some()
    });
    // A renewal or two, then the loss at a point of the renewal cycle that differs run to run;
    // the lease's end is read until then.
    let lose_after = Duration::from_millis(1200 + u64::from(std::process::id() % 1000));
    let until = std::time::Instant::now() + lose_after;
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
    let lost_at = unix_nanos();
    match loss {
        Loss::Stopped => server.stop().expect("the server stops"),
        Loss::Killed | Loss::RestartedEmpty => server.kill().expect("the server is killed"),
    }
    // After an empty restart, a second command asks at once, while the first still runs.
    let mut second = None;
    let mut restarted_at = 0;
    if loss == Loss::RestartedEmpty {
        server.start_again().expect("the server starts again");
        restarted_at = unix_nanos();
        // The default grace: this command's --ttl.
        second = Some(holder(dir, &url, "h2", &claims, &["--wait", "20s"]));
    }

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
    let margin = lease_end as i128 - ended as i128;
    eprintln!(
        "{loss:?}: the command ended {:.0} ms after the loss, {:.0} ms before the lease's end \
         (lease run exited {:.0} ms before it); said: {}",
        ms(ended as i128 - lost_at as i128),
        ms(margin),
        ms(lease_end as i128 - exited_at as i128),
        said.trim().replace('\n', " | ")
    );
    assert!(
        margin > 0,
        "the command ended {:.0} ms after the lease's end",
        ms(-margin)
    );

    let mut second = match second {
        Some(second) => second,
        None => {
            server.start_again().expect("the server starts again");
            restarted_at = unix_nanos();
            holder(dir, &url, "h2", &claims, &["--wait", "20s"])
        }
    };
    wait_for("the second command starts", Duration::from_secs(20), || {
        claim(&claims, "start", "h2").is_some()
    });
    let started = claim(&claims, "start", "h2").expect("started");
    eprintln!(
        "{loss:?}: the second command started {:.0} ms after the first ended, {:.0} ms after \
         the first lease's end, {:.0} ms after the restart",
        ms(started as i128 - ended as i128),
        ms(started as i128 - lease_end as i128),
        ms(started as i128 - restarted_at as i128),
    );
    assert!(started > ended, "two holders at once");
    assert!(
        started + 5_000_000 >= lease_end,
        "the second holder started {:.0} ms before the first lease's end",
        ms(lease_end as i128 - started as i128)
    );
    // Every restart is a new incarnation (a new run_id; here also an empty data set): nothing
    // is granted until the grace (--ttl) after the second command first asked.
    assert!(
        started >= restarted_at + TTL_NANOS - 5_000_000,
        "the second holder started {:.0} ms after the restart, before the grace ({TTL})",
        ms(started as i128 - restarted_at as i128)
    );
    let said = std::fs::read_to_string(dir.join("h2.stderr")).unwrap_or_default();
    assert!(!said.contains(&secret), "the password was printed: {said}");
    let _ = second.kill();
    let _ = second.wait();
}

#[test]
fn a_server_restarted_empty_never_lets_a_second_command_run_beside_the_first() {
    server_lost_under_a_holder(
        Loss::RestartedEmpty,
        "a_server_restarted_empty_never_lets_a_second_command_run_beside_the_first",
    );
}

#[test]
fn a_server_stopped_stops_the_command_before_the_lease_ends() {
    server_lost_under_a_holder(
        Loss::Stopped,
        "a_server_stopped_stops_the_command_before_the_lease_ends",
    );
}

#[test]
fn a_server_killed_stops_the_command_before_the_lease_ends() {
    server_lost_under_a_holder(
        Loss::Killed,
        "a_server_killed_stops_the_command_before_the_lease_ends",
    );
}
