//! The DynamoDB lease manager: configuration and construction.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_smithy_types::retry::RetryConfig;
use lease_core::backend::default_safety_margin;
use lease_core::{Clock, LeaseError, LeaseKey, RandomTokens, SystemClock, TokenSource};

use crate::error::Context;
use crate::{AttributeNames, RetryPolicy};

/// Default sort key of leases named by a partition key alone (the Go default).
pub(crate) const DEFAULT_LOCK_SORT_KEY: &str = "LOCK";
/// Default time an item is kept after its lease ends before DynamoDB TTL may delete it.
pub(crate) const DEFAULT_TTL_BUFFER: Duration = Duration::from_secs(3600);
/// Longest owner description accepted, in bytes.
pub(crate) const MAX_OWNER_BYTES: usize = 1024;
/// DynamoDB's limit on a partition key value, in bytes.
pub(crate) const MAX_PARTITION_KEY_BYTES: usize = 2048;
/// DynamoDB's limit on a sort key value, in bytes.
pub(crate) const MAX_SORT_KEY_BYTES: usize = 1024;

/// Leases stored in one DynamoDB table, one item per lease: the Rust counterpart of the Go
/// `lease` package's manager. It implements [`LeaseBackend`](lease_core::LeaseBackend),
/// [`LeaseListing`](lease_core::LeaseListing) and [`FencedValues`](lease_core::FencedValues):
/// hold a lease with a [`LeaseGuard`](lease_core::LeaseGuard) over it, or call the trait's
/// one-request operations directly.
///
/// Cheap to clone (clones share one configuration). [`design`](crate::design) shows the item
/// layout, the request each operation sends and its cost, and the time model.
///
/// ```no_run
/// use lease_core::{AcquireOptions, LeaseBackend, LeaseKey};
/// use lease_dynamo::DynamoLeases;
/// use std::time::Duration;
///
/// # async fn demo(client: aws_sdk_dynamodb::Client) -> Result<(), lease_core::LeaseError> {
/// let leases = DynamoLeases::builder(client, "leases")
///     .with_max_clock_skew(Duration::from_millis(500))
///     .build()?;
/// // The raw operations, one conditional request each (a guard calls these for you).
/// let key = LeaseKey::new("nightly-report")?;
/// let d = Duration::from_secs(30);
/// let lease = leases.try_acquire(&key, d, &AcquireOptions::default()).await?;
/// let lease = leases.renew(&lease, d).await?;
/// leases.release(lease.key(), lease.token(), lease.fencing_token()).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct DynamoLeases {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) client: Client,
    pub(crate) table: String,
    pub(crate) names: AttributeNames,
    pub(crate) lock_sort_key: String,
    /// The TTL buffer; `None`: no TTL attribute is written.
    pub(crate) ttl: Option<Duration>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) tokens: Arc<dyn TokenSource>,
    pub(crate) validate: bool,
    pub(crate) max_clock_skew: Duration,
    pub(crate) recreation_grace: Duration,
    pub(crate) safety_margin: Option<Duration>,
    pub(crate) retry: RetryPolicy,
    pub(crate) list_page_size: Option<i32>,
}

impl fmt::Debug for DynamoLeases {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = &self.inner;
        f.debug_struct("DynamoLeases")
            .field("table", &i.table)
            .field("names", &i.names)
            .field("lock_sort_key", &i.lock_sort_key)
            .field("ttl", &i.ttl)
            .field("validate", &i.validate)
            .field("max_clock_skew", &i.max_clock_skew)
            .field("recreation_grace", &i.recreation_grace)
            .field("clock", &i.clock)
            .field("safety_margin", &i.safety_margin)
            .field("retry", &i.retry)
            .field("list_page_size", &i.list_page_size)
            .finish_non_exhaustive()
    }
}

