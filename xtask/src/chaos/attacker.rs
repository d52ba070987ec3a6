//! The attacker of a chaos run on files: another local user (`nobody`) who owns the shared
//! store `files/shared` and races symbolic and hard links to a root-owned sentinel at every
//! temporary name it sees there (`attacker.py`). At the end the sentinel must be as it was and
//! nothing may have been created outside the stores. Runs only as root (it needs another user);
//! skipped with the reason printed otherwise.

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `nobody`'s uid and `nogroup`'s gid.
const NOBODY: u32 = 65534;
/// The sentinel's known content.
const SECRET: &[u8] = b"root's secret: mode 0600, never to change\n";
/// What the run directory may gain at its top while running, besides what [`prepare`](super::slots::prepare)
/// created: the stop file, the fault log, DynamoDB Local's database, the table restore's requests.
const RUN_GAINS: [&str; 4] = ["stop", "faults.log", "dynamodb", "restore"];

/// The sentinel's metadata and content.
#[derive(Debug, PartialEq, Eq)]
struct Sentinel {
    mode: u32,
    uid: u32,
    gid: u32,
    size: u64,
    bytes: Vec<u8>,
}

impl Sentinel {
    fn read(path: &Path) -> std::io::Result<Self> {
        let meta = fs::symlink_metadata(path)?;
        Ok(Self {
            mode: meta.mode(),
            uid: meta.uid(),
            gid: meta.gid(),
            size: meta.len(),
            bytes: fs::read(path)?,
        })
    }
}

/// What the report says about the attacker.
#[derive(Debug)]
pub(crate) enum AttackerReport {
    /// Not run, and why.
    Skipped(String),
    /// Run: what it did (`key=count` pairs, as it printed them) and every check that failed.
    Ran {
        actions: String,
        problems: Vec<String>,
    },
}

impl AttackerReport {
    /// Whether a check failed.
    pub(crate) fn failed(&self) -> bool {
        matches!(self, Self::Ran { problems, .. } if !problems.is_empty())
    }
}

/// The running attacker and what it must leave alone.
#[derive(Debug)]
pub(crate) struct Attacker {
    child: Child,
    log: PathBuf,
    sentinel: PathBuf,
    before: Sentinel,
    run: PathBuf,
    top_before: BTreeSet<String>,
    files_before: BTreeSet<String>,
    sentinel_dir_before: BTreeSet<String>,
}

/// The shared store the attacker owns, beside the others under `files/`.
pub(crate) fn shared_store(run: &Path) -> PathBuf {
    run.join("files").join("shared")
}

fn listing(dir: &Path) -> BTreeSet<String> {
    fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect()
}

fn tool(candidates: &[&str]) -> Option<PathBuf> {
    candidates.iter().map(PathBuf::from).find(|p| p.exists())
}

