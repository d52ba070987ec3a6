//! The command under `lease run` holds no descriptor of the holder's kernel lock (issue 22,
//! item 5): a command that runs `flock -u` on every descriptor it has, and closes them all,
//! cannot let a contender in while the holder lives.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const HELD: i32 = 75;

fn lease(dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lease"));
    command
        .env("LEASE_DIR", dir)
        .env_remove("LEASE_LOG")
        .stdin(Stdio::null());
    command
}

/// Unlocks every descriptor the shell has (`flock -u`, run as its child, inherits them all and
/// acts on the shared open file descriptions), closes all but the standard three, says so, then
/// runs on for a while. bash, not sh: dash's `exec N>&-` takes one digit only.
const UNLOCK_EVERYTHING: &str = r#"
for fd in /proc/self/fd/*; do
    n=${fd##*/}
    flock -u "$n" 2>/dev/null
done
for fd in /proc/self/fd/*; do
    n=${fd##*/}
    case $n in 0|1|2) continue;; esac
    eval "exec $n>&-"
done
: > "$1"
sleep 2
"#;

#[test]
fn a_command_that_unlocks_every_inherited_descriptor_cannot_let_a_contender_in() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let store = dir.path().join("store");
    let ready = dir.path().join("unlocked");
    let mut holder = lease(dir.path())
        .arg("run")
        .arg("--file")
        .arg(&store)
        .args([
            "--key",
            "k",
            "--ttl",
            "30s",
            "--",
            "bash",
            "-c",
            UNLOCK_EVERYTHING,
            "bash",
        ])
        .arg(&ready)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start lease run: {e}"));
    let limit = Instant::now() + Duration::from_secs(20);
    while !ready.exists() {
        assert!(Instant::now() < limit, "the command never got going");
        assert!(
            holder.try_wait().ok().flatten().is_none(),
            "the holder ended before its command unlocked"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // The holder lives (its command sleeps 2 s): every contender must be refused.
    let mut tries = 0;
    while holder.try_wait().ok().flatten().is_none() && tries < 15 {
        let contender = lease(dir.path())
            .arg("run")
            .arg("--file")
            .arg(&store)
            .args(["--key", "k", "--wait", "0", "--", "true"])
            .output()
            .unwrap_or_else(|e| panic!("start the contender: {e}"));
        let still_holding = holder.try_wait().ok().flatten().is_none();
        if still_holding {
            assert_eq!(
                contender.status.code(),
                Some(HELD),
                "a contender got in while the holder lives, after its command unlocked every \
                 descriptor: {}",
                String::from_utf8_lossy(&contender.stderr)
            );
        }
        tries += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(tries >= 3, "too few contenders ran while the holder lived");
    let output = holder
        .wait_with_output()
        .unwrap_or_else(|e| panic!("wait for the holder: {e}"));
    assert!(
        output.status.success(),
        "the holder: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}
