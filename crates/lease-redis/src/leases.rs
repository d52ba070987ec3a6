//! The Redis lease manager: configuration and construction.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use lease_core::backend::default_safety_margin;
use lease_core::{Clock, LeaseError, RandomTokens, SystemClock, TokenSource};

use crate::RetryPolicy;
use crate::keys::Keys;

/// Leases stored in Redis under one key prefix, one hash per lease. It implements
/// [`LeaseBackend`](lease_core::LeaseBackend), [`LeaseListing`](lease_core::LeaseListing) and
/// [`FencedValues`](lease_core::FencedValues): hold a lease with a
/// [`LeaseGuard`](lease_core::LeaseGuard) over it, or call the trait's one-script operations
/// directly.
///
/// Cheap to clone (clones share one configuration, one connection and one subscriber).
///
/// ```no_run
/// use lease_core::{AcquireOptions, LeaseBackend, LeaseKey};
/// use lease_redis::RedisLeases;
/// use std::time::Duration;
///
/// # async fn demo() -> Result<(), lease_core::LeaseError> {
/// let leases = RedisLeases::builder_for_url("redis://127.0.0.1:6379", "leases")?
///     .with_max_clock_skew(Duration::from_millis(500))
///     .build()?;
/// // The raw operations, one script each (a guard calls these for you).
/// let key = LeaseKey::new("nightly-report")?;
/// let d = Duration::from_secs(30);
/// let lease = leases.try_acquire(&key, d, &AcquireOptions::default()).await?;
/// let lease = leases.renew(&lease, d).await?;
/// leases.release(lease.key(), lease.token(), lease.fencing_token()).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisLeases {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) source: crate::source::Source,
    pub(crate) keys: Keys,
    pub(crate) clock: Arc<dyn Clock>,
    /// The test hook: scripts take the clock's wall time for the server's.
    pub(crate) manual_clock: bool,
    pub(crate) tokens: Arc<dyn TokenSource>,
    pub(crate) max_clock_skew: Duration,
    pub(crate) recreation_grace: Duration,
    pub(crate) safety_margin: Option<Duration>,
    pub(crate) retry: RetryPolicy,
    /// `WAIT` after each grant: how many replicas, within how long.
    pub(crate) wait_for_replicas: Option<(u32, Duration)>,
    pub(crate) connections: crate::connections::Connections,
    pub(crate) listener: Arc<crate::listen::Listener>,
    pub(crate) scripts: crate::scripts::Scripts,
}

impl fmt::Debug for RedisLeases {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = &self.inner;
        f.debug_struct("RedisLeases")
            .field("prefix", &i.keys.prefix)
            .field("max_clock_skew", &i.max_clock_skew)
            .field("recreation_grace", &i.recreation_grace)
            .field("clock", &i.clock)
            .field("safety_margin", &i.safety_margin)
            .field("retry", &i.retry)
            .field("wait_for_replicas", &i.wait_for_replicas)
            .finish_non_exhaustive()
    }
}

/// Configures a [`RedisLeases`].
///
/// | option | default |
/// |---|---|
/// | [`with_clock`](Self::with_clock) | [`SystemClock`] |
/// | [`with_token_source`](Self::with_token_source) | [`RandomTokens`] |
/// | [`with_max_clock_skew`](Self::with_max_clock_skew) | 0 |
/// | [`with_recreation_grace`](Self::with_recreation_grace) | 0 (off) |
/// | [`with_safety_margin`](Self::with_safety_margin) | [`default_safety_margin`] |
/// | [`with_retry_policy`](Self::with_retry_policy) | [`RetryPolicy::default`] |
/// | [`with_wait_for_replicas`](Self::with_wait_for_replicas) | none: a grant is reported once the primary has it |
///
/// ```
/// use lease_redis::{RedisLeases, RetryPolicy};
/// use std::time::Duration;
///
/// # fn demo() -> Result<(), lease_core::LeaseError> {
/// let leases = RedisLeases::builder_for_url("redis://127.0.0.1:6379", "ops:leases")?
///     .with_max_clock_skew(Duration::from_millis(500))
///     .with_recreation_grace(Duration::from_secs(60))
///     .with_retry_policy(RetryPolicy::default().with_max_attempts(3))
///     .build()?;
/// # let _ = leases; Ok(()) }
/// ```
pub struct RedisLeasesBuilder {
    source: crate::source::Source,
    prefix: String,
    clock: Arc<dyn Clock>,
    manual_clock: bool,
    tokens: Arc<dyn TokenSource>,
    max_clock_skew: Duration,
    recreation_grace: Duration,
    safety_margin: Option<Duration>,
    retry: RetryPolicy,
    wait_for_replicas: Option<(u32, Duration)>,
}

