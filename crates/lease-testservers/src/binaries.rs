//! Where the PostgreSQL server binaries are: `pg_config --bindir`, else the newest
//! `/usr/lib/postgresql/*/bin` (Debian's layout, where several major versions may sit side by
//! side), else the folder of `initdb` on `PATH`.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The programs every cluster needs; a folder without them is not a server installation
/// (`pg_config` also comes with the client library's development files).
const REQUIRED: [&str; 4] = ["initdb", "postgres", "pg_basebackup", "pg_ctl"];

/// A folder holding the PostgreSQL server binaries (`initdb`, `postgres`, `pg_ctl`,
/// `pg_basebackup`; `psql` is looked up there first, then on `PATH`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgBinaries {
    dir: PathBuf,
}

impl PgBinaries {
    /// Finds the server binaries, or says where it looked and how to install them. Costs a
    /// `pg_config` run and a few `stat`s.
    pub fn find() -> io::Result<Self> {
        let candidates = pg_config_bindir()
            .into_iter()
            .chain(newest_debian_bindir())
            .chain(path_bindir());
        for dir in candidates {
            if REQUIRED.iter().all(|name| dir.join(name).is_file()) {
                return Ok(Self { dir });
            }
        }
        Err(io::Error::new(
            io::ErrorKind::NotFound,
            "no PostgreSQL server binaries (initdb, postgres, pg_ctl, pg_basebackup): looked in \
             `pg_config --bindir`, /usr/lib/postgresql/*/bin and PATH; install them, e.g. \
             `apt-get install -y postgresql` on Debian/Ubuntu",
        ))
    }

    /// The folder the binaries are in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The server's version line, as `postgres --version` prints it (e.g.
    /// `postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)`).
    pub fn version(&self) -> io::Result<String> {
        let output = Command::new(self.program("postgres"))
            .arg("--version")
            .stdin(Stdio::null())
            .output()?;
        if !output.status.success() {
            return Err(io::Error::other(format!(
                "`{} --version` failed ({})",
                self.program("postgres").display(),
                output.status
            )));
        }
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    }

    /// The path of the program `name` (`psql` and `pg_isready` come from the client package,
    /// which may live apart from the server's: then the bare name, found on `PATH`).
    pub(crate) fn program(&self, name: &str) -> PathBuf {
        let path = self.dir.join(name);
        if path.is_file() {
            path
        } else {
            PathBuf::from(name)
        }
    }
}

fn pg_config_bindir() -> Option<PathBuf> {
    let output = Command::new("pg_config")
        .arg("--bindir")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let dir = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    (output.status.success() && !dir.is_empty()).then(|| PathBuf::from(dir))
}

/// The `/usr/lib/postgresql/<major>/bin` with the highest major version.
fn newest_debian_bindir() -> Option<PathBuf> {
    let versions = std::fs::read_dir("/usr/lib/postgresql").ok()?;
    versions
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let major: f64 = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.is_dir().then_some((major, bin))
        })
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, bin)| bin)
}

/// The real folder of `initdb` on `PATH` (links resolved: `/usr/local/bin/initdb` may point into
/// a folder that also holds `postgres`).
fn path_bindir() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("initdb"))
        .find(|initdb| initdb.is_file())
        .and_then(|initdb| initdb.canonicalize().ok())
        .and_then(|initdb| initdb.parent().map(Path::to_path_buf))
}
