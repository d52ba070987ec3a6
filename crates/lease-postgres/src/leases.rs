//! The PostgreSQL lease manager: configuration and construction.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;
use lease_core::backend::default_safety_margin;
use lease_core::{Clock, LeaseError, RandomTokens, SystemClock, TokenSource};

use crate::RetryPolicy;
use crate::table::TableName;

/// Leases stored in one PostgreSQL table, one row per lease. It implements
/// [`LeaseBackend`](lease_core::LeaseBackend), [`LeaseListing`](lease_core::LeaseListing) and
/// [`FencedValues`](lease_core::FencedValues): hold a lease with a
/// [`LeaseGuard`](lease_core::LeaseGuard) over it, or call the trait's one-statement operations
/// directly.
///
/// Cheap to clone (clones share one configuration, one pool and one listener).
///
/// ```no_run
/// use lease_core::{AcquireOptions, LeaseBackend, LeaseKey};
/// use lease_postgres::PgLeases;
/// use std::time::Duration;
///
/// # async fn demo(pool: deadpool_postgres::Pool) -> Result<(), lease_core::LeaseError> {
/// let leases = PgLeases::builder(pool, "leases")
///     .with_max_clock_skew(Duration::from_millis(500))
///     .build()?;
/// // The raw operations, one statement each (a guard calls these for you).
/// let key = LeaseKey::new("nightly-report")?;
/// let d = Duration::from_secs(30);
/// let lease = leases.try_acquire(&key, d, &AcquireOptions::default()).await?;
/// let lease = leases.renew(&lease, d).await?;
/// leases.release(lease.key(), lease.token(), lease.fencing_token()).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PgLeases {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) pool: Pool,
    pub(crate) table: TableName,
    pub(crate) clock: Arc<dyn Clock>,
    /// The test hook: statements take the clock's wall time for the server's.
    pub(crate) manual_clock: bool,
    pub(crate) tokens: Arc<dyn TokenSource>,
    pub(crate) max_clock_skew: Duration,
    pub(crate) recreation_grace: Duration,
    pub(crate) safety_margin: Option<Duration>,
    pub(crate) retry: RetryPolicy,
    pub(crate) listener: Option<tokio_postgres::Config>,
    pub(crate) listener_state: Arc<crate::listen::Listener>,
    pub(crate) statements: crate::sql::Statements,
}

impl fmt::Debug for PgLeases {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = &self.inner;
        f.debug_struct("PgLeases")
            .field("table", &i.table.plain)
            .field("max_clock_skew", &i.max_clock_skew)
            .field("recreation_grace", &i.recreation_grace)
            .field("clock", &i.clock)
            .field("safety_margin", &i.safety_margin)
            .field("retry", &i.retry)
            .finish_non_exhaustive()
    }
}

/// Configures a [`PgLeases`].
///
/// | option | default |
/// |---|---|
/// | [`with_clock`](Self::with_clock) | [`SystemClock`] |
/// | [`with_token_source`](Self::with_token_source) | [`RandomTokens`] |
/// | [`with_max_clock_skew`](Self::with_max_clock_skew) | 0 |
/// | [`with_recreation_grace`](Self::with_recreation_grace) | 0 (off) |
/// | [`with_safety_margin`](Self::with_safety_margin) | [`default_safety_margin`] |
/// | [`with_retry_policy`](Self::with_retry_policy) | [`RetryPolicy::default`] |
/// | [`with_listener_config`](Self::with_listener_config) | none: observers poll ([`PgLeases::builder_for_url`] sets it) |
///
/// ```
/// use lease_postgres::{PgLeases, RetryPolicy};
/// use std::time::Duration;
///
/// # fn demo(pool: deadpool_postgres::Pool) -> Result<(), lease_core::LeaseError> {
/// let leases = PgLeases::builder(pool, "ops.leases")
///     .with_max_clock_skew(Duration::from_millis(500))
///     .with_recreation_grace(Duration::from_secs(60))
///     .with_retry_policy(RetryPolicy::default().with_max_attempts(3))
///     .build()?;
/// # let _ = leases; Ok(()) }
/// ```
pub struct PgLeasesBuilder {
    pool: Pool,
    table: String,
    clock: Arc<dyn Clock>,
    manual_clock: bool,
    tokens: Arc<dyn TokenSource>,
    max_clock_skew: Duration,
    recreation_grace: Duration,
    safety_margin: Option<Duration>,
    retry: RetryPolicy,
    listener: Option<tokio_postgres::Config>,
}

impl fmt::Debug for PgLeasesBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgLeasesBuilder")
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