/// Configures a [`DynamoLeases`]; every option defaults to the Go package's value.
///
/// | option | default | Go option |
/// |---|---|---|
/// | [`with_attribute_names`](Self::with_attribute_names) | [`AttributeNames::default`]: `pk`, `sk`, `lease_token`, `lease_expires_at`, `ttl`, ... | `WithKeyAttributeNames`, `WithLeaseAttributeNames` |
/// | [`with_lock_sort_key`](Self::with_lock_sort_key) | `LOCK` | `WithLockSortKey` |
/// | [`with_ttl_buffer`](Self::with_ttl_buffer) / [`without_ttl`](Self::without_ttl) | 1 hour | `WithTTLBuffer` / `WithIncludeTTL(false)` |
/// | [`with_clock`](Self::with_clock) | [`SystemClock`] | `WithNow` |
/// | [`with_token_source`](Self::with_token_source) | [`RandomTokens`] | `WithTokenGenerator` |
/// | [`without_input_validation`](Self::without_input_validation) | validated | `WithValidateInput(false)` |
/// | [`with_max_clock_skew`](Self::with_max_clock_skew) | 0 | |
/// | [`with_recreation_grace`](Self::with_recreation_grace) | 0 (off) | |
/// | [`with_safety_margin`](Self::with_safety_margin) | [`default_safety_margin`] | |
/// | [`with_retry_policy`](Self::with_retry_policy) | [`RetryPolicy::default`] | |
/// | [`with_list_page_size`](Self::with_list_page_size) | 1 MB pages | |
///
/// ```
/// use lease_dynamo::{AttributeNames, DynamoLeases, RetryPolicy};
/// use std::time::Duration;
///
/// # fn demo(client: aws_sdk_dynamodb::Client) -> Result<(), lease_core::LeaseError> {
/// let mut names = AttributeNames::default();
/// names.owner = "who".into();
/// let leases = DynamoLeases::builder(client, "leases")
///     .with_attribute_names(names)
///     .with_max_clock_skew(Duration::from_millis(500))
///     .with_retry_policy(RetryPolicy::default().with_max_attempts(3))
///     .without_ttl()
///     .build()?;
/// # let _ = leases; Ok(()) }
/// ```
pub struct DynamoLeasesBuilder {
    client: Client,
    table: String,
    names: AttributeNames,
    lock_sort_key: String,
    ttl: Option<Duration>,
    clock: Arc<dyn Clock>,
    tokens: Arc<dyn TokenSource>,
    validate: bool,
    max_clock_skew: Duration,
    recreation_grace: Duration,
    safety_margin: Option<Duration>,
    retry: RetryPolicy,
    list_page_size: Option<i32>,
}

impl fmt::Debug for DynamoLeasesBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DynamoLeasesBuilder")
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

impl DynamoLeasesBuilder {
    /// The attribute names of the lease item (default: the Go package's names, see
    /// [`AttributeNames`]). The key attribute names must match the table's key schema.
    pub fn with_attribute_names(mut self, names: AttributeNames) -> Self {
        self.names = names;
        self
    }

    /// The sort key of leases named by a partition key alone (Go's `WithLockSortKey`):
    /// `LeaseKey::new("a")` is stored as `(a, LOCK)` by default.
    pub fn with_lock_sort_key(mut self, sort: impl Into<String>) -> Self {
        self.lock_sort_key = sort.into();
        self
    }

    /// How long after a lease ends (or is released) DynamoDB TTL may delete its item (Go's
    /// `WithTTLBuffer`; default 1 hour). It must be at least one second and more than three
    /// times [`with_max_clock_skew`](Self::with_max_clock_skew): the fencing counter restarts
    /// from the clock after a TTL deletion, and that stays above every token issued before only
    /// under this bound (see *Fencing* in [`design`](crate::design)); [`build`](Self::build)
    /// checks it.
    pub fn with_ttl_buffer(mut self, buffer: Duration) -> Self {
        self.ttl = Some(buffer);
        self
    }

    /// Writes no TTL attribute, so DynamoDB never deletes a lease item (Go's
    /// `WithIncludeTTL(false)`), and [`ensure_table`](DynamoLeases::ensure_table) does not turn
    /// TTL on. The fencing counter is then never reset by a deletion either.
    pub fn without_ttl(mut self) -> Self {
        self.ttl = None;
        self
    }

    /// The clock for timestamps and deadlines (Go's `WithNow`); tests pass a
    /// [`ManualClock`](lease_core::ManualClock).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Where owner tokens come from when [`AcquireOptions`](lease_core::AcquireOptions) names
    /// none (Go's `WithTokenGenerator`).
    pub fn with_token_source(mut self, tokens: Arc<dyn TokenSource>) -> Self {
        self.tokens = tokens;
        self
    }