impl fmt::Debug for RedisLeasesBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLeasesBuilder")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisLeasesBuilder {
    /// **A test hook**: a clock whose time every script takes for the server's, so that a test
    /// advancing a [`ManualClock`](lease_core::ManualClock) expires leases without sleeping.
    /// Without it (the default, and what production code keeps), expiry is judged by the Redis
    /// server's clock (`TIME`) alone and the client's wall clock is never read; the holder's
    /// deadlines come from the [`SystemClock`]'s monotonic time either way.
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

    /// How far the Redis server's clock may have moved between two scripts beyond what the
    /// holders' monotonic clocks measured (a failover to a server whose clock differs, an NTP
    /// step). Contenders take over an expired lease only once `expires_at + skew <= now` by the
    /// server's clock.
    pub fn with_max_clock_skew(mut self, skew: Duration) -> Self {
        self.max_clock_skew = skew;
        self
    }

    /// The longest lease any holder takes under this prefix. When the server is a new
    /// incarnation (restarted, empty or from a persistence file that may lack the last writes;
    /// a replica promoted; the prefix's keys flushed or evicted), no key is granted for this
    /// long plus [`with_max_clock_skew`](Self::with_max_clock_skew), because a holder of the
    /// incarnation it replaced may still run until its next renewal fails: an acquisition
    /// fails with [`LeaseError::Held`] until then, so a waiting acquire sleeps until the grace
    /// ends. The check rides in the acquire script (no extra round trip; one `INFO` per new
    /// connection). Zero (the default) turns it off. See [`design`](crate::design).
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

    /// How connection failures and passing refusals are retried.
    pub fn with_retry_policy(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Reports a grant only once `replicas` replicas have acknowledged it (`WAIT replicas
    /// timeout`, on the same connection right after the acquire script: one more round trip
    /// per grant, none for a refusal). A grant fewer replicas acknowledged within `timeout` is
    /// released at once and the acquisition fails with a transient
    /// [`RedisErrorKind::Unreplicated`](crate::RedisErrorKind::Unreplicated) error, so that no
    /// holder works on a grant that a failover would forget.
    ///
    /// What it means, and what it does not: Redis replicates asynchronously and `WAIT` does
    /// not change that. It tells that `replicas` replicas *received* the grant; a failover may
    /// still promote one that did not (Sentinel and Cluster prefer the most up-to-date replica
    /// they can reach, but do not require it), and renewals and releases are not waited for.
    /// So it narrows the window in which a failover loses a grant, and does not close it: the
    /// [recreation grace](Self::with_recreation_grace) is what makes a lost grant safe.
    ///
    /// ```
    /// # fn demo() -> Result<(), lease_core::LeaseError> {
    /// use std::time::Duration;
    /// let leases = lease_redis::RedisLeases::builder_for_url("redis://127.0.0.1", "leases")?
    ///     .with_wait_for_replicas(1, Duration::from_millis(200))
    ///     .with_recreation_grace(Duration::from_secs(60))
    ///     .build()?;
    /// # let _ = leases; Ok(()) }
    /// ```
    pub fn with_wait_for_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.wait_for_replicas = (replicas > 0).then_some((replicas, timeout));
        self
    }

    /// Checks the configuration and builds the manager. Sends nothing.
    ///
    /// # Errors
    /// [`LeaseError::InvalidInput`] for an invalid key prefix.
    pub fn build(self) -> Result<RedisLeases, LeaseError> {
        let keys = Keys::parse(&self.prefix)?;
        Ok(RedisLeases {
            inner: Arc::new(Inner {
                source: self.source,
                keys,
                clock: self.clock,
                manual_clock: self.manual_clock,
                tokens: self.tokens,
                max_clock_skew: self.max_clock_skew,
                recreation_grace: self.recreation_grace,
                safety_margin: self.safety_margin,
                retry: self.retry,
                wait_for_replicas: self.wait_for_replicas,
                connections: crate::connections::Connections::default(),
                listener: Arc::default(),
                scripts: crate::scripts::Scripts::new(),
            }),
        })
    }
}

impl RedisLeases {
    /// A builder on `client` (its URL, TLS and credentials; build one with
    /// [`redis::Client::open`] or, for your own certificates, [`redis::Client::build_with_tls`])
    /// and key `prefix`, every option at its default. Every key this manager writes starts
    /// with `{prefix}`.
    ///
    /// ```
    /// # fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = redis::Client::open("redis://127.0.0.1:6379")?;
    /// let leases = lease_redis::RedisLeases::builder(client, "leases").build()?;
    /// # let _ = leases; Ok(()) }
    /// ```
    pub fn builder(client: redis::Client, prefix: impl Into<String>) -> RedisLeasesBuilder {
        Self::builder_on(crate::source::Source::Direct(Box::new(client)), prefix)
    }

