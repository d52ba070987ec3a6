//! Mapping SDK errors into [`LeaseError`], by meaning.

use std::error::Error as StdError;
use std::fmt;

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_smithy_runtime_api::http::Response as HttpResponse;
use aws_smithy_types::error::display::DisplayErrorContext;
use lease_core::LeaseError;

/// Error codes DynamoDB returns when a request may succeed if sent again.
const TRANSIENT_CODES: &[&str] = &[
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
    "InternalServerError",
    "ServiceUnavailable",
    "TransactionConflictException",
];

/// Codes that mean the server turned the request away unapplied because of load.
const THROTTLING_CODES: &[&str] = &[
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
];

/// A failed DynamoDB request: the source of [`LeaseError::Backend`] errors from this crate.
///
/// Its message names the operation, the table, and DynamoDB's error code, for example
/// ``UpdateItem on table `leases` failed: ResourceNotFoundException: Requested resource not found``.
#[derive(Debug)]
pub struct DynamoError {
    operation: &'static str,
    table: String,
    code: Option<String>,
    message: String,
    source: Option<Box<dyn StdError + Send + Sync>>,
}

impl DynamoError {
    pub(crate) fn new(operation: &'static str, table: &str, message: impl Into<String>) -> Self {
        Self {
            operation,
            table: table.to_owned(),
            code: None,
            message: message.into(),
            source: None,
        }
    }

    /// The DynamoDB operation (`UpdateItem`, `GetItem`, `Query`, `CreateTable`, ...).
    pub fn operation(&self) -> &'static str {
        self.operation
    }

    /// The table.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// DynamoDB's error code (`ResourceNotFoundException`, ...), when the server answered.
    pub fn code(&self) -> Option<&str> {
        self.code.as_deref()
    }
}

impl fmt::Display for DynamoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} on table `{}` failed: ", self.operation, self.table)?;
        if let Some(code) = &self.code {
            write!(f, "{code}: ")?;
        }
        f.write_str(&self.message)
    }
}

impl StdError for DynamoError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source
            .as_deref()
            .map(|s| s as &(dyn StdError + 'static))
    }
}

/// How a failed request should be treated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Class {
    /// Sending it again may succeed.
    pub(crate) transient: bool,
    /// The server certainly did not apply it (throttling); otherwise the outcome is unknown.
    pub(crate) unapplied: bool,
}

/// Classifies an SDK error: throttling, 5xx, timeouts and transport failures are transient;
/// missing tables, validation and access errors are permanent.
pub(crate) fn classify<E: ProvideErrorMetadata>(err: &SdkError<E, HttpResponse>) -> Class {
    let permanent = Class {
        transient: false,
        unapplied: true,
    };
    let unknown = Class {
        transient: true,
        unapplied: false,
    };
    match err {
        SdkError::ConstructionFailure(_) => permanent,
        SdkError::TimeoutError(_) => unknown,
        SdkError::DispatchFailure(failure) if failure.is_user() => permanent,
        SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => unknown,
        SdkError::ServiceError(service) => {
            let code = err.code().unwrap_or_default();
            if THROTTLING_CODES.contains(&code) {
                Class {
                    transient: true,
                    unapplied: true,
                }
            } else if TRANSIENT_CODES.contains(&code) || service.raw().status().is_server_error() {
                unknown
            } else {
                permanent
            }
        }
        _ => permanent,
    }
}

/// Turns a failed request into a [`LeaseError::Backend`] naming the operation and table.
pub(crate) fn backend_error<E>(
    operation: &'static str,
    table: &str,
    err: SdkError<E, HttpResponse>,
) -> LeaseError
where
    E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
{
    let class = classify(&err);
    let code = err.code().map(str::to_owned);
    let message = match (&err, err.message()) {
        (SdkError::ServiceError(_), Some(message)) => message.to_owned(),
        _ => DisplayErrorContext(&err).to_string(),
    };
    let message = match code.as_deref() {
        Some("ResourceNotFoundException") => format!(
            "{message} (does the table exist in this region and account? DynamoLeases::create_table makes it)"
        ),
        _ => message,
    };
    LeaseError::backend(
        "dynamodb",
        class.transient,
        DynamoError {
            operation,
            table: table.to_owned(),
            code,
            message,
            source: Some(Box::new(err)),
        },
    )
}

/// A reply that broke the item layout this crate writes.
pub(crate) fn malformed(
    operation: &'static str,
    table: &str,
    what: impl Into<String>,
) -> LeaseError {
    LeaseError::backend("dynamodb", false, DynamoError::new(operation, table, what))
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
    use aws_smithy_runtime_api::client::result::ConnectorError;
    use aws_smithy_runtime_api::http::StatusCode;
    use aws_smithy_types::body::SdkBody;
    use aws_smithy_types::error::ErrorMetadata;

    fn service(code: &str, status: u16) -> SdkError<UpdateItemError, HttpResponse> {
        let err =
            UpdateItemError::generic(ErrorMetadata::builder().code(code).message("m").build());
        let status = StatusCode::try_from(status).unwrap_or_else(|_| unreachable!());
        SdkError::service_error(err, HttpResponse::new(status, SdkBody::empty()))
    }

    #[test]
    fn classifies_by_meaning() {
        for code in THROTTLING_CODES {
            let class = classify(&service(code, 400));
            assert!(class.transient && class.unapplied, "{code}");
        }
        let class = classify(&service("InternalServerError", 500));
        assert!(class.transient && !class.unapplied, "5xx: outcome unknown");
        assert!(classify(&service("SomethingNew", 503)).transient, "any 5xx");
        for code in [
            "ResourceNotFoundException",
            "ValidationException",
            "AccessDeniedException",
        ] {
            assert!(!classify(&service(code, 400)).transient, "{code}");
        }
        let io: SdkError<UpdateItemError, HttpResponse> =
            SdkError::dispatch_failure(ConnectorError::io("reset".into()));
        assert!(classify(&io).transient);
        let timeout: SdkError<UpdateItemError, HttpResponse> = SdkError::timeout_error("slow");
        assert!(classify(&timeout).transient);
        let user: SdkError<UpdateItemError, HttpResponse> =
            SdkError::dispatch_failure(ConnectorError::user("bad endpoint".into()));
        assert!(!classify(&user).transient);
    }

    #[test]
    fn message_names_operation_table_and_code() {
        let err = backend_error(
            "UpdateItem",
            "leases",
            service("ResourceNotFoundException", 400),
        );
        assert!(!err.is_transient());
        let text = err.to_string();
        assert!(
            text.contains("UpdateItem on table `leases` failed: ResourceNotFoundException"),
            "{text}"
        );
        assert!(text.contains("create_table"), "{text}");
    }
}