    /// Sends durations, key lengths and owner descriptions to DynamoDB unchecked (Go's
    /// `WithValidateInput(false)`): DynamoDB then refuses what it cannot store. Keys and tokens
    /// are valid by construction either way.
    pub fn without_input_validation(mut self) -> Self {
        self.validate = false;
        self
    }

    /// How far apart the wall clocks of any two hosts may be. Contenders take over an expired
    /// lease only once `expires_at + skew <= now` by their own clock.
    pub fn with_max_clock_skew(mut self, skew: Duration) -> Self {
        self.max_clock_skew = skew;
        self
    }

    /// The longest lease any holder takes in this table: after the table is created (or
    /// deleted and recreated, restored from a backup, or DynamoDB Local restarted), no key is
    /// granted for this long plus [`with_max_clock_skew`](Self::with_max_clock_skew), because a
    /// holder of the table it replaced may still run until its next renewal fails. Every
    /// acquisition whose write landed then reads the creation time of the table it landed in
    /// (`DescribeTable`, one more request, IAM `dynamodb:DescribeTable`; a restored table is a
    /// new table, and nothing in its old items tells them from live ones); in a younger table it
    /// gives the key back and fails with [`LeaseError::Held`] until the grace ends, so a waiting
    /// acquire sleeps until then. Past the grace, a fencing counter not above the grace's end (a
    /// restored item's, older than tokens already issued) is raised to the clock in
    /// microseconds first (one conditional `UpdateItem`, once per key and table), so fencing
    /// tokens never repeat or go backwards across a restore when the grace is at least the skew
    /// allowance. Refused acquisitions send nothing more. Zero (the default, as in the Go
    /// package) turns the check off and sends nothing. See `docs/correctness.md`, *Store loss*.
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

    /// How transient failures are retried.
    pub fn with_retry_policy(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// At most this many items per `Query` page when listing a partition (default: DynamoDB's
    /// 1 MB pages). Smaller pages bound the read units and memory of each request.
    pub fn with_list_page_size(mut self, items: u32) -> Self {
        self.list_page_size = Some(i32::try_from(items.max(1)).unwrap_or(i32::MAX));
        self
    }

    /// Checks the configuration and builds the manager.
    ///
    /// # Errors
    /// [`LeaseError::InvalidInput`] for an invalid table name, attribute names that are empty,
    /// too long or clash, an invalid lock sort key, or a TTL buffer that breaks the fencing
    /// argument (see [`with_ttl_buffer`](Self::with_ttl_buffer)).
    pub fn build(self) -> Result<DynamoLeases, LeaseError> {
        validate_table_name(&self.table)?;
        self.names.validate()?;
        if let Some(buffer) = self.ttl {
            validate_ttl_buffer(buffer, self.max_clock_skew)?;
        }
        LeaseKey::with_sort_key("x", self.lock_sort_key.as_str()).map_err(|_| {
            LeaseError::invalid(
                "lock sort key",
                "must be 1 to 1024 bytes with no control characters",
            )
        })?;
        let mut config = self.client.config().to_builder();
        // Retries happen in this crate, where a retried write can be reconciled.
        config.set_retry_config(Some(RetryConfig::disabled()));
        {
            let timeout = self.retry.attempt_timeout;
            let timeouts = self
                .client
                .config()
                .timeout_config()
                .map(|t| t.to_builder())
                .unwrap_or_default()
                .operation_attempt_timeout(timeout)
                .build();
            config.set_timeout_config(Some(timeouts));
        }
        Ok(DynamoLeases {
            inner: Arc::new(Inner {
                client: Client::from_conf(config.build()),
                table: self.table,
                names: self.names,
                lock_sort_key: self.lock_sort_key,
                ttl: self.ttl,
                clock: self.clock,
                tokens: self.tokens,
                validate: self.validate,
                max_clock_skew: self.max_clock_skew,
                recreation_grace: self.recreation_grace,
                safety_margin: self.safety_margin,
                retry: self.retry,
                list_page_size: self.list_page_size,
            }),
        })
    }
}

fn validate_ttl_buffer(buffer: Duration, skew: Duration) -> Result<(), LeaseError> {
    if buffer < Duration::from_secs(1) {
        return Err(LeaseError::invalid(
            "ttl buffer",
            format!(
                "{} is under the one second TTL works in; without_ttl() writes no TTL",
                lease_core::backend::fmt_duration(buffer)
            ),
        ));
    }
    if buffer <= skew.saturating_mul(3) {
        return Err(LeaseError::invalid(
            "ttl buffer",
            format!(
                "{} must exceed three times the clock skew allowance ({}): after a \
                 TTL deletion fencing tokens restart from the clock, and only this bound keeps \
                 them above the ones issued before",
                lease_core::backend::fmt_duration(buffer),
                lease_core::backend::fmt_duration(skew),
            ),
        ));
    }
    Ok(())
}

fn validate_table_name(table: &str) -> Result<(), LeaseError> {
    let ok_chars = table
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if !(3..=255).contains(&table.len()) || !ok_chars {
        return Err(LeaseError::invalid(
            "table name",
            format!("`{table}` must be 3 to 255 characters of a-z, A-Z, 0-9, `_`, `-`, `.`"),
        ));
    }
    Ok(())
}

impl DynamoLeases {
    /// A builder with the Go package's defaults, on `client` and `table`.
    ///
    /// The manager keeps a copy of `client`'s configuration with the SDK's retries turned off
    /// (it retries itself, so it can reconcile), and a per-attempt timeout from its
    /// [`RetryPolicy`]; interceptors, credentials, endpoint and region are kept.
    pub fn builder(client: Client, table: impl Into<String>) -> DynamoLeasesBuilder {
        DynamoLeasesBuilder {
            client,
            table: table.into(),
            names: AttributeNames::default(),
            lock_sort_key: DEFAULT_LOCK_SORT_KEY.to_owned(),
            ttl: Some(DEFAULT_TTL_BUFFER),
            clock: Arc::new(SystemClock),
            tokens: Arc::new(RandomTokens),
            validate: true,
            max_clock_skew: Duration::ZERO,
            recreation_grace: Duration::ZERO,
            safety_margin: None,
            retry: RetryPolicy::default(),
            list_page_size: None,
        }
    }

