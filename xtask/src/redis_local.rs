//! Redis for the test suites: found or started, handed to `cargo` as environment, stopped.
//! The lease-redis suites that only need a server run against it, each test on a key prefix of
//! its own; those that restart, pause or fail over a server start private ones
//! (lease-testservers).
//!
//! Discovery order, as for PostgreSQL ([`crate::postgres_local`]): a server the caller already
//! runs (`LEASE_REDIS_URL`), then Docker (a `redis` container, [`crate::docker`]), then a
//! throwaway `redis-server` from the distribution's binary ([`lease_testservers::RedisServer`]:
//! an unprivileged user, a free loopback port, no persistence).

use std::process::Command;
use std::time::Instant;

use lease_testservers::RedisServer;

use crate::Result;
use crate::docker::Container;
use crate::step::Steps;

/// Where the suites find Redis; a caller-run server is taken from here as is.
pub(crate) const URL_VAR: &str = "LEASE_REDIS_URL";
/// Set to `1` when Redis was provisioned: the suites then fail instead of skipping.
const REQUIRE_VAR: &str = "LEASE_REQUIRE_REDIS";

/// How the Redis suites reach Redis during one task run.
#[derive(Debug)]
pub(crate) enum Redis {
    /// `--no-redis`: nothing is provisioned and the suites skip visibly (those with private
    /// servers still start them).
    Disabled,
    /// `LEASE_REDIS_URL` was set by the caller; nothing is started.
    External { url: String },
    /// Docker answers: Redis in a container; removed when this value is dropped.
    Docker(Container),
    /// A throwaway `redis-server`; stopped and its directory removed when dropped.
    Server(RedisServer),
}

impl Redis {
    /// Finds or starts Redis as one announced step of `steps`.
    pub(crate) fn provision(steps: &mut Steps) -> Result<Self> {
        let title = "provision Redis";
        let started = steps.announce(title);
        let redis = if let Some(url) = url_from_env() {
            println!("    {URL_VAR} is set: using it, starting nothing");
            Self::External { url }
        } else if crate::docker::answers() {
            println!("    docker answers: Redis in a redis container");
            Self::Docker(Container::redis()?)
        } else {
            println!("    no {URL_VAR} and no docker: a throwaway redis-server");
            Self::Server(start_server()?)
        };
        println!("    the Redis suites run against {}", redis.describe());
        steps.finish(title, started);
        Ok(redis)
    }

    /// One line for reports: which Redis the numbers were measured against.
    pub(crate) fn describe(&self) -> String {
        match self {
            Self::Disabled => "none".to_owned(),
            Self::External { .. } => format!("the caller's server ({URL_VAR})"),
            Self::Docker(_) => format!("{} in Docker", crate::docker::REDIS_IMAGE),
            Self::Server(server) => {
                format!("a throwaway redis-server on loopback ({})", server.url())
            }
        }
    }

    /// Gives `command` the environment through which the suites find Redis.
    pub(crate) fn set_env(&self, command: &mut Command) {
        let url = match self {
            Self::Disabled => {
                command.env_remove(URL_VAR).env_remove(REQUIRE_VAR);
                return;
            }
            Self::External { url } => url.clone(),
            Self::Docker(container) => format!("redis://{}", container.address()),
            Self::Server(server) => server.url(),
        };
        command.env(URL_VAR, url).env(REQUIRE_VAR, "1");
    }
}

/// Starts a server and says where and how fast, or how to do without one.
fn start_server() -> Result<RedisServer> {
    let started = Instant::now();
    let server = RedisServer::start().map_err(|error| {
        format!(
            "could not start a throwaway redis-server: {error}.\nOr point {URL_VAR} at a running \
             Redis, or pass --no-redis to skip the Redis suites."
        )
    })?;
    println!(
        "    redis-server ready at {} after {:.1}s (pid {})",
        server.url(),
        started.elapsed().as_secs_f64(),
        server.pid().unwrap_or_default(),
    );
    Ok(server)
}

/// The caller's `LEASE_REDIS_URL`, if set and not empty.
fn url_from_env() -> Option<String> {
    std::env::var(URL_VAR)
        .ok()
        .filter(|url| !url.trim().is_empty())
}