impl PgLeasesBuilder {
    /// **A test hook**: a clock whose time every statement takes for the server's, so that a
    /// test advancing a [`ManualClock`](lease_core::ManualClock) expires leases without
    /// sleeping. Without it (the default, and what production code keeps), expiry is judged by
    /// the database server's clock alone and the client's wall clock is never read; the
    /// holder's deadlines come from the [`SystemClock`]'s monotonic time either way.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self.manual_clock = true;
        self
    }

    /// Where owner tokens come from when [`AcquireOptions`](lease_core::AcquireOptions) names
    /// none.
    pub fn with_token_source(mut self, tokens: Arc<dyn TokenSource>) -> Self {
        self.tokens = tokens;
        self
    }

    /// How far the database server's clock may have moved between two statements beyond what
    /// the holders' monotonic clocks measured (a failover to a server whose clock differs, an
    /// NTP step). Contenders take over an expired lease only once `expires_at + skew <= now` by
    /// the server's clock.
    pub fn with_max_clock_skew(mut self, skew: Duration) -> Self {
        self.max_clock_skew = skew;
        self
    }

    /// The longest lease any holder takes in this table. When the table is a new incarnation
    /// (created, truncated, dropped and recreated, restored from a dump, or a replica promoted),
    /// no key is granted for this long plus [`with_max_clock_skew`](Self::with_max_clock_skew),
    /// because a holder of the incarnation it replaced may still run until its next renewal
    /// fails: an acquisition fails with [`LeaseError::Held`] until then, so a waiting acquire
    /// sleeps until the grace ends. The check is folded into the acquire statement (no extra
    /// round trip). Zero (the default) turns it off.
    pub fn with_recreation_grace(mut self, grace: Duration) -> Self {
        self.recreation_grace = grace;
        self
    }

    /// The part of each lease the holder does not trust (see
    /// [`holder_deadline`](lease_core::backend::holder_deadline)).
    pub fn with_safety_margin(mut self, margin: Duration) -> Self {
        self.safety_margin = Some(margin);
        self
    }

    /// How connection failures are retried.
    pub fn with_retry_policy(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Where the one `LISTEN` connection that wakes waiters and observers connects (TLS as
    /// its `ssl_mode` says, as in [`pool_from_url`](crate::pool_from_url)). A pool does not
    /// tell its configuration, so without this option waiters and observers poll;
    /// [`PgLeases::builder_for_url`] sets it from the same URL as the pool. Behind a
    /// transaction-mode pooler (PgBouncer), which does not pass notifications on, give the
    /// database server's own address here.
    pub fn with_listener_config(mut self, config: tokio_postgres::Config) -> Self {
        self.listener = Some(config);
        self
    }

    /// Checks the configuration and builds the manager. Sends nothing.
    ///
    /// # Errors
    /// [`LeaseError::InvalidInput`] for an invalid table name.
    pub fn build(self) -> Result<PgLeases, LeaseError> {
        let table = TableName::parse(&self.table)?;
        let listener = self.listener;
        Ok(PgLeases {
            inner: Arc::new(Inner {
                pool: self.pool,
                clock: self.clock,
                manual_clock: self.manual_clock,
                tokens: self.tokens,
                max_clock_skew: self.max_clock_skew,
                recreation_grace: self.recreation_grace,
                safety_margin: self.safety_margin,
                retry: self.retry,
                listener,
                listener_state: Arc::default(),
                statements: crate::sql::Statements::new(&table),
                table,
            }),
        })
    }
}

impl PgLeases {
    /// A builder on `pool` and `table` (`table` or `schema.table`), every option at its default.
    pub fn builder(pool: Pool, table: impl Into<String>) -> PgLeasesBuilder {
        PgLeasesBuilder {
            pool,
            table: table.into(),
            clock: Arc::new(SystemClock),
            manual_clock: false,
            tokens: Arc::new(RandomTokens),
            max_clock_skew: Duration::ZERO,
            recreation_grace: Duration::ZERO,
            safety_margin: None,
            retry: RetryPolicy::default(),
            listener: None,
        }
    }

    /// A builder on a new pool for `url` (see [`pool_from_url`](crate::pool_from_url)), whose
    /// `LISTEN` connection goes to the same URL: what the `lease` command uses.
    ///
    /// ```
    /// # fn demo() -> Result<(), lease_core::LeaseError> {
    /// let leases = lease_postgres::PgLeases::builder_for_url("postgres://app@localhost/app", "leases")?
    ///     .build()?;
    /// # let _ = leases; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`pool_from_url`](crate::pool_from_url).
    pub fn builder_for_url(
        url: &str,
        table: impl Into<String>,
    ) -> Result<PgLeasesBuilder, LeaseError> {
        let pool = crate::pool_from_url(url)?;
        let config = crate::connect::parse_url(url)?;
        Ok(Self::builder(pool, table).with_listener_config(config))
    }

    /// A manager with every default.
    ///
    /// ```no_run
    /// # fn demo() -> Result<(), lease_core::LeaseError> {
    /// let pool = lease_postgres::pool_from_url("postgres://app@localhost/app")?;
    /// let leases = lease_postgres::PgLeases::new(pool, "leases")?;
    /// # let _ = leases; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`LeaseError::InvalidInput`] for an invalid table name.
    pub fn new(pool: Pool, table: impl Into<String>) -> Result<Self, LeaseError> {
        Self::builder(pool, table).build()
    }

    /// The table this manager's leases live in, as it was named.
    ///
    /// ```
    /// # fn demo(pool: deadpool_postgres::Pool) -> Result<(), lease_core::LeaseError> {
    /// let leases = lease_postgres::PgLeases::new(pool, "ops.leases")?;
    /// assert_eq!(leases.table(), "ops.leases");
    /// # Ok(()) }
    /// ```
    pub fn table(&self) -> &str {
        &self.inner.table.plain
    }

    /// The pool this manager sends its statements through.
    pub fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    pub(crate) fn margin(&self, duration: Duration) -> Duration {
        self.inner
            .safety_margin
            .unwrap_or_else(|| default_safety_margin(duration))
    }
}
