//! The PostgreSQL harness against the distribution's binaries: skipped, with the reason printed,
//! where none are installed, unless `LEASE_REQUIRE_POSTGRES=1`.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use lease_testservers::{PgBinaries, PgCluster, StopMode};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Set in the child process of `a_server_never_outlives_a_killed_test_process`.
const ORPHAN_VAR: &str = "LEASE_TESTSERVERS_ORPHAN";

/// Whether the binaries are there; prints why not, or fails when they are required.
fn binaries_or_skip(test: &str) -> bool {
    match PgBinaries::find() {
        Ok(_) => true,
        Err(error) if std::env::var("LEASE_REQUIRE_POSTGRES").as_deref() == Ok("1") => {
            panic!("LEASE_REQUIRE_POSTGRES=1 but {error}")
        }
        Err(error) => {
            eprintln!("skipping {test}: {error}");
            false
        }
    }
}

fn start() -> PgCluster {
    let started = Instant::now();
    let cluster = PgCluster::start().expect("start a cluster");
    eprintln!("PgCluster::start took {:?}", started.elapsed());
    cluster
}

fn is_alive(pid: u32) -> bool {
    kill(Pid::from_raw(pid as i32), None).is_ok()
}

/// Polls `check` for up to 30 s.
fn eventually(what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check() {
        assert!(Instant::now() < deadline, "not {what} within 30 s");
        sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_cluster_answers_on_its_port_and_is_gone_after_drop() {
    if !binaries_or_skip("a_cluster_answers_on_its_port_and_is_gone_after_drop") {
        return;
    }
    let cluster = start();
    let port = cluster.port();
    assert_eq!(
        cluster.url(),
        format!("postgres://postgres@127.0.0.1:{port}/postgres")
    );
    assert_eq!(cluster.psql("SELECT 1 + 1").expect("query").trim(), "2");
    assert_eq!(
        cluster.psql("SHOW wal_level").expect("query").trim(),
        "replica"
    );
    let failed = cluster.psql("SELECT * FROM no_such_table").unwrap_err();
    assert!(failed.to_string().contains("no_such_table"), "{failed}");
    let pid = cluster.pid().expect("pid");
    let data = cluster.data_dir();
    assert!(is_alive(pid) && data.join("PG_VERSION").is_file());
    drop(cluster);
    assert!(!is_alive(pid), "the postmaster {pid} outlived its cluster");
    assert!(!data.exists(), "{} was left behind", data.display());
}

#[test]
fn stop_and_start_again_keep_the_data_and_the_port() {
    if !binaries_or_skip("stop_and_start_again_keep_the_data_and_the_port") {
        return;
    }
    let mut cluster = start();
    let port = cluster.port();
    cluster
        .psql("CREATE TABLE t (x int); INSERT INTO t VALUES (1)")
        .expect("write");
    for mode in [StopMode::Smart, StopMode::Fast, StopMode::Immediate] {
        let pid = cluster.pid().expect("pid");
        cluster.stop(mode).expect("stop");
        assert!(!is_alive(pid), "{mode:?}: the postmaster {pid} still runs");
        assert!(cluster.pid().is_err() && cluster.psql("SELECT 1").is_err());
        assert!(cluster.stop(mode).is_err(), "stopping a stopped server");
        let started = Instant::now();
        cluster.start_again().expect("start again");
        eprintln!("start_again after {mode:?} took {:?}", started.elapsed());
        assert_eq!(cluster.port(), port);
        // Each round's write was acknowledged just before the stop (an immediate one too).
        cluster.psql("INSERT INTO t VALUES (1)").expect("write");
    }
    assert_eq!(
        cluster.psql("SELECT count(*) FROM t").expect("read").trim(),
        "4"
    );
    assert!(cluster.start_again().is_err(), "starting a running server");
}

#[test]
fn a_replica_streams_writes_and_accepts_its_own_once_promoted() {
    if !binaries_or_skip("a_replica_streams_writes_and_accepts_its_own_once_promoted") {
        return;
    }
    let mut primary = start();
    primary
        .psql("CREATE TABLE t (x int); INSERT INTO t VALUES (1)")
        .expect("write");
    let started = Instant::now();
    let replica = primary.replica().expect("replica");
    eprintln!("PgCluster::replica took {:?}", started.elapsed());
    assert_ne!(replica.port(), primary.port());
    let in_recovery = replica.psql("SELECT pg_is_in_recovery()").expect("read");
    assert_eq!(in_recovery.trim(), "t");
    assert!(replica.psql("INSERT INTO t VALUES (9)").is_err());
    primary.psql("INSERT INTO t VALUES (2)").expect("write");
    eventually("streamed", || {
        replica
            .psql("SELECT sum(x) FROM t")
            .is_ok_and(|sum| sum.trim() == "3")
    });
    primary.stop(StopMode::Immediate).expect("stop the primary");
    let started = Instant::now();
    replica.promote().expect("promote");
    eprintln!("PgCluster::promote took {:?}", started.elapsed());
    replica
        .psql("INSERT INTO t VALUES (4)")
        .expect("write after promotion");
    assert_eq!(
        replica.psql("SELECT sum(x) FROM t").expect("read").trim(),
        "7"
    );
}

/// Run by `a_server_never_outlives_a_killed_test_process` in a child process: starts a cluster,
/// prints its postmaster's pid, and waits to be killed. A no-op in a normal test run.
#[test]
fn orphan_helper() {
    if std::env::var_os(ORPHAN_VAR).is_none() {
        return;
    }
    let cluster = PgCluster::start().expect("start a cluster");
    println!(
        "postmaster {} {}",
        cluster.pid().expect("pid"),
        cluster.data_dir().display()
    );
    sleep(Duration::from_secs(120));
}

#[test]
fn a_server_never_outlives_a_killed_test_process() {
    if !binaries_or_skip("a_server_never_outlives_a_killed_test_process") {
        return;
    }
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "orphan_helper",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ORPHAN_VAR, "1")
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the helper");
    let stdout = child.stdout.take().expect("stdout");
    let line = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find_map(|line| Some(line.split_once("postmaster ")?.1.to_owned()))
        .expect("the helper's postmaster line");
    // After libtest's "test orphan_helper ... " on the same line.
    let mut fields = line.split(' ');
    let pid: u32 = fields.next().and_then(|p| p.parse().ok()).expect("pid");
    let data = Path::new(fields.next().expect("data dir")).to_path_buf();
    assert!(is_alive(pid));
    kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).expect("SIGKILL the helper");
    child.wait().expect("reap the helper");
    eventually("stopped after its test process was killed", || {
        !is_alive(pid)
    });
    // No Drop ran: the directory is left behind; this test removes it.
    let _ = std::fs::remove_dir_all(data.parent().expect("cluster dir"));
}
