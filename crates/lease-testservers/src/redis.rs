//! [`RedisServer`]: a throwaway `redis-server` (its directory, log and optional append-only
//! file) in a fresh temporary directory, served on a free loopback port, with a small client
//! of its own for the commands a test sends (`command`).

use std::fs;
use std::io::{self, BufRead as _, BufReader, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::thread::sleep;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::scratch::{free_loopback_port, fresh_dir, log_tail};
use crate::supervisor::Supervised;
use crate::user::RunAs;

/// How long a server may take to answer after it was started, to stop, to sync from its
/// primary or to finish a promotion (well under a second each on loopback).
const TIMEOUT: Duration = Duration::from_secs(30);

/// How a [`RedisServer`] keeps its data.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RedisOptions {
    appendonly: bool,
    tls: bool,
    cluster: bool,
}

impl RedisOptions {
    /// No persistence (the default): no snapshot, no append-only file, so a restart starts
    /// empty.
    pub fn new() -> Self {
        Self::default()
    }

    /// An append-only file (`appendonly yes`, `appendfsync everysec`): a restart reloads it.
    pub fn with_appendonly(mut self) -> Self {
        self.appendonly = true;
        self
    }

    /// A TLS port besides the plain one ([`RedisServer::tls_url`]), with a certificate for
    /// `127.0.0.1` signed by a throwaway CA ([`RedisServer::ca_cert`]) that the `openssl`
    /// command makes in the server's directory. Clients need no certificate of their own.
    pub fn with_tls(mut self) -> Self {
        self.tls = true;
        self
    }

    /// Cluster mode (`cluster-enabled yes`, its bus on a free loopback port of its own, a node
    /// timeout of 1 s) and no slots yet: [`RedisServer::cluster`] starts and joins several.
    pub fn with_cluster(mut self) -> Self {
        self.cluster = true;
        self
    }
}

/// A reply of [`RedisServer::command`], as RESP2 gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A status (`+OK`) or a bulk string, as text.
    Text(String),
    /// An integer.
    Int(i64),
    /// A nil.
    Nil,
    /// An array.
    Array(Vec<Reply>),
}

impl Reply {
    /// The text of a status or bulk string; empty for anything else.
    pub fn text(&self) -> &str {
        match self {
            Self::Text(text) => text,
            _ => "",
        }
    }
}

/// A throwaway Redis server: a fresh temporary directory (its working directory), a free port
/// on 127.0.0.1 (bound to nothing else), run as an unprivileged user when the caller is root,
/// without persistence unless [`RedisOptions::with_appendonly`].
///
/// Dropping it stops the server and removes the directory. The server also stops when the
/// process that started it dies without dropping it, even by `SIGKILL`.
///
/// ```no_run
/// use lease_testservers::RedisServer;
///
/// # fn main() -> std::io::Result<()> {
/// let mut server = RedisServer::start()?;
/// server.command(&["SET", "k", "1"])?;
/// server.stop()?;
/// server.start_again()?; // no persistence: empty again
/// assert_eq!(server.command(&["EXISTS", "k"])?, lease_testservers::Reply::Int(0));
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct RedisServer {
    program: PathBuf,
    run_as: RunAs,
    dir: PathBuf,
    port: u16,
    /// The TLS port, with [`RedisOptions::with_tls`].
    tls_port: Option<u16>,
    /// The cluster bus port, with [`RedisOptions::with_cluster`].
    cluster_port: Option<u16>,
    options: RedisOptions,
    replica_of: Option<u16>,
    /// A Sentinel's group name and the port of the primary it monitors.
    sentinel_of: Option<(String, u16)>,
    server: Option<Supervised>,
}

impl RedisServer {
    /// Starts a server without persistence; returns once it answers.
    pub fn start() -> io::Result<Self> {
        Self::start_with(RedisOptions::new())
    }

    /// Starts a server with `options`; returns once it answers.
    pub fn start_with(options: RedisOptions) -> io::Result<Self> {
        Self::create(options, None, None)
    }