    /// A builder that asks `sentinel` for the primary (built with
    /// [`SentinelServerType::Master`](redis::sentinel::SentinelServerType::Master)) whenever it
    /// opens a connection: after a failover, the next call finds the promoted replica (the
    /// calls in flight fail and are retried on a fresh connection). Every key is in the one
    /// primary, so [`with_recreation_grace`](RedisLeasesBuilder::with_recreation_grace) is what
    /// keeps a failover that lost a grant from granting a second holder.
    ///
    /// ```
    /// use redis::sentinel::{SentinelClient, SentinelServerType};
    /// # fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let sentinel = SentinelClient::build(
    ///     vec!["redis://10.0.0.1:26379", "redis://10.0.0.2:26379"],
    ///     "leases-primary",
    ///     None,
    ///     SentinelServerType::Master,
    /// )?;
    /// let leases = lease_redis::RedisLeases::builder_for_sentinel(sentinel, "leases")
    ///     .with_recreation_grace(std::time::Duration::from_secs(60))
    ///     .build()?;
    /// # let _ = leases; Ok(()) }
    /// ```
    pub fn builder_for_sentinel(
        sentinel: redis::sentinel::SentinelClient,
        prefix: impl Into<String>,
    ) -> RedisLeasesBuilder {
        let sentinel = std::sync::Arc::new(tokio::sync::Mutex::new(sentinel));
        Self::builder_on(crate::source::Source::Sentinel(sentinel), prefix)
    }

    /// A builder for a Redis Cluster: every key of `prefix` is in one hash slot (the hash tag
    /// `{prefix}`), so every script runs on the one primary that owns it, found by asking the
    /// first of `nodes` that answers (`CLUSTER SLOTS`) whenever a connection is opened. A slot
    /// moved or failed over answers `MOVED` (or the node is gone): the call is retried on a
    /// fresh connection to the new owner. Credentials and TLS come from the seed URLs
    /// (`rediss://` for TLS). A failover is a new incarnation, as with Sentinel.
    ///
    /// ```
    /// # fn demo() -> Result<(), lease_core::LeaseError> {
    /// let nodes = ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379"];
    /// let leases = lease_redis::RedisLeases::builder_for_cluster(&nodes, "leases")?
    ///     .with_recreation_grace(std::time::Duration::from_secs(60))
    ///     .build()?;
    /// # let _ = leases; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`LeaseError::InvalidInput`] when no URL is given or one does not parse. Nothing is
    /// sent.
    pub fn builder_for_cluster(
        nodes: &[&str],
        prefix: impl Into<String>,
    ) -> Result<RedisLeasesBuilder, LeaseError> {
        if nodes.is_empty() {
            return Err(LeaseError::invalid("Redis Cluster nodes", "none given"));
        }
        if nodes.iter().any(|url| url.starts_with("rediss:")) {
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let seeds = nodes
            .iter()
            .map(|url| {
                redis::Client::open(*url)
                    .map_err(|e| LeaseError::invalid("Redis Cluster node URL", e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let prefix = prefix.into();
        let source = crate::source::Source::Cluster {
            seeds: std::sync::Arc::new(seeds),
            slot: crate::source::hash_slot(&prefix),
        };
        Ok(Self::builder_on(source, prefix))
    }

    fn builder_on(source: crate::source::Source, prefix: impl Into<String>) -> RedisLeasesBuilder {
        RedisLeasesBuilder {
            source,
            prefix: prefix.into(),
            clock: Arc::new(SystemClock),
            manual_clock: false,
            tokens: Arc::new(RandomTokens),
            max_clock_skew: Duration::ZERO,
            recreation_grace: Duration::ZERO,
            safety_margin: None,
            retry: RetryPolicy::default(),
            wait_for_replicas: None,
        }
    }

    /// A builder on a client for `url`: `redis://[user:password@]host[:port][/db]`, or
    /// `rediss://...` for TLS through rustls with the system's root certificates (ring as its
    /// crypto provider, installed as the process default unless one is already). What the
    /// `lease` command will use.
    ///
    /// ```
    /// # fn demo() -> Result<(), lease_core::LeaseError> {
    /// let leases = lease_redis::RedisLeases::builder_for_url("rediss://cache.internal:6380", "leases")?
    ///     .build()?;
    /// # let _ = leases; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`LeaseError::InvalidInput`] when the URL does not parse. Nothing is sent.
    pub fn builder_for_url(
        url: &str,
        prefix: impl Into<String>,
    ) -> Result<RedisLeasesBuilder, LeaseError> {
        if url.starts_with("rediss:") {
            // redis-rs builds its TLS configuration with rustls's process-default provider; a
            // process that already chose one keeps it.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let client = redis::Client::open(url)
            .map_err(|e| LeaseError::invalid("Redis URL", e.to_string()))?;
        Ok(Self::builder(client, prefix))
    }

    /// The key prefix this manager's keys start with (inside braces: `{prefix}`).
    ///
    /// ```
    /// # fn demo() -> Result<(), lease_core::LeaseError> {
    /// let leases = lease_redis::RedisLeases::builder_for_url("redis://127.0.0.1", "ops:leases")?.build()?;
    /// assert_eq!(leases.prefix(), "ops:leases");
    /// # Ok(()) }
    /// ```
    pub fn prefix(&self) -> &str {
        &self.inner.keys.prefix
    }

    pub(crate) fn margin(&self, duration: Duration) -> Duration {
        self.inner
            .safety_margin
            .unwrap_or_else(|| default_safety_margin(duration))
    }
}