    /// A manager with every default (the Go package's defaults).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lease_core::LeaseError> {
    /// let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    /// let leases = lease_dynamo::DynamoLeases::new(aws_sdk_dynamodb::Client::new(&config), "leases")?;
    /// # let _ = leases; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`LeaseError::InvalidInput`] for an invalid table name.
    pub fn new(client: Client, table: impl Into<String>) -> Result<Self, LeaseError> {
        Self::builder(client, table).build()
    }

    /// The table this manager's leases live in: for logs, and for requests of your own beside
    /// the leases (a scan for reports, a backup).
    ///
    /// ```
    /// # fn demo(client: aws_sdk_dynamodb::Client) -> Result<(), lease_core::LeaseError> {
    /// let leases = lease_dynamo::DynamoLeases::new(client, "leases")?;
    /// assert_eq!(leases.table(), "leases");
    /// # Ok(()) }
    /// ```
    pub fn table(&self) -> &str {
        &self.inner.table
    }

    /// The TTL attribute for an item whose lease ends (or was released) at `ms`, or `None` when
    /// no TTL is written: TTL off, or a zero buffer (as in the Go package).
    pub(crate) fn ttl_at(&self, ms: u64) -> Option<u64> {
        let inner = &self.inner;
        inner.ttl.map(|buffer| crate::item::ttl_seconds(ms, buffer))
    }

    pub(crate) fn margin(&self, duration: Duration) -> Duration {
        self.inner
            .safety_margin
            .unwrap_or_else(|| default_safety_margin(duration))
    }

    /// The sort key value a key is stored under.
    pub(crate) fn sort_value<'a>(&'a self, key: &'a LeaseKey) -> &'a str {
        key.sort().unwrap_or(&self.inner.lock_sort_key)
    }
}

impl DynamoLeases {
    /// Everything this manager knows that helps explain a failed request.
    pub(crate) fn error_context(&self) -> Context<'_> {
        let inner = &self.inner;
        let config = inner.client.config();
        Context {
            table: &inner.table,
            region: config.region().map(|r| r.as_ref()),
            keys: Some((
                inner.names.partition_key.as_str(),
                inner.names.sort_key.as_str(),
            )),
        }
    }
}