    fn create(
        options: RedisOptions,
        replica_of: Option<u16>,
        sentinel_of: Option<(String, u16)>,
    ) -> io::Result<Self> {
        let program = find_program()?;
        let run_as = RunAs::unprivileged()?;
        let dir = fresh_dir("redis")?;
        // From here on, every early return drops `server` and so removes the directory.
        let mut server = Self {
            program,
            run_as,
            dir,
            port: free_loopback_port()?,
            tls_port: None,
            cluster_port: None,
            options,
            replica_of,
            sentinel_of,
            server: None,
        };
        run_as.own(&server.dir)?;
        if options.cluster {
            server.cluster_port = Some(free_loopback_port()?);
        }
        if options.tls {
            server.tls_port = Some(free_loopback_port()?);
            make_certificates(&server.dir, run_as)?;
        }
        server.launch()?;
        Ok(server)
    }

    /// `redis://127.0.0.1:PORT`: no password, database 0.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `rediss://127.0.0.1:TLS_PORT`, with [`RedisOptions::with_tls`]: trust
    /// [`RedisServer::ca_cert`] to reach it.
    pub fn tls_url(&self) -> Option<String> {
        self.tls_port
            .map(|port| format!("rediss://127.0.0.1:{port}"))
    }

    /// The PEM of the throwaway CA that signed the TLS certificate, with
    /// [`RedisOptions::with_tls`].
    pub fn ca_cert(&self) -> io::Result<Vec<u8>> {
        fs::read(self.dir.join("ca.crt"))
    }

