//! [`PgCluster`]: a throwaway PostgreSQL cluster (data directory, socket, log) in a fresh
//! temporary directory, served on a free loopback port.

use std::fs;
use std::io::{self, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::binaries::PgBinaries;
use crate::scratch::{free_loopback_port, fresh_dir, log_tail, run};
use crate::supervisor::Supervised;
use crate::user::RunAs;

/// How long a server may take to accept a query after it was started, to stop, to stream from
/// its primary or to finish a promotion (each takes well under a second on loopback; crash
/// recovery after an immediate stop takes longer on a loaded machine).
const TIMEOUT: Duration = Duration::from_secs(60);

/// What the suites need of every cluster, appended to the `postgresql.conf` initdb wrote (a
/// replica copies it with the data). `fsync` is set apart: see [`PgCluster::start_durable`].
const SETTINGS: &str = "
# lease-testservers
listen_addresses = '127.0.0.1'
wal_level = replica
max_wal_senders = 10
max_replication_slots = 10
hot_standby = on
max_connections = 200
synchronous_commit = on
";

/// How [`PgCluster::stop`] shuts the server down (`pg_ctl stop -m ...`; the same signals).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopMode {
    /// Waits for every client to disconnect, then checkpoints (`SIGTERM`).
    Smart,
    /// Disconnects clients, rolls back their transactions, then checkpoints (`SIGINT`).
    Fast,
    /// Kills every server process without a checkpoint, as a crash would; the next start runs
    /// crash recovery (`SIGQUIT`).
    Immediate,
}

impl StopMode {
    fn signal(self) -> Signal {
        match self {
            Self::Smart => Signal::SIGTERM,
            Self::Fast => Signal::SIGINT,
            Self::Immediate => Signal::SIGQUIT,
        }
    }
}

/// A throwaway PostgreSQL cluster: `initdb` in a fresh temporary directory (as an unprivileged
/// user when the caller is root), trust authentication on loopback, a free port on 127.0.0.1,
/// the unix socket beside the data, `wal_level = replica` (replicas and promotion work),
/// `fsync = off` unless started with [`PgCluster::start_durable`].
///
/// Dropping it stops the server at once (the signal of `pg_ctl stop -m immediate`) and removes
/// the directory. The server also stops when the process that started it dies without dropping
/// it, even by `SIGKILL` (its directory then stays behind, named `lease-pg-<pid>-<n>`).
#[derive(Debug)]
pub struct PgCluster {
    binaries: PgBinaries,
    run_as: RunAs,
    dir: PathBuf,
    port: u16,
    server: Option<Supervised>,
}

impl PgCluster {
    /// Creates a cluster and starts it; returns once it answers a query. Takes about a second
    /// (`initdb` is most of it).
    ///
    /// With `fsync = off`: nothing acknowledged is lost when the server is stopped in any mode
    /// or killed (`synchronous_commit` stays on, so a commit is in the kernel's page cache before
    /// it is acknowledged); only a crash of the machine itself could lose it.
    pub fn start() -> io::Result<Self> {
        Self::create(false)
    }

    /// Like [`PgCluster::start`] with `fsync = on`, for a test whose claim rests on the disk
    /// itself (a machine crash or a copied data directory). No suite of this workspace needs it:
    /// process kills and every [`StopMode`] lose nothing acknowledged with `fsync = off`.
    pub fn start_durable() -> io::Result<Self> {
        Self::create(true)
    }

