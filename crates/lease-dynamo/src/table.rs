//! Table helpers: create the table and enable TTL.

use std::time::Duration;

use aws_sdk_dynamodb::operation::create_table::CreateTableError;
use aws_sdk_dynamodb::operation::update_time_to_live::UpdateTimeToLiveError;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    TableDescription, TableStatus, TimeToLiveSpecification,
};
use lease_core::LeaseError;
use tracing::Instrument;

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

fn build_error(what: impl std::fmt::Display, table: &str) -> LeaseError {
    LeaseError::backend(
        "dynamodb",
        false,
        DynamoError::new("CreateTable", table, what.to_string()),
    )
}

impl DynamoLeases {
    /// Creates the table on demand (`PAY_PER_REQUEST`) with the key schema from the options
    /// (partition and sort key, both strings) and waits until it is `ACTIVE`. A table that
    /// already exists is left as it is (and waited for), if its key schema is the one this
    /// manager writes.
    ///
    /// Needs `dynamodb:CreateTable` and `dynamodb:DescribeTable`.
    ///
    /// # Errors
    /// [`LeaseError::Backend`] naming the table, or a timeout after two minutes. A table whose
    /// key schema is not exactly (partition key: S HASH, sort key: S RANGE) under this manager's
    /// [key attribute names](crate::DynamoLeasesBuilder::with_key_attribute_names) is a permanent
    /// error that names both schemas.
    pub async fn create_table(&self) -> Result<(), LeaseError> {
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
                .attribute_definitions(attribute(names.partition_key())?)
                .attribute_definitions(attribute(names.sort_key())?)
                .key_schema(element(names.partition_key(), KeyType::Hash)?)
                .key_schema(element(names.sort_key(), KeyType::Range)?);
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
            (names.partition_key(), "S", "HASH"),
            (names.sort_key(), "S", "RANGE"),
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
            "dynamodb",
            false,
            DynamoError::key_schema_mismatch(
                "CreateTable",
                table,
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
                    "dynamodb",
                    true,
                    DynamoError::new(
                        "DescribeTable",
                        &inner.table,
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
    ///
    /// Needs `dynamodb:UpdateTimeToLive`. TTL only collects items: correctness never depends on
    /// it (DynamoDB may delete expired items days late).
    ///
    /// # Errors
    /// [`LeaseError::Backend`] naming the table.
    pub async fn enable_ttl(&self) -> Result<(), LeaseError> {
        let inner = &self.inner;
        let table = inner.table.as_str();
        let span = tracing::info_span!(
            "lease_dynamo.enable_ttl",
            table,
            attribute = inner.names.ttl()
        );
        async {
            let spec = TimeToLiveSpecification::builder()
                .enabled(true)
                .attribute_name(inner.names.ttl())
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
                Err(e) if is_already_enabled(&e) => Ok(()),
                Err(e) => Err(backend_error_in(
                    "UpdateTimeToLive",
                    &self.error_context(),
                    e,
                )),
            }
        }
        .instrument(span)
        .await
    }

    /// [`create_table`](Self::create_table), then [`enable_ttl`](Self::enable_ttl) when TTL is
    /// on.
    ///
    /// # Errors
    /// As those two.
    pub async fn ensure_table(&self) -> Result<(), LeaseError> {
        self.create_table().await?;
        if self.inner.include_ttl {
            self.enable_ttl().await?;
        }
        Ok(())
    }
}

fn is_already_enabled(
    e: &aws_sdk_dynamodb::error::SdkError<
        UpdateTimeToLiveError,
        aws_smithy_runtime_api::http::Response,
    >,
) -> bool {
    use aws_sdk_dynamodb::error::ProvideErrorMetadata;
    e.code() == Some("ValidationException")
        && e.message().is_some_and(|m| m.contains("already enabled"))
}