    /// The TCP port on 127.0.0.1 (kept across [`RedisServer::stop`] and
    /// [`RedisServer::start_again`]).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's log, for a test's failure message.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// The server's process id, as `INFO server` reports it.
    pub fn pid(&self) -> io::Result<u32> {
        let info = self.info("server")?;
        info_field(&info, "process_id")
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| io::Error::other("INFO server names no process_id"))
    }

    /// Sends one command on a connection of its own and returns the reply; a server error
    /// (`-ERR ...`) is an `io::Error` carrying its text.
    pub fn command(&self, args: &[&str]) -> io::Result<Reply> {
        command(self.port, args)
    }

    /// The text of `INFO section`.
    pub fn info(&self, section: &str) -> io::Result<String> {
        Ok(self.command(&["INFO", section])?.text().to_owned())
    }

    /// Stops the server (`SIGTERM`: with persistence, it writes its append-only file first) and
    /// returns once it has ended. The directory and the port stay for
    /// [`RedisServer::start_again`].
    pub fn stop(&mut self) -> io::Result<()> {
        self.stop_with(Signal::SIGTERM)
    }

    /// Kills the server (`SIGKILL`: nothing is written; with `appendfsync everysec` up to a
    /// second of acknowledged writes may be lost) and returns once it has ended.
    pub fn kill(&mut self) -> io::Result<()> {
        self.stop_with(Signal::SIGKILL)
    }

    fn stop_with(&mut self, signal: Signal) -> io::Result<()> {
        let pid = self.pid()?;
        let pid = Pid::from_raw(i32::try_from(pid).map_err(io::Error::other)?);
        kill(pid, signal)?;
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
                format!("the server did not stop ({signal}) within {TIMEOUT:?}"),
            )),
        }
    }

    /// Starts the stopped server again on the same directory and port: empty without
    /// persistence, from its append-only file with it. Returns once it answers.
    pub fn start_again(&mut self) -> io::Result<()> {
        if self.server.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "start_again: the server is running",
            ));
        }
        self.launch()
    }

    /// Starts a replica of this server (`--replicaof`, same options) on a free port and returns
    /// once its link to this one is up and the first sync is done.
    pub fn replica(&self) -> io::Result<RedisServer> {
        if self.server.is_none() {
            return Err(not_running("replica"));
        }
        let replica = Self::create(self.options, Some(self.port), None)?;
        replica.wait_for("in sync with its primary", || {
            let info = replica.info("replication")?;
            Ok(
                info_field(&info, "master_link_status").as_deref() == Some("up")
                    && info_field(&info, "master_sync_in_progress").as_deref() == Some("0"),
            )
        })?;
        Ok(replica)
    }

    /// Detaches this replica from its primary without promoting it: it points at a port
    /// nothing listens on, keeps its data and stops receiving writes. What a replica cut off by
    /// a network partition sees; [`RedisServer::promote`] afterwards promotes a replica that
    /// missed every write since.
    pub fn detach(&self) -> io::Result<()> {
        let nowhere = free_loopback_port()?.to_string();
        self.command(&["REPLICAOF", "127.0.0.1", &nowhere])?;
        self.wait_for("detached", || {
            let info = self.info("replication")?;
            Ok(info_field(&info, "master_link_status").as_deref() == Some("down"))
        })
    }

    /// Starts a Redis Cluster of `primaries` nodes (each [`RedisOptions::with_cluster`], no
    /// replicas), joined with `CLUSTER MEET`, the 16384 hash slots split evenly in order, and
    /// returns once every node reports `cluster_state:ok`.
    pub fn cluster(primaries: usize) -> io::Result<Vec<RedisServer>> {
        let nodes = (0..primaries.max(1))
            .map(|_| Self::start_with(RedisOptions::new().with_cluster()))
            .collect::<io::Result<Vec<_>>>()?;
        let count = u32::try_from(nodes.len()).map_err(io::Error::other)?;
        for (i, node) in (0u32..).zip(&nodes) {
            let (first, last) = (16384 * i / count, 16384 * (i + 1) / count - 1);
            node.command(&[
                "CLUSTER",
                "ADDSLOTSRANGE",
                &first.to_string(),
                &last.to_string(),
            ])?;
            if i > 0 {
                let bus = node.cluster_port.unwrap_or_default().to_string();
                nodes[0].command(&[
                    "CLUSTER",
                    "MEET",
                    "127.0.0.1",
                    &node.port.to_string(),
                    &bus,
                ])?;
            }
        }
        for node in &nodes {
            node.wait_for("a cluster member with every slot served", || {
                let info = node.command(&["CLUSTER", "INFO"])?.text().to_owned();
                Ok(info_field(&info, "cluster_state").as_deref() == Some("ok")
                    && info_field(&info, "cluster_known_nodes").as_deref()
                        == Some(count.to_string().as_str()))
            })?;
        }
        Ok(nodes)
    }

    /// Starts a Sentinel (`redis-server --sentinel`, quorum 1, the primary down after 500 ms
    /// without an answer, a failover timeout of 5 s) that monitors this server as the primary of
    /// group `name`, and returns once it names it. Start the replicas first: the Sentinel learns
    /// them from the primary's `INFO` when it starts.
    pub fn sentinel(&self, name: &str) -> io::Result<RedisServer> {
        if self.server.is_none() {
            return Err(not_running("sentinel"));
        }
        let sentinel = Self::create(
            RedisOptions::new(),
            None,
            Some((name.to_owned(), self.port)),
        )?;
        Ok(sentinel)
    }

    /// The port of the primary this Sentinel names for `name` now
    /// (`SENTINEL get-master-addr-by-name`).
    pub fn primary_port(&self, name: &str) -> io::Result<u16> {
        match self.command(&["SENTINEL", "get-master-addr-by-name", name])? {
            Reply::Array(items) if items.len() == 2 => items[1]
                .text()
                .parse()
                .map_err(|_| io::Error::other(format!("a port that is no number: {items:?}"))),
            other => Err(io::Error::other(format!(
                "no primary named {name}: {other:?}"
            ))),
        }
    }

    /// Waits until this Sentinel names the server on `port` as the primary of `name` (after a
    /// failover), for up to 30 s.
    pub fn wait_for_primary(&self, name: &str, port: u16) -> io::Result<()> {
        self.wait_for(&format!("naming port {port} the primary"), || {
            Ok(self.primary_port(name).ok() == Some(port))
        })
    }

    /// Promotes this replica (`REPLICAOF NO ONE`) and returns once it reports itself primary.
    pub fn promote(&self) -> io::Result<()> {
        self.command(&["REPLICAOF", "NO", "ONE"])?;
        self.wait_for("primary", || {
            let info = self.info("replication")?;
            Ok(info_field(&info, "role").as_deref() == Some("master"))
        })
    }

    /// Starts `redis-server` under the supervisor and waits until it answers as this server.
    fn launch(&mut self) -> io::Result<()> {
        if let Some((name, primary)) = self.sentinel_of.clone() {
            return self.launch_sentinel(&name, primary);
        }
        let mut server = self.run_as.command(&self.program);
        server
            .current_dir(&self.dir)
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1", "--protected-mode", "yes"])
            .arg("--dir")
            .arg(&self.dir)
            .args(["--save", "", "--daemonize", "no", "--logfile", ""])
            .args(["--enable-debug-command", "local"]);
        if self.options.appendonly {
            server.args(["--appendonly", "yes", "--appendfsync", "everysec"]);
        } else {
            server.args(["--appendonly", "no"]);
        }
        if let Some(tls_port) = self.tls_port {
            server
                .args(["--tls-port", &tls_port.to_string()])
                .args([
                    "--tls-cert-file",
                    "server.crt",
                    "--tls-key-file",
                    "server.key",
                ])
                .args(["--tls-ca-cert-file", "ca.crt", "--tls-auth-clients", "no"]);
        }
        if let Some(bus) = self.cluster_port {
            server
                .args([
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                ])
                .args(["--cluster-node-timeout", "1000"])
                .args(["--cluster-port", &bus.to_string()]);
        }
        if let Some(primary) = self.replica_of {
            server.args(["--replicaof", "127.0.0.1", &primary.to_string()]);
        }
        self.server = Some(Supervised::spawn(&server, "TERM", &self.log_path())?);
        let expected = self.dir.to_string_lossy().into_owned();
        // Its own directory, not just any answer: another server may have taken the port. And
        // done loading its data set: CONFIG and INFO answer while it loads, other commands
        // fail with `LOADING` (CI once read that from a GET right after a restart).
        self.wait_for("ready", || {
            let reply = self.command(&["CONFIG", "GET", "dir"])?;
            let own = matches!(&reply, Reply::Array(items) if items.get(1).map(Reply::text) == Some(expected.as_str()));
            Ok(own && info_field(&self.info("persistence")?, "loading").as_deref() == Some("0"))
        })
    }

    /// Starts a Sentinel from a configuration file of its own (Sentinel rewrites it) and waits
    /// until it names the primary it monitors.
    fn launch_sentinel(&mut self, name: &str, primary: u16) -> io::Result<()> {
        let config = self.dir.join("sentinel.conf");
        fs::write(
            &config,
            format!(
                "port {port}\nbind 127.0.0.1\nprotected-mode yes\ndaemonize no\nlogfile \"\"\n\
                 dir {dir}\n\
                 sentinel monitor {name} 127.0.0.1 {primary} 1\n\
                 sentinel down-after-milliseconds {name} 500\n\
                 sentinel failover-timeout {name} 5000\n",
                port = self.port,
                dir = self.dir.display(),
            ),
        )?;
        self.run_as.own(&config)?;
        let mut server = self.run_as.command(&self.program);
        server.current_dir(&self.dir).arg(&config).arg("--sentinel");
        self.server = Some(Supervised::spawn(&server, "TERM", &self.log_path())?);
        self.wait_for("naming its primary", || {
            Ok(self.primary_port(name).ok() == Some(primary))
        })
    }

    /// Runs `done` until it says yes, while the server runs, for up to [`TIMEOUT`]; an error
    /// with the server log's end otherwise.
    fn wait_for(&self, what: &str, done: impl Fn() -> io::Result<bool>) -> io::Result<()> {
        let deadline = Instant::now() + TIMEOUT;
        let mut last: String;
        loop {
            match &self.server {
                None => return Err(not_running("wait")),
                Some(server) => {
                    if let Some(status) = server.try_wait()? {
                        return Err(
                            self.failure(&format!("the server exited ({status}) before {what}"))
                        );
                    }
                }
            }
            match done() {
                Ok(true) => return Ok(()),
                Ok(false) => last = "not yet".to_owned(),
                Err(error) => last = error.to_string(),
            }
            if Instant::now() >= deadline {
                return Err(self.failure(&format!(
                    "the server on port {} was not {what} within {TIMEOUT:?} (last: {last})",
                    self.port
                )));
            }
            sleep(Duration::from_millis(20));
        }
    }

    /// An error that carries the end of the server log.
    fn failure(&self, what: &str) -> io::Error {
        io::Error::other(format!(
            "{what}\n--- last lines of {} ---\n{}",
            self.log_path().display(),
            log_tail(&self.log_path(), 40)
        ))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            // Closing the pipe makes the supervisor send SIGTERM.
            server.release(Duration::from_secs(10));
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A throwaway CA (`ca.crt`) and a certificate for `127.0.0.1` signed by it (`server.crt`,
/// `server.key`) in `dir`, made with the `openssl` command and readable by the server's user.
fn make_certificates(dir: &std::path::Path, run_as: RunAs) -> io::Result<()> {
    fs::write(
        dir.join("san.cnf"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
    )?;
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let steps: [&[&str]; 3] = [
        &[
            &["req", "-x509"][..],
            &ec[..],
            &[
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-days",
                "2",
                "-subj",
                "/CN=lease-testservers CA",
            ][..],
        ]
        .concat(),
        &[
            &["req"][..],
            &ec[..],
            &[
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
                "-subj",
                "/CN=127.0.0.1",
            ][..],
        ]
        .concat(),
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "2",
            "-extfile",
            "san.cnf",
        ],
    ];
    for args in steps {
        crate::scratch::run(
            std::process::Command::new("openssl")
                .current_dir(dir)
                .args(args),
        )
        .map_err(|e| io::Error::new(e.kind(), format!("making a test certificate: {e}")))?;
    }
    for file in ["ca.crt", "server.crt", "server.key"] {
        run_as.own(&dir.join(file))?;
    }
    Ok(())
}

/// `redis-server` on `PATH`, else Debian's `/usr/bin/redis-server`.
fn find_program() -> io::Result<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("redis-server"))
            .find(|p| p.is_file())
    });
    on_path
        .or_else(|| {
            let debian = PathBuf::from("/usr/bin/redis-server");
            debian.is_file().then_some(debian)
        })
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                "no redis-server on PATH or in /usr/bin; install it, e.g. `apt-get install -y \
                 redis-server` on Debian/Ubuntu",
            )
        })
}

