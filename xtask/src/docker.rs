//! DynamoDB Local in a Docker container, started by xtask like the jar and stopped on drop, so
//! that no crate needs a Docker client among its features or dependencies: the suites only ever
//! read `LEASE_DYNAMO_ENDPOINT`.

use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::Result;

/// The image the suites run against.
const IMAGE: &str = "amazon/dynamodb-local:latest";
/// How long the container may take to accept connections (the JVM starts in ~2 s, a first pull
/// takes longer and happens before this clock starts).
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// A running `amazon/dynamodb-local` container, removed (`docker rm -f`) on drop.
#[derive(Debug)]
pub(crate) struct Container {
    id: String,
    address: SocketAddr,
}

impl Container {
    /// Starts the container in memory on a free loopback port chosen by Docker and returns once
    /// that port accepts connections.
    pub(crate) fn start() -> Result<Self> {
        let id = output(Command::new("docker").args([
            "run",
            "--detach",
            "--rm",
            "--publish",
            "127.0.0.1::8000",
            IMAGE,
            "-jar",
            "DynamoDBLocal.jar",
            "-inMemory",
            "-disableTelemetry",
        ]))?;
        // From here on, every early return drops `container` and so removes it.
        let mut container = Self {
            id,
            address: SocketAddr::from(([127, 0, 0, 1], 0)),
        };
        let published = output(Command::new("docker").args(["port", &container.id, "8000/tcp"]))?;
        container.address = published
            .lines()
            .find_map(|line| line.trim().parse().ok())
            .ok_or_else(|| format!("`docker port` printed no IPv4 address: {published}"))?;
        let deadline = Instant::now() + READY_TIMEOUT;
        while TcpStream::connect_timeout(&container.address, Duration::from_millis(500)).is_err() {
            if Instant::now() >= deadline {
                return Err(format!(
                    "DynamoDB Local in container {} did not accept connections on {} within {}s",
                    container.id,
                    container.address,
                    READY_TIMEOUT.as_secs()
                )
                .into());
            }
            sleep(Duration::from_millis(100));
        }
        println!(
            "    DynamoDB Local ready at {} (container {})",
            container.endpoint(),
            container.id
        );
        Ok(container)
    }

    /// `http://127.0.0.1:PORT`, the value of `LEASE_DYNAMO_ENDPOINT`.
    pub(crate) fn endpoint(&self) -> String {
        format!("http://{}", self.address)
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
            println!("    removed DynamoDB Local container {}", self.id);
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
