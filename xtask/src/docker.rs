//! DynamoDB Local and PostgreSQL in Docker containers, started by xtask like the jar and the
//! throwaway cluster and removed on drop, so that no crate needs a Docker client among its
//! features or dependencies: the suites only ever read `LEASE_DYNAMO_ENDPOINT` and
//! `LEASE_POSTGRES_URL`.

use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::Result;

/// The DynamoDB image the suites run against.
const DYNAMO_IMAGE: &str = "amazon/dynamodb-local:latest";
/// The PostgreSQL image (a major version pinned: the suites' expectations of the server, such
/// as its error codes, are checked against it).
pub(crate) const POSTGRES_IMAGE: &str = "postgres:17";
/// The Redis image: 7, the major version whose scripts replicate their effects (so `TIME` may be
/// read in a writing script) and whose `INFO` names `master_replid`.
pub(crate) const REDIS_IMAGE: &str = "redis:7";
/// How long a container may take to be ready (DynamoDB's JVM starts in ~2 s, PostgreSQL's
/// first start runs initdb; a first pull takes longer and happens before this clock starts).
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long `docker info` may take before Docker counts as absent.
const DOCKER_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether `docker info` succeeds within [`DOCKER_TIMEOUT`] (a client without daemon fails fast,
/// an unreachable remote daemon may hang). Asked once per run: DynamoDB and PostgreSQL share the
/// answer.
pub(crate) fn answers() -> bool {
    static ANSWERS: OnceLock<bool> = OnceLock::new();
    *ANSWERS.get_or_init(|| {
        let spawned = Command::new("docker")
            .arg("info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let Ok(mut docker) = spawned else {
            return false;
        };
        let deadline = Instant::now() + DOCKER_TIMEOUT;
        loop {
            match docker.try_wait() {
                Ok(Some(status)) => return status.success(),
                Ok(None) if Instant::now() < deadline => sleep(Duration::from_millis(100)),
                _ => {
                    let _ = docker.kill();
                    let _ = docker.wait();
                    return false;
                }
            }
        }
    })
}

/// A running container, removed (`docker rm -f`) on drop.
#[derive(Debug)]
pub(crate) struct Container {
    id: String,
    address: SocketAddr,
    /// What runs in it, for messages.
    what: &'static str,
}

impl Container {
    /// Starts `amazon/dynamodb-local` in memory on a free loopback port chosen by Docker and
    /// returns once that port accepts connections.
    pub(crate) fn start() -> Result<Self> {
        let container = Self::run(
            "DynamoDB Local",
            &[
                DYNAMO_IMAGE,
                "-jar",
                "DynamoDBLocal.jar",
                "-inMemory",
                "-disableTelemetry",
            ],
            "8000/tcp",
        )?;
        container.wait_until_ready(|container| {
            TcpStream::connect_timeout(&container.address, Duration::from_millis(500)).is_ok()
        })?;
        println!(
            "    DynamoDB Local ready at {} (container {})",
            container.endpoint(),
            container.id
        );
        Ok(container)
    }

    /// Starts PostgreSQL ([`POSTGRES_IMAGE`]) with trust authentication, `wal_level=replica` and
    /// `fsync=off`, on a free loopback port chosen by Docker, and returns once it accepts
    /// connections over TCP (the image's first start runs a temporary server on its socket
    /// alone, so a TCP answer is the real one).
    pub(crate) fn postgres() -> Result<Self> {
        let container = Self::run(
            "PostgreSQL",
            &[
                "--env",
                "POSTGRES_HOST_AUTH_METHOD=trust",
                POSTGRES_IMAGE,
                "-c",
                "wal_level=replica",
                "-c",
                "fsync=off",
                "-c",
                "max_connections=200",
            ],
            "5432/tcp",
        )?;
        container.wait_until_ready(|container| {
            let mut ready = Command::new("docker");
            ready.args(["exec", &container.id, "pg_isready", "--host=127.0.0.1"]);
            ready.args(["--username=postgres", "--quiet"]);
            output(&mut ready).is_ok()
        })?;
        println!(
            "    PostgreSQL ready at {} (container {})",
            container.address, container.id
        );
        Ok(container)
    }

    /// Starts Redis ([`REDIS_IMAGE`]) without persistence on a free loopback port chosen by
    /// Docker, and returns once it answers `PING` (through `redis-cli` in the container).
    pub(crate) fn redis() -> Result<Self> {
        let container = Self::run(
            "Redis",
            &[
                REDIS_IMAGE,
                "redis-server",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            "6379/tcp",
        )?;
        container.wait_until_ready(|container| {
            let mut ready = Command::new("docker");
            ready.args(["exec", &container.id, "redis-cli", "PING"]);
            output(&mut ready).is_ok_and(|out| out.trim() == "PONG")
        })?;
        println!(
            "    Redis ready at {} (container {})",
            container.address, container.id
        );
        Ok(container)
    }

    /// `docker run --detach --rm` with `args` (image and its arguments last), its `port`
    /// published on a loopback port Docker picks.
    fn run(what: &'static str, args: &[&str], port: &str) -> Result<Self> {
        let publish = format!("127.0.0.1::{}", port.trim_end_matches("/tcp"));
        let id = output(
            Command::new("docker")
                .args(["run", "--detach", "--rm", "--publish", &publish])
                .args(args),
        )?;
        // From here on, every early return drops `container` and so removes it.
        let mut container = Self {
            id,
            address: SocketAddr::from(([127, 0, 0, 1], 0)),
            what,
        };
        let published = output(Command::new("docker").args(["port", &container.id, port]))?;
        container.address = published
            .lines()
            .find_map(|line| line.trim().parse().ok())
            .ok_or_else(|| format!("`docker port` printed no IPv4 address: {published}"))?;
        Ok(container)
    }

    fn wait_until_ready(&self, ready: impl Fn(&Self) -> bool) -> Result {
        let deadline = Instant::now() + READY_TIMEOUT;
        while !ready(self) {
            if Instant::now() >= deadline {
                return Err(format!(
                    "{} in container {} was not ready on {} within {}s",
                    self.what,
                    self.id,
                    self.address,
                    READY_TIMEOUT.as_secs()
                )
                .into());
            }
            sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    /// `http://127.0.0.1:PORT`, the value of `LEASE_DYNAMO_ENDPOINT`.
    pub(crate) fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The loopback address and port Docker published.
    pub(crate) fn address(&self) -> SocketAddr {
        self.address
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let removed = Command::new("docker")
            .args(["rm", "--force", &self.id])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if removed.is_ok_and(|status| status.success()) {
            println!("    removed {} container {}", self.what, self.id);
        } else {
            eprintln!(
                "    could not remove container {}: `docker rm -f` it",
                self.id
            );
        }
    }
}

/// The trimmed stdout of a command that must succeed.
fn output(command: &mut Command) -> Result<String> {
    let out = command
        .stdin(Stdio::null())
        .output()
        .map_err(|error| format!("could not run docker: {error}"))?;
    if !out.status.success() {
        return Err(format!(
            "{command:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}