    fn create(durable: bool) -> io::Result<Self> {
        let binaries = PgBinaries::find()?;
        let run_as = RunAs::unprivileged()?;
        let dir = fresh_dir("pg")?;
        // From here on, every early return drops `cluster` and so removes the directory.
        let mut cluster = Self {
            binaries,
            run_as,
            dir,
            port: free_loopback_port()?,
            server: None,
        };
        run_as.own(&cluster.dir)?;
        let mut initdb = cluster.server_command("initdb");
        initdb
            .arg("--pgdata")
            .arg(cluster.data_dir())
            .args(["--username=postgres", "--auth=trust", "--encoding=UTF8"])
            .args(["--locale=C", "--no-sync", "--no-instructions"]);
        run(&mut initdb)?;
        let fsync = if durable { "on" } else { "off" };
        fs::OpenOptions::new()
            .append(true)
            .open(cluster.data_dir().join("postgresql.conf"))?
            .write_all(format!("{SETTINGS}fsync = {fsync}\n").as_bytes())?;
        cluster.launch()?;
        Ok(cluster)
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres`: the superuser, trusted, no password.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The TCP port on 127.0.0.1 (kept across [`PgCluster::stop`] and
    /// [`PgCluster::start_again`]).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The data directory (`PGDATA`).
    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The server's log (its stderr), for a test's failure message.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// The binaries this cluster runs on.
    pub fn binaries(&self) -> &PgBinaries {
        &self.binaries
    }

    /// The postmaster's process id, as it wrote it into `postmaster.pid`; an error when the
    /// server is stopped.
    pub fn pid(&self) -> io::Result<u32> {
        if self.server.is_none() {
            return Err(not_running("pid"));
        }
        let pid_file = fs::read_to_string(self.data_dir().join("postmaster.pid"))?;
        pid_file
            .lines()
            .next()
            .and_then(|line| line.trim().parse().ok())
            .ok_or_else(|| {
                io::Error::other(format!("postmaster.pid starts with no pid: {pid_file:?}"))
            })
    }

    /// Stops the server in `mode` and returns once every server process has ended. The data and
    /// the port stay for [`PgCluster::start_again`]. An error when it is stopped already, or
    /// when it has not ended within a minute (a [`StopMode::Smart`] stop with clients still
    /// connected; the server then keeps running).
    pub fn stop(&mut self, mode: StopMode) -> io::Result<()> {
        let pid = self.pid()?;
        let pid = Pid::from_raw(i32::try_from(pid).map_err(io::Error::other)?);
        kill(pid, mode.signal())?;
        let Some(server) = self.server.as_mut() else {
            return Err(not_running("stop"));
        };
        match server.wait_timeout(TIMEOUT)? {
            Some(_) => {
                if let Some(server) = self.server.take() {
                    server.release(Duration::ZERO);
                }
                Ok(())
            }
            None => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the server did not stop ({mode:?}) within {TIMEOUT:?}"),
            )),
        }
    }

    /// Starts the stopped server again on the same data and port (after an immediate stop, it
    /// runs crash recovery first); returns once it answers a query.
    pub fn start_again(&mut self) -> io::Result<()> {
        if self.server.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "start_again: the server is running",
            ));
        }
        self.launch()
    }

    /// Runs `sql` (one or more statements) through `psql` as the superuser and returns what it
    /// printed: rows unaligned, `|` between columns, one row a line, no headers, no command
    /// tags. The first failing statement ends the script; the error carries psql's stderr.
    pub fn psql(&self, sql: &str) -> io::Result<String> {
        psql(&self.binaries, self.port, sql)
    }

    /// Takes a base backup of this running server (`pg_basebackup -R`), starts it as a hot
    /// standby on a free port, and returns once it streams from this one.
    pub fn replica(&self) -> io::Result<PgCluster> {
        if self.server.is_none() {
            return Err(not_running("replica"));
        }
        let dir = fresh_dir("pg")?;
        let mut replica = Self {
            binaries: self.binaries.clone(),
            run_as: self.run_as,
            dir,
            port: free_loopback_port()?,
            server: None,
        };
        self.run_as.own(&replica.dir)?;
        let mut backup = replica.server_command("pg_basebackup");
        backup
            .args(["--host=127.0.0.1", "--username=postgres", "--no-password"])
            .arg(format!("--port={}", self.port))
            .arg("--pgdata")
            .arg(replica.data_dir())
            .args(["--write-recovery-conf", "--wal-method=stream"])
            .args(["--checkpoint=fast", "--no-sync"]);
        run(&mut backup)?;
        replica.launch()?;
        replica.wait_for(
            "streaming",
            "SELECT status FROM pg_stat_wal_receiver",
            |out| out.trim() == "streaming",
        )?;
        Ok(replica)
    }

    /// Promotes this standby (`pg_ctl promote`) and returns once it accepts writes.
    pub fn promote(&self) -> io::Result<()> {
        if self.server.is_none() {
            return Err(not_running("promote"));
        }
        let mut promote = self.server_command("pg_ctl");
        promote
            .args(["promote", "--wait", "--silent"])
            .arg(format!("--timeout={}", TIMEOUT.as_secs()))
            .arg("--pgdata")
            .arg(self.data_dir());
        run(&mut promote)?;
        // A transaction id is assigned only where writes are accepted.
        self.wait_for("accepting writes", "SELECT txid_current() > 0", |out| {
            out.trim() == "t"
        })
    }

    /// A command that runs the server program `name` as the server's user, in its directory.
    fn server_command(&self, name: &str) -> Command {
        let mut command = self.run_as.command(self.binaries.program(name));
        command
            .current_dir(&self.dir)
            .env("HOME", &self.dir)
            .env_remove("PGDATA")
            .env_remove("PGOPTIONS");
        command
    }

    /// Starts the postmaster under the supervisor and waits until it answers as this cluster.
    fn launch(&mut self) -> io::Result<()> {
        let mut postgres = self.server_command("postgres");
        postgres
            .arg("-D")
            .arg(self.data_dir())
            .args(["-p", &self.port.to_string()])
            .arg("-k")
            .arg(&self.dir);
        self.server = Some(Supervised::spawn(&postgres, "QUIT", &self.log_path())?);
        let data_dir = self.data_dir();
        let expected = data_dir.to_string_lossy().into_owned();
        // The data directory, not just any answer: another server may have taken the port.
        self.wait_for("ready", "SHOW data_directory", |out| out.trim() == expected)
    }

    /// Runs `sql` until its output satisfies `done`, while the server runs, for up to
    /// [`TIMEOUT`]; an error with the server log's end otherwise.
    fn wait_for(&self, what: &str, sql: &str, done: impl Fn(&str) -> bool) -> io::Result<()> {
        let address = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        let deadline = Instant::now() + TIMEOUT;
        let mut last = String::from("no answer");
        loop {
            if let Some(status) = self.server_status()? {
                return Err(self.failure(&format!("the server exited ({status}) before {what}")));
            }
            if TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_ok() {
                match self.psql(sql) {
                    Ok(out) if done(&out) => return Ok(()),
                    Ok(out) => last = out,
                    Err(error) => last = error.to_string(),
                }
            }
            if Instant::now() >= deadline {
                return Err(self.failure(&format!(
                    "the server on port {} was not {what} within {TIMEOUT:?} (last: {})",
                    self.port,
                    last.trim()
                )));
            }
            sleep(Duration::from_millis(20));
        }
    }

    fn server_status(&self) -> io::Result<Option<std::process::ExitStatus>> {
        match &self.server {
            None => Err(not_running("wait")),
            Some(server) => server.try_wait(),
        }
    }

    /// An error that carries the end of the server log, which says why the server gave up.
    fn failure(&self, what: &str) -> io::Error {
        io::Error::other(format!(
            "{what}\n--- last lines of {} ---\n{}",
            self.log_path().display(),
            log_tail(&self.log_path(), 40)
        ))
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            // Closing the pipe makes the supervisor send SIGQUIT, `pg_ctl stop -m immediate`.
            server.release(Duration::from_secs(10));
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Runs `sql` through the `psql` of `binaries` against the server on `port`.
fn psql(binaries: &PgBinaries, port: u16, sql: &str) -> io::Result<String> {
    let mut command = Command::new(binaries.program("psql"));
    command
        .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-f", "-"])
        .args(["-h", "127.0.0.1", "-U", "postgres", "-d", "postgres"])
        .args(["-p", &port.to_string()])
        .env("PGCONNECT_TIMEOUT", "5")
        .env("PGSSLMODE", "disable")
        .env_remove("PGOPTIONS")
        .env_remove("PGSERVICE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        let script = sql.to_owned();
        // A writer of its own: psql may fill its stdout before it has read the whole script.
        std::thread::spawn(move || {
            let _ = stdin.write_all(script.as_bytes());
        });
    }
    let output = child.wait_with_output()?;
    if output.status.success() {
        return Ok(String::from_utf8_lossy(&output.stdout).into_owned());
    }
    Err(io::Error::other(format!(
        "psql on port {port} failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    )))
}

fn not_running(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotConnected,
        format!("{what}: the server is not running"),
    )
}
