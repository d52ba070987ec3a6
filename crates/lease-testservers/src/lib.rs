//! Throwaway servers for the suites that need a real one of their own: started from the
//! distribution's binaries in a fresh temporary directory on a free loopback port, and gone when
//! the value is dropped, or when the test process that started them dies, even by `SIGKILL`.
//!
//! ```no_run
//! use lease_testservers::{PgCluster, StopMode};
//!
//! # fn main() -> std::io::Result<()> {
//! let primary = PgCluster::start()?;
//! primary.psql("CREATE TABLE t (x int); INSERT INTO t VALUES (1)")?;
//! let replica = primary.replica()?; // streaming from `primary`
//! let mut primary = primary;
//! primary.stop(StopMode::Immediate)?;
//! replica.promote()?; // now accepts writes
//! assert_eq!(replica.psql("SELECT count(*) FROM t")?.trim(), "1");
//! # Ok(())
//! # }
//! ```
//!
//! No async runtime: everything is `std::process`, and every call blocks until the server is in
//! the state it names (bounded by a timeout, an `io::Error` past it). The servers are PostgreSQL
//! ([`PgCluster`]) and Redis ([`RedisServer`]), on the same supervisor and directory machinery.
//!
//! Unix only: the servers run under `sh`, and as root under `setpriv` as an unprivileged user.
#![cfg(unix)]

mod binaries;
mod postgres;
mod redis;
mod scratch;
mod supervisor;
mod user;

pub use binaries::PgBinaries;
pub use postgres::{PgCluster, StopMode};
pub use redis::{RedisOptions, RedisServer, Reply};
