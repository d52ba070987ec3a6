//! `lease run` as an operator uses it: on a real terminal (a pty driven through `script(1)` from
//! util-linux, since unsafe code, and so `openpty` + `setsid` by hand, is forbidden), with
//! signals a shell sends, with mistyped values, and killed so that it leaves files behind.

mod support;
use support::stderr;

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const LOST: i32 = 76;
const USAGE: i32 = 64;

const LEASE: &str = env!("CARGO_BIN_EXE_lease");

/// `lease` with a private default directory and quiet logs.
fn lease(store: &Path) -> Command {
    let mut command = Command::new(LEASE);
    command
        .env("LEASE_DIR", store)
        .env_remove("LEASE_LOG")
        .stdin(Stdio::null());
    command
}

/// A shell command line run on a fresh pty by `script -qec LINE /dev/null`: its standard input
/// is what is typed at the terminal, its output what the terminal shows.
struct Terminal {
    script: Child,
    keys: ChildStdin,
    screen: Arc<Mutex<String>>,
}

impl Terminal {
    fn start(line: &str, store: &Path) -> Self {
        let mut script = Command::new("script")
            .args(["-qec", line, "/dev/null"])
            .env("LEASE_DIR", store)
            .env_remove("LEASE_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("script(1) from util-linux runs");
        let keys = script.stdin.take().expect("stdin");
        let mut out = script.stdout.take().expect("stdout");
        let screen = Arc::new(Mutex::new(String::new()));
        let shown = screen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = out.read(&mut buf) {
                if n == 0 {
                    break;
                }
                shown
                    .lock()
                    .expect("screen")
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Self {
            script,
            keys,
            screen,
        }
    }

    fn type_keys(&mut self, keys: &str) {
        self.keys.write_all(keys.as_bytes()).expect("type");
        self.keys.flush().expect("flush");
    }

    fn screen(&self) -> String {
        self.screen.lock().expect("screen").clone()
    }

    /// Waits until the terminal shows `text` (counting from byte `from`); fails after `limit`.
    fn wait_for(&mut self, text: &str, from: usize, limit: Duration) -> Instant {
        let started = Instant::now();
        loop {
            let screen = self.screen();
            if screen.get(from..).is_some_and(|s| s.contains(text)) {
                return Instant::now();
            }
            if started.elapsed() > limit {
                let _ = self.script.kill();
                panic!("the terminal never showed {text:?} in {limit:?}; it shows:\n{screen}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits for `script` (so the command line) to end; its exit status.
    fn wait_exit(&mut self, limit: Duration) -> i32 {
        let started = Instant::now();
        loop {
            if let Some(status) = self.script.try_wait().expect("try_wait") {
                return status.code().unwrap_or(-1);
            }
            if started.elapsed() > limit {
                let _ = self.script.kill();
                panic!(
                    "the command line still runs after {limit:?}; the terminal shows:\n{}",
                    self.screen()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        // Closing the pty hangs it up: what runs on it gets SIGHUP.
        let _ = self.script.kill();
        let _ = self.script.wait();
    }
}

/// A second `lease run --wait 0` on `key` gets in: the first released it.
fn assert_free(store: &Path, key: &str) {
    let out = lease(store)
        .args(["run", "--key", key, "--wait", "0", "--", "true"])
        .output()
        .expect("lease runs");
    assert_eq!(
        out.status.code(),
        Some(0),
        "the lease was not released: {}",
        stderr(&out)
    );
}

/// Issue 23: the command ran in a background process group of the terminal, so `read` stopped
/// it (SIGTTIN) while `lease` went on renewing, forever; Ctrl-C was forwarded to a stopped
/// group. Now its group has the terminal: it reads a typed line, Ctrl-Z (under `script`, whose
/// session no job-control shell can continue) is ignored as the kernel ignores it for such
/// groups, and Ctrl-C during `sleep 30` reaches it at once; the lease is released.
#[test]
fn on_a_terminal_the_command_reads_and_ctrl_c_reaches_it() {
    let store = tempfile::tempdir().expect("tempdir");
    let line =
        format!("{LEASE} run --key tty -- sh -c 'echo ready; read x; echo \"got $x\"; sleep 30'");
    let mut terminal = Terminal::start(&line, store.path());
    terminal.wait_for("ready", 0, Duration::from_secs(10));
    terminal.type_keys("\x1a");
    std::thread::sleep(Duration::from_millis(600));
    terminal.type_keys("hello\n");
    terminal.wait_for("got hello", 0, Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(200));
    let interrupted = Instant::now();
    terminal.type_keys("\x03");
    let status = terminal.wait_exit(Duration::from_secs(5));
    let took = interrupted.elapsed();
    assert_eq!(
        status,
        130,
        "Ctrl-C ends the command: {}",
        terminal.screen()
    );
    assert!(took < Duration::from_secs(1), "Ctrl-C took {took:?}");
    assert_free(store.path(), "tty");
}

/// Under a job-control shell, Ctrl-Z stops the command and `lease` with it (and the rest of
/// `lease`'s job, such as a script that runs it): the shell shows the job stopped, and nothing
/// renews the lease, which expires. `fg` after that continues `lease`, which kills the command
/// where it stands (it may no longer trust the lease) and exits 76. Both inside a script (`sh
/// job`) and with `lease` as the job itself.
#[test]
fn a_command_stopped_by_the_terminal_does_not_keep_the_lease() {
    let store = tempfile::tempdir().expect("tempdir");
    let job = store.path().join("job");
    std::fs::write(
        &job,
        format!(
            "{LEASE} run --key stopped --ttl 1s -- sh -c 'echo ready; read x'\necho \"status=$?\"\n"
        ),
    )
    .expect("job");
    let mut terminal = Terminal::start("bash --norc --noprofile -i", store.path());
    // bash's own prompt with no rc file: `bash-5.2$ ` (or `#` for root).
    terminal.wait_for("bash-", 0, Duration::from_secs(10));
    let direct =
        // `re""ady`: the line typed is echoed, and must not match.
        format!("{LEASE} run --key stopped --ttl 1s -- sh -c 'echo re\"\"ady; read x'");
    for (how, line) in [
        ("in a script", format!("sh {}", job.display())),
        ("the job", direct),
    ] {
        let mark = terminal.screen().len();
        terminal.type_keys(&format!("{line}\n"));
        terminal.wait_for("ready", mark, Duration::from_secs(10));
        terminal.type_keys("\x1a");
        let mark = terminal.screen().len();
        terminal.wait_for("Stopped", mark, Duration::from_secs(5));
        // Past the 1 s lease: nothing renewed it.
        std::thread::sleep(Duration::from_millis(1500));
        let status = lease(store.path())
            .args(["status", "--key", "stopped", "--json"])
            .output()
            .expect("status");
        let shown = String::from_utf8_lossy(&status.stdout).into_owned();
        assert!(
            !shown.contains(r#""state":"held""#),
            "{how}: a stopped command kept its lease renewed: {shown}"
        );
        let mark = terminal.screen().len();
        terminal.type_keys("fg\n");
        terminal.wait_for("stopped by SIGTSTP", mark, Duration::from_secs(5));
        if how == "the job" {
            terminal.type_keys("echo \"status=$?\"\n");
        }
        terminal.wait_for(&format!("status={LOST}"), mark, Duration::from_secs(5));
    }
    terminal.type_keys("exit\n");
    terminal.wait_exit(Duration::from_secs(5));
}

/// Issue 23: SIGUSR1, SIGUSR2 and SIGALRM killed `lease` (their default action) without
/// releasing: the lease stayed held until it expired. They are forwarded to the command now.
#[test]
fn user_signals_and_alarms_are_forwarded_and_the_lease_released() {
    let store = tempfile::tempdir().expect("tempdir");
    for (signal, name) in [
        (Signal::SIGUSR1, "USR1"),
        (Signal::SIGUSR2, "USR2"),
        (Signal::SIGALRM, "ALRM"),
    ] {
        let ready = store.path().join(format!("ready-{name}"));
        let script = format!(
            "trap 'exit 42' {name}; touch '{}'; sleep 30 & wait",
            ready.display()
        );
        let mut child = lease(store.path())
            .args(["run", "--key", "signals", "--", "sh", "-c", &script])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("lease starts");
        let started = Instant::now();
        while !ready.exists() {
            assert!(started.elapsed() < Duration::from_secs(10), "never ready");
            std::thread::sleep(Duration::from_millis(10));
        }
        let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid"));
        kill(pid, signal).expect("signal");
        let limit = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                break status;
            }
            assert!(Instant::now() < limit, "{name}: lease did not exit");
            std::thread::sleep(Duration::from_millis(10));
        };
        let out = child.wait_with_output().expect("output");
        assert_eq!(
            status.code(),
            Some(42),
            "{name} reaches the command, whose status comes back: {status:?} {}",
            stderr(&out)
        );
        assert_free(store.path(), "signals");
    }
}

/// Issue 23: `kill -TERM` of `lease` did nothing while its command was stopped (it was
/// forwarded to a stopped group). Like a shell's `kill` of a stopped job, SIGTERM and SIGHUP
/// forwarded to a stopped command are followed by SIGCONT.
#[test]
fn sigterm_reaches_a_command_stopped_by_hand() {
    let store = tempfile::tempdir().expect("tempdir");
    let ready = store.path().join("ready");
    let script = format!("echo $$ > '{}'; sleep 30 & wait", ready.display());
    let mut child = lease(store.path())
        .args(["run", "--key", "stopped-by-hand", "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("lease starts");
    let started = Instant::now();
    let pid = loop {
        if let Some(pid) = std::fs::read_to_string(&ready)
            .ok()
            .and_then(|text| text.trim().parse::<i32>().ok())
        {
            break pid;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "never ready");
        std::thread::sleep(Duration::from_millis(10));
    };
    let group = nix::unistd::getpgid(Some(Pid::from_raw(pid))).expect("the command's group");
    nix::sys::signal::killpg(group, Signal::SIGSTOP).expect("stop the command's group");
    std::thread::sleep(Duration::from_millis(200));
    let lease_pid = Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    kill(lease_pid, Signal::SIGTERM).expect("terminate lease");
    let terminated = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if terminated.elapsed() > Duration::from_secs(5) {
            let _ = nix::sys::signal::killpg(group, Signal::SIGKILL);
            let _ = child.kill();
            panic!("SIGTERM never reached the stopped command");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let out = child.wait_with_output().expect("output");
    assert_eq!(status.code(), Some(143), "{}", stderr(&out));
    assert_free(store.path(), "stopped-by-hand");
}

/// Issue 23: `--key -x` and `--wait -1s` got clap's tip "to pass '-x' as a value, use '-- -x'",
/// which makes `-x` the command. They get a message about the value now; an over-long key was
/// echoed whole (3000 bytes), it is cut now.
#[test]
fn values_that_look_like_options_and_long_keys_get_short_clear_errors() {
    let store = tempfile::tempdir().expect("tempdir");
    let cases: &[(&[&str], &str)] = &[
        (
            &["run", "--key", "-x", "--", "true"],
            "must not begin with '-'",
        ),
        (
            &["run", "--key", "k", "--wait", "-1s", "--", "true"],
            "\"-1s\" is not a duration",
        ),
        (
            &["run", "--key", "k", "--ttl", "-5s", "--", "true"],
            "\"-5s\" is not a duration",
        ),
        (&["status", "--key", "-x"], "must not begin with '-'"),
    ];
    for (args, needle) in cases {
        let out = lease(store.path()).args(*args).output().expect("runs");
        let text = stderr(&out);
        assert_eq!(out.status.code(), Some(USAGE), "{args:?}: {text}");
        assert!(text.contains(needle), "{args:?}: {needle:?} not in {text}");
        assert!(
            !text.contains("tip:") && !text.contains("use '--"),
            "{args:?}: no tip that turns the value into the command: {text}"
        );
    }
    let long = "k".repeat(3000);
    let out = lease(store.path())
        .args(["run", "--key", &long, "--", "true"])
        .output()
        .expect("runs");
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(USAGE), "{text}");
    assert!(text.contains("(3000 bytes)"), "{text}");
    assert!(
        text.len() < 400,
        "the key is echoed whole: {} bytes",
        text.len()
    );
    // A valid key, too long for the file store's names.
    let long = "k".repeat(300);
    let out = lease(store.path())
        .args(["run", "--key", &long, "--", "true"])
        .output()
        .expect("runs");
    let text = stderr(&out);
    assert!(text.contains("(300 bytes)"), "{text}");
    assert!(text.len() < 400, "the key is echoed whole: {}", text.len());
}

/// The relay directories (`$TMPDIR/lease-run-PID-NONCE`) under `tmp`.
fn relay_dirs(tmp: &Path) -> Vec<String> {
    std::fs::read_dir(tmp)
        .expect("tmp")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("lease-run-"))
        .collect()
}

/// Issue 23: every `lease` killed left its `/tmp/lease-run-*` directory behind (34 seen). The
/// guard removes it when `lease` dies; when both died at once, the next `lease run` removes
/// the ones of dead processes, and nothing else: not a live process's, not a symlink.
#[test]
fn killed_lease_runs_leave_no_relay_directories_behind() {
    let store = tempfile::tempdir().expect("tempdir");
    let tmp = tempfile::tempdir().expect("tmpdir");
    let ready = store.path().join("ready");
    let script = format!("touch '{}'; sleep 30", ready.display());
    let mut first = lease(store.path())
        .env("TMPDIR", tmp.path())
        .args(["run", "--key", "killed", "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("lease starts");
    let started = Instant::now();
    // The command runs, so the guard that removes the directory does.
    while !ready.exists() {
        assert!(started.elapsed() < Duration::from_secs(10), "never ran");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(relay_dirs(tmp.path()).len(), 1, "one relay directory");
    first.kill().expect("kill -9 lease");
    let _ = first.wait();
    let killed = Instant::now();
    while !relay_dirs(tmp.path()).is_empty() {
        assert!(
            killed.elapsed() < Duration::from_secs(5),
            "left behind: {:?}",
            relay_dirs(tmp.path())
        );
        std::thread::sleep(Duration::from_millis(10));
    }

    // Both killed at once, as if: a dead pid's directory, a live pid's, and a symlink.
    let mut dead = Command::new("true").spawn().expect("true");
    let dead_pid = dead.id();
    dead.wait().expect("reaped");
    let stale = tmp.path().join(format!("lease-run-{dead_pid}-stale"));
    std::fs::create_dir(&stale).expect("stale");
    std::fs::write(stale.join("deadline"), "1 1\n").expect("deadline");
    let live = tmp
        .path()
        .join(format!("lease-run-{}-live", std::process::id()));
    std::fs::create_dir(&live).expect("live");
    let target = tempfile::tempdir().expect("target");
    std::fs::write(target.path().join("keep"), "").expect("keep");
    let link = tmp.path().join(format!("lease-run-{dead_pid}-link"));
    std::os::unix::fs::symlink(target.path(), &link).expect("symlink");
    let out = lease(store.path())
        .env("TMPDIR", tmp.path())
        .args(["run", "--key", "next", "--", "true"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!stale.exists(), "a dead lease run's directory is removed");
    assert!(live.exists(), "a live process's directory is kept");
    assert!(
        target.path().join("keep").exists() && link.symlink_metadata().is_ok(),
        "a symlink is neither followed nor removed"
    );
}