impl Attacker {
    /// Hands `files/shared` to `nobody`, writes the sentinel (`sentinel/secret`, root's, 0600)
    /// and starts the attacker as `nobody`; the reason it was not started otherwise.
    pub(crate) fn start(run: &Path) -> Result<Self, String> {
        if !nix::unistd::geteuid().is_root() {
            return Err("the attacker runs as another user (nobody), which needs root".into());
        }
        // Not the `python3` on PATH: a shim under /root is out of `nobody`'s reach.
        let python = tool(&["/usr/bin/python3", "/usr/local/bin/python3"])
            .ok_or("the attacker needs /usr/bin/python3")?;
        let setpriv = tool(&["/usr/bin/setpriv", "/bin/setpriv"])
            .ok_or("the attacker needs setpriv (util-linux)")?;
        let io = |what: &str, e: std::io::Error| format!("{what}: {e}");
        let store = shared_store(run);
        std::os::unix::fs::chown(&store, Some(NOBODY), Some(NOBODY))
            .map_err(|e| io("chown files/shared", e))?;
        let sentinel_dir = run.join("sentinel");
        fs::create_dir_all(&sentinel_dir).map_err(|e| io("sentinel dir", e))?;
        fs::set_permissions(&sentinel_dir, fs::Permissions::from_mode(0o700))
            .map_err(|e| io("sentinel dir", e))?;
        let sentinel = sentinel_dir.join("secret");
        fs::write(&sentinel, SECRET).map_err(|e| io("sentinel", e))?;
        fs::set_permissions(&sentinel, fs::Permissions::from_mode(0o600))
            .map_err(|e| io("sentinel", e))?;
        let before = Sentinel::read(&sentinel).map_err(|e| io("sentinel", e))?;
        let script = run.join("attacker.py");
        fs::write(&script, include_str!("attacker.py")).map_err(|e| io("attacker.py", e))?;
        let log = run.join("logs").join("attacker.log");
        let out = fs::File::create(&log).map_err(|e| io("attacker log", e))?;
        let top_before = listing(run);
        let files_before = listing(&run.join("files"));
        let sentinel_dir_before = listing(&sentinel_dir);
        let child = Command::new(setpriv)
            .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
            .arg(python)
            .arg(&script)
            .arg(run.join("stop"))
            .arg(&sentinel)
            .arg(&store)
            .stdin(Stdio::null())
            .stdout(out.try_clone().map_err(|e| io("attacker log", e))?)
            .stderr(out)
            .spawn()
            .map_err(|e| io("start the attacker", e))?;
        Ok(Self {
            child,
            log,
            sentinel,
            before,
            run: run.to_path_buf(),
            top_before,
            files_before,
            sentinel_dir_before,
        })
    }

    /// Waits for the attacker to see the stop file (killed at `deadline`), then checks the
    /// sentinel and that nothing appeared outside the stores.
    pub(crate) fn finish(mut self, deadline: Instant) -> AttackerReport {
        let mut problems = Vec::new();
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) if !status.success() => {
                    problems.push(format!("the attacker exited with {status}"));
                    break;
                }
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                _ => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    problems.push("the attacker did not stop; killed".into());
                    break;
                }
            }
        }
        let actions = fs::read_to_string(&self.log)
            .ok()
            .and_then(|log| {
                log.lines()
                    .rev()
                    .find(|l| l.contains('='))
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| "(no counts printed: see logs/attacker.log)".into());
        match Sentinel::read(&self.sentinel) {
            Ok(after) if after == self.before => {}
            Ok(after) => problems.push(format!(
                "the sentinel changed: mode {:o} -> {:o}, owner {}:{} -> {}:{}, {} -> {} bytes, \
                 content {}",
                self.before.mode,
                after.mode,
                self.before.uid,
                self.before.gid,
                after.uid,
                after.gid,
                self.before.size,
                after.size,
                if after.bytes == self.before.bytes {
                    "the same"
                } else {
                    "changed"
                }
            )),
            Err(e) => problems.push(format!("the sentinel cannot be read: {e}")),
        }
        let sentinel_dir = self
            .sentinel
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        for (dir, before, may_gain) in [
            (self.run.clone(), &self.top_before, &RUN_GAINS[..]),
            (self.run.join("files"), &self.files_before, &[][..]),
            (sentinel_dir, &self.sentinel_dir_before, &[][..]),
        ] {
            let after = listing(&dir);
            let new: Vec<&String> = after
                .difference(before)
                .filter(|name| !may_gain.contains(&name.as_str()))
                .collect();
            let gone: Vec<&String> = before.difference(&after).collect();
            if !new.is_empty() || !gone.is_empty() {
                problems.push(format!(
                    "{} changed outside the stores: new {new:?}, gone {gone:?}",
                    dir.display()
                ));
            }
        }
        AttackerReport::Ran { actions, problems }
    }
}

#[cfg(test)]
mod tests {
    use super::AttackerReport;

    #[test]
    fn only_a_failed_check_fails_the_run() {
        assert!(!AttackerReport::Skipped("not root".into()).failed());
        let clean = AttackerReport::Ran {
            actions: "temp_seen=1".into(),
            problems: Vec::new(),
        };
        assert!(!clean.failed());
        let changed = AttackerReport::Ran {
            actions: String::new(),
            problems: vec!["the sentinel changed".into()],
        };
        assert!(changed.failed());
    }
}
