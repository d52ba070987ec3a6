//! Table helpers: create the table and enable TTL.

use std::time::Duration;

use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::operation::create_table::CreateTableError;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    TableDescription, TableStatus, TimeToLiveSpecification, TimeToLiveStatus,
};
use lease_core::LeaseError;
use tracing::Instrument;

use crate::DynamoErrorKind;
use crate::DynamoLeases;
use crate::error::{DynamoError, backend_error_in};
use crate::retry::with_retries;

/// How long [`DynamoLeases::create_table`] waits for the table to become `ACTIVE`.
const ACTIVE_TIMEOUT: Duration = Duration::from_secs(120);

/// The attempt timeout of the table requests: a cold endpoint (DynamoDB Local starting its JVM,
/// a region's control plane) may take far longer than the lease requests' attempt timeout.
const CONTROL_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(30);

/// A per-request configuration with the control plane's attempt timeout.
fn control_plane() -> aws_sdk_dynamodb::config::Builder {
    aws_sdk_dynamodb::config::Builder::default().timeout_config(
        aws_smithy_types::timeout::TimeoutConfig::builder()
            .operation_attempt_timeout(CONTROL_ATTEMPT_TIMEOUT)
            .build(),
    )
}

/// A request this crate could not build (never seen: its parts are all set).
fn build_error(error: aws_sdk_dynamodb::error::BuildError, table: &str) -> LeaseError {
    let mut dynamo = DynamoError::new(
        "CreateTable",
        table,
        DynamoErrorKind::Rejected,
        "the request could not be built",
    );
    dynamo.set_source(error);
    LeaseError::backend(crate::BACKEND, false, dynamo)
}

impl DynamoLeases {
    /// Creates the table on demand (`PAY_PER_REQUEST`) with the configured key attribute
    /// names (partition and sort key, both strings), waits until it is `ACTIVE`, and turns on
    /// DynamoDB TTL on the TTL attribute unless the manager was built
    /// [`without_ttl`](crate::DynamoLeasesBuilder::without_ttl). Idempotent: a table that
    /// exists is left as it is (and waited for) if its key schema is the one this manager
    /// writes, and TTL already on is fine. Call it once, at deployment or start-up.
    ///
    /// TTL only collects items: correctness never depends on it (DynamoDB may delete expired
    /// items days late).
    ///
    /// Needs `dynamodb:CreateTable`, `dynamodb:DescribeTable`, and with TTL
    /// `dynamodb:UpdateTimeToLive` and `dynamodb:DescribeTimeToLive`.
    ///
    /// ```no_run
    /// # async fn demo(leases: lease_dynamo::DynamoLeases) -> Result<(), lease_core::LeaseError> {
    /// leases.ensure_table().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`LeaseError::Backend`] with a [`DynamoError`] naming the table, or a timeout after two
    /// minutes. A table whose key schema is not exactly (partition key: S HASH, sort key: S
    /// RANGE) under this manager's [`AttributeNames`](crate::AttributeNames) is a permanent
    /// error of kind [`KeySchemaMismatch`](DynamoErrorKind::KeySchemaMismatch) that names
    /// both schemas.
    pub async fn ensure_table(&self) -> Result<(), LeaseError> {
        self.create_table().await?;
        if self.inner.ttl.is_some() {
            self.enable_ttl().await?;
        }
        Ok(())
    }

    /// Creates the table unless it exists, waits until it is `ACTIVE` and checks its key
    /// schema.
    async fn create_table(&self) -> Result<(), LeaseError> {
        let inner = &self.inner;
        let table = inner.table.as_str();
        let names = &inner.names;
        let span = tracing::info_span!("lease_dynamo.create_table", table);
        async {
            let attribute = |name: &str| {
                AttributeDefinition::builder()
                    .attribute_name(name)
                    .attribute_type(ScalarAttributeType::S)
                    .build()
                    .map_err(|e| build_error(e, table))
            };
            let element = |name: &str, kind| {
                KeySchemaElement::builder()
                    .attribute_name(name)
                    .key_type(kind)
                    .build()
                    .map_err(|e| build_error(e, table))
            };
            let request = inner
                .client
                .create_table()
                .table_name(table)
                .billing_mode(BillingMode::PayPerRequest)
                .attribute_definitions(attribute(names.partition_key.as_str())?)
                .attribute_definitions(attribute(names.sort_key.as_str())?)
                .key_schema(element(names.partition_key.as_str(), KeyType::Hash)?)
                .key_schema(element(names.sort_key.as_str(), KeyType::Range)?);
            // Retried when transient: a retry after a create that landed but timed out finds
            // the table in use, which is success.
            let result = with_retries(&inner.retry, &*inner.clock, None, "CreateTable", || {
                request
                    .clone()
                    .customize()
                    .config_override(control_plane())
                    .send()
            })
            .await
            .map_err(|failed| failed.error);
            match result {
                Ok(_) => tracing::info!("table created"),
                Err(e)
                    if matches!(
                        e.as_service_error(),
                        Some(CreateTableError::ResourceInUseException(_))
                    ) =>
                {
                    tracing::debug!("table exists");
                }
                Err(e) => {
                    return Err(backend_error_in("CreateTable", &self.error_context(), e));
                }
            }
            let description = self.wait_active().await?;
            self.check_key_schema(&description)
        }
        .instrument(span)
        .await
    }