/// The value of `name:` in an `INFO` reply.
pub(crate) fn info_field(info: &str, name: &str) -> Option<String> {
    info.lines()
        .find_map(|line| line.trim().strip_prefix(name)?.strip_prefix(':'))
        .map(str::to_owned)
}

/// One command on a fresh connection to `port` (RESP2), bounded by [`TIMEOUT`].
fn command(port: u16, args: &[&str]) -> io::Result<Reply> {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_millis(500))?;
    stream.set_read_timeout(Some(TIMEOUT))?;
    stream.set_write_timeout(Some(TIMEOUT))?;
    let mut request = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        request.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        request.extend_from_slice(arg.as_bytes());
        request.extend_from_slice(b"\r\n");
    }
    stream.write_all(&request)?;
    read_reply(&mut BufReader::new(stream))
}

fn read_reply(reader: &mut BufReader<TcpStream>) -> io::Result<Reply> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the connection closed",
        ));
    }
    let line = line.trim_end_matches(['\r', '\n']);
    let (kind, rest) = line.split_at(line.len().min(1));
    let number = || -> io::Result<i64> {
        rest.parse()
            .map_err(|_| io::Error::other(format!("a malformed reply line {line:?}")))
    };
    match kind {
        "+" => Ok(Reply::Text(rest.to_owned())),
        "-" => Err(io::Error::other(format!("the server answered: {rest}"))),
        ":" => Ok(Reply::Int(number()?)),
        "$" => {
            let Ok(length) = usize::try_from(number()?) else {
                return Ok(Reply::Nil);
            };
            let mut body = vec![0; length + 2];
            io::Read::read_exact(reader, &mut body)?;
            body.truncate(length);
            Ok(Reply::Text(String::from_utf8_lossy(&body).into_owned()))
        }
        "*" => {
            let Ok(count) = usize::try_from(number()?) else {
                return Ok(Reply::Nil);
            };
            (0..count)
                .map(|_| read_reply(reader))
                .collect::<io::Result<Vec<_>>>()
                .map(Reply::Array)
        }
        _ => Err(io::Error::other(format!("an unknown reply line {line:?}"))),
    }
}

fn not_running(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotConnected,
        format!("{what}: the server is not running"),
    )
}
