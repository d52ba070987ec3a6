//! PostgreSQL for the test suites: found or started, handed to `cargo` as environment, stopped.
//!
//! Discovery order, as for DynamoDB ([`crate::dynamo_local`]): a server the caller already runs
//! (`LEASE_POSTGRES_URL`), then Docker (a `postgres` container, [`crate::docker`]), then a
//! throwaway cluster from the distribution's server binaries ([`lease_testservers::PgCluster`]:
//! `initdb` as an unprivileged user, a free loopback port, the data in a temporary directory).

use std::process::Command;
use std::time::Instant;

use lease_testservers::{PgBinaries, PgCluster};

use crate::Result;
use crate::docker::Container;
use crate::step::Steps;

/// Where the suites find PostgreSQL; a caller-run server is taken from here as is.
pub(crate) const URL_VAR: &str = "LEASE_POSTGRES_URL";
/// Set to `1` when PostgreSQL was provisioned: the suites then fail instead of skipping.
const REQUIRE_VAR: &str = "LEASE_REQUIRE_POSTGRES";

/// How the PostgreSQL suites reach PostgreSQL during one task run.
#[derive(Debug)]
pub(crate) enum Postgres {
    /// `--no-postgres`: nothing is provisioned and the suites skip visibly.
    Disabled,
    /// `LEASE_POSTGRES_URL` was set by the caller; nothing is started.
    External { url: String },
    /// Docker answers: PostgreSQL in a container; removed when this value is dropped.
    Docker(Container),
    /// A throwaway cluster from the server binaries; stopped and removed when dropped.
    Cluster(PgCluster),
}

impl Postgres {
    /// Finds or starts PostgreSQL as one announced step of `steps`.
    pub(crate) fn provision(steps: &mut Steps) -> Result<Self> {
        let title = "provision PostgreSQL";
        let started = steps.announce(title);
        let postgres = if let Some(url) = url_from_env() {
            println!("    {URL_VAR} is set: using it, starting nothing");
            Self::External { url }
        } else if crate::docker::answers() {
            println!("    docker answers: PostgreSQL in a postgres container");
            Self::Docker(Container::postgres()?)
        } else {
            println!(
                "    no {URL_VAR} and no docker: a throwaway cluster from the server binaries"
            );
            Self::Cluster(start_cluster()?)
        };
        println!(
            "    the PostgreSQL suites run against {}",
            postgres.describe()
        );
        steps.finish(title, started);
        Ok(postgres)
    }

    /// One line for reports: which PostgreSQL the numbers were measured against.
    pub(crate) fn describe(&self) -> String {
        match self {
            Self::Disabled => "none".to_owned(),
            Self::External { .. } => format!("the caller's server ({URL_VAR})"),
            Self::Docker(_) => format!("{} in Docker", crate::docker::POSTGRES_IMAGE),
            Self::Cluster(cluster) => format!(
                "a throwaway cluster on loopback ({})",
                cluster.binaries().version().unwrap_or_default()
            ),
        }
    }

    /// Gives `command` the environment through which the suites find PostgreSQL.
    pub(crate) fn set_env(&self, command: &mut Command) {
        let url = match self {
            Self::Disabled => {
                command.env_remove(URL_VAR).env_remove(REQUIRE_VAR);
                return;
            }
            Self::External { url } => url.clone(),
            Self::Docker(container) => {
                format!("postgres://postgres@{}/postgres", container.address())
            }
            Self::Cluster(cluster) => cluster.url(),
        };
        command.env(URL_VAR, url).env(REQUIRE_VAR, "1");
    }
}

/// Starts a cluster and says where and how fast, or how to do without one.
fn start_cluster() -> Result<PgCluster> {
    let binaries = PgBinaries::find().map_err(|error| {
        format!(
            "{error}.\nOr point {URL_VAR} at a running PostgreSQL (a superuser's URL), or pass \
             --no-postgres to skip the PostgreSQL suites."
        )
    })?;
    let started = Instant::now();
    let cluster = PgCluster::start()
        .map_err(|error| format!("could not start a PostgreSQL cluster: {error}"))?;
    println!(
        "    {} ready at {} after {:.1}s (postmaster pid {}, data {}, binaries {})",
        binaries
            .version()
            .unwrap_or_else(|_| "PostgreSQL".to_owned()),
        cluster.url(),
        started.elapsed().as_secs_f64(),
        cluster.pid().unwrap_or_default(),
        cluster.data_dir().display(),
        binaries.dir().display()
    );
    Ok(cluster)
}

/// The caller's `LEASE_POSTGRES_URL`, if set and not empty.
fn url_from_env() -> Option<String> {
    std::env::var(URL_VAR)
        .ok()
        .filter(|url| !url.trim().is_empty())
}