    /// Refuses a table whose key schema is not the one this manager writes.
    fn check_key_schema(&self, description: &TableDescription) -> Result<(), LeaseError> {
        let names = &self.inner.names;
        let expected = [
            (names.partition_key.as_str(), "S", "HASH"),
            (names.sort_key.as_str(), "S", "RANGE"),
        ];
        let type_of = |name: &str| {
            description
                .attribute_definitions()
                .iter()
                .find(|d| d.attribute_name() == name)
                .map_or("?", |d| d.attribute_type().as_str())
        };
        let actual: Vec<(&str, &str, &str)> = description
            .key_schema()
            .iter()
            .map(|k| {
                (
                    k.attribute_name(),
                    type_of(k.attribute_name()),
                    k.key_type().as_str(),
                )
            })
            .collect();
        if actual == expected {
            return Ok(());
        }
        let show = |schema: &[(&str, &str, &str)]| {
            let parts: Vec<String> = schema
                .iter()
                .map(|(name, kind, role)| format!("{name}: {kind} {role}"))
                .collect();
            format!("({})", parts.join(", "))
        };
        let table = self.inner.table.as_str();
        Err(LeaseError::backend(
            crate::BACKEND,
            false,
            DynamoError::new(
                "CreateTable",
                table,
                DynamoErrorKind::KeySchemaMismatch,
                format!(
                    "table `{table}` has key schema {} but the leases are configured for {}; \
                     configure the key attribute names to match it, or use another table",
                    show(&actual),
                    show(&expected),
                ),
            ),
        ))
    }

    async fn wait_active(&self) -> Result<TableDescription, LeaseError> {
        let inner = &self.inner;
        let started = std::time::Instant::now();
        loop {
            let described = match inner
                .client
                .describe_table()
                .table_name(&inner.table)
                .customize()
                .config_override(control_plane())
                .send()
                .await
            {
                Ok(described) => described,
                Err(e) => {
                    let error = backend_error_in("DescribeTable", &self.error_context(), e);
                    // A cold or busy endpoint: keep waiting, up to the bound.
                    if !error.is_transient() || started.elapsed() > ACTIVE_TIMEOUT {
                        return Err(error);
                    }
                    tracing::debug!(%error, "table not described yet; waiting");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            };
            let status = described.table().and_then(|t| t.table_status());
            if status == Some(&TableStatus::Active)
                && let Some(description) = described.table()
            {
                return Ok(description.clone());
            }
            if started.elapsed() > ACTIVE_TIMEOUT {
                return Err(LeaseError::backend(
                    crate::BACKEND,
                    true,
                    DynamoError::new(
                        "DescribeTable",
                        &inner.table,
                        DynamoErrorKind::Unavailable,
                        format!(
                            "table not ACTIVE after {} (status {})",
                            lease_core::backend::fmt_duration(ACTIVE_TIMEOUT),
                            status.map_or("unknown", TableStatus::as_str)
                        ),
                    ),
                ));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Enables DynamoDB TTL on the TTL attribute. Already enabled is fine.
    async fn enable_ttl(&self) -> Result<(), LeaseError> {
        let inner = &self.inner;
        let table = inner.table.as_str();
        let span = tracing::info_span!(
            "lease_dynamo.enable_ttl",
            table,
            attribute = inner.names.ttl.as_str()
        );
        async {
            let spec = TimeToLiveSpecification::builder()
                .enabled(true)
                .attribute_name(inner.names.ttl.as_str())
                .build()
                .map_err(|e| build_error(e, table))?;
            match inner
                .client
                .update_time_to_live()
                .table_name(table)
                .time_to_live_specification(spec)
                .customize()
                .config_override(control_plane())
                .send()
                .await
            {
                Ok(_) => {
                    tracing::info!("TTL enabled");
                    Ok(())
                }
                Err(e) => {
                    // DynamoDB refuses to enable TTL twice with a `ValidationException`, the code
                    // of every invalid request: ask it how TTL stands instead of reading words.
                    if e.code() == Some("ValidationException") && self.ttl_enabled().await {
                        tracing::debug!("TTL already enabled");
                        return Ok(());
                    }
                    Err(backend_error_in(
                        "UpdateTimeToLive",
                        &self.error_context(),
                        e,
                    ))
                }
            }
        }
        .instrument(span)
        .await
    }

    /// Whether TTL is on (or turning on) on this manager's TTL attribute, by
    /// `DescribeTimeToLive`; `false` when that cannot be told.
    async fn ttl_enabled(&self) -> bool {
        let inner = &self.inner;
        let described = inner
            .client
            .describe_time_to_live()
            .table_name(&inner.table)
            .customize()
            .config_override(control_plane())
            .send()
            .await;
        described
            .ok()
            .and_then(|d| d.time_to_live_description)
            .is_some_and(|ttl| {
                matches!(
                    ttl.time_to_live_status,
                    Some(TimeToLiveStatus::Enabled | TimeToLiveStatus::Enabling)
                ) && ttl.attribute_name.as_deref() == Some(inner.names.ttl.as_str())
            })
    }
}
