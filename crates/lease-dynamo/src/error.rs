//! Mapping SDK errors into [`LeaseError`], by meaning.
//!
//! A request that fails before it reaches DynamoDB fails because of how the client is
//! configured (no credentials, no region, an endpoint that is not a URL, a host name that does
//! not exist) or because the network failed on the way. Only the second may succeed if sent
//! again: the first are permanent, come back at once, and say what to fix.

use std::error::Error as StdError;
use std::fmt;

use aws_credential_types::provider::error::CredentialsError;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_smithy_runtime_api::http::Response as HttpResponse;
use lease_core::{LeaseError, LeaseKey};

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

/// The code DynamoDB answers for a table that does not exist (or that the caller cannot see).
const TABLE_MISSING_CODE: &str = "ResourceNotFoundException";

/// What resolvers say when a host name does not exist (rather than "try again later"): glibc,
/// musl, macOS and Windows.
const NO_SUCH_HOST: &[&str] = &[
    "Name or service not known",
    "No address associated with hostname",
    "Name does not resolve",
    "nodename nor servname provided",
    "No such host is known",
];

/// What DynamoDB (and DynamoDB Local) say in a `ValidationException` when the key sent does not
/// fit the table's key schema.
const KEY_SCHEMA_MISMATCH: &[&str] = &[
    "key element does not match the schema",
    "number of conditions on the keys is invalid",
    "Type mismatch for key",
    "Missing the key",
    "required keys was not given a value",
];

/// Where to put credentials, for messages.
const CREDENTIALS_HELP: &str = "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, \
     or run where an instance, container or web-identity role is available";

/// Where to put a region, for messages.
const REGION_HELP: &str =
    "set AWS_REGION or a region in the AWS profile, or pass one to the client";

/// A failed DynamoDB request: the source of [`LeaseError::Backend`] errors from this crate.
///
/// Its message names the operation, the table, DynamoDB's error code when the server answered,
/// and what to do about it when that is known, for example
/// ``UpdateItem on table `leases` failed: ResourceNotFoundException: Requested resource not
/// found; table `leases` does not exist in region us-east-1 (or the credentials cannot see
/// it)``, or ``GetItem on table `leases` failed: no AWS region configured (set AWS_REGION ...)``
/// for a request that never left the client.
#[derive(Debug)]
pub struct DynamoError {
    operation: &'static str,
    table: String,
    code: Option<String>,
    message: String,
    schema_mismatch: bool,
}

impl DynamoError {
    pub(crate) fn new(operation: &'static str, table: &str, message: impl Into<String>) -> Self {
        Self {
            operation,
            table: table.to_owned(),
            code: None,
            message: message.into(),
            schema_mismatch: false,
        }
    }

    /// A table whose key schema is not the one this manager writes.
    pub(crate) fn key_schema_mismatch(
        operation: &'static str,
        table: &str,
        message: impl Into<String>,
    ) -> Self {
        Self {
            schema_mismatch: true,
            ..Self::new(operation, table, message)
        }
    }

    /// Whether the table's key schema does not fit the keys this manager writes (two string
    /// attributes, named by [`AttributeNames`](crate::AttributeNames)): found by
    /// [`DynamoLeases::create_table`](crate::DynamoLeases::create_table) on an existing table,
    /// or said by DynamoDB of a request. Configure the key attribute names to match
    /// ([`with_key_attribute_names`](crate::DynamoLeasesBuilder::with_key_attribute_names)), or
    /// use another table.
    pub fn is_key_schema_mismatch(&self) -> bool {
        self.schema_mismatch
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

    /// Whether DynamoDB said the table does not exist (`ResourceNotFoundException`): it was
    /// never created, or it is in another region or account than the client's, or the
    /// credentials may not see it. [`DynamoLeases::create_table`](crate::DynamoLeases::create_table) makes it.
    ///
    /// Reach it from a [`LeaseError`] through [`std::error::Error::source`]:
    ///
    /// ```no_run
    /// use lease_dynamo::{DynamoError, DynamoLeases, LeaseBackendExt, LeaseKey};
    /// use std::time::Duration;
    ///
    /// # async fn demo(leases: DynamoLeases) -> Result<(), lease_core::LeaseError> {
    /// let key = LeaseKey::new("nightly")?;
    /// if let Err(e) = leases.acquire(&key, Duration::from_secs(30)).await {
    ///     let missing = std::error::Error::source(&e)
    ///         .and_then(|source| source.downcast_ref::<DynamoError>())
    ///         .is_some_and(DynamoError::is_table_missing);
    ///     if missing {
    ///         leases.ensure_table().await?; // and try again
    ///     } else {
    ///         return Err(e);
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_table_missing(&self) -> bool {
        self.code.as_deref() == Some(TABLE_MISSING_CODE)
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

/// The leaf of a report: the message already carries what the SDK said (its code and message,
/// its chain of causes in one line, or what that chain means in words), so there is no
/// `source` to say it again.
impl StdError for DynamoError {}

/// What is known, where an error is made, about the manager that sent the request: the table
/// always; the region and key attribute names when the caller has the manager. (The SDK's
/// `Config` does not say which endpoint URL it was given.)
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Context<'a> {
    pub(crate) table: &'a str,
    pub(crate) region: Option<&'a str>,
    /// Partition and sort key attribute names.
    pub(crate) keys: Option<(&'a str, &'a str)>,
}

impl<'a> Context<'a> {
    /// Only the table is known.
    #[cfg(test)]
    pub(crate) fn table(table: &'a str) -> Self {
        Self {
            table,
            ..Self::default()
        }
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

const PERMANENT: Class = Class {
    transient: false,
    unapplied: true,
};

const UNKNOWN: Class = Class {
    transient: true,
    unapplied: false,
};

/// Classifies an SDK error: throttling, 5xx, timeouts and network failures are transient;
/// missing tables, validation and access errors, and a client that cannot send at all (no
/// credentials, no region, an endpoint that is not a URL, a host name that does not exist) are
/// permanent.
pub(crate) fn classify<E>(err: &SdkError<E, HttpResponse>) -> Class
where
    E: ProvideErrorMetadata + StdError + 'static,
{
    match err {
        SdkError::ConstructionFailure(_) => PERMANENT,
        SdkError::TimeoutError(_) => UNKNOWN,
        SdkError::DispatchFailure(failure) if failure.is_user() => PERMANENT,
        SdkError::DispatchFailure(_) => match client_side_cause(err, &Context::default()) {
            // Nothing was sent: a retry that succeeds cannot find an earlier attempt applied.
            Some(cause) if cause.transient => Class {
                transient: true,
                unapplied: true,
            },
            Some(_) => PERMANENT,
            None => UNKNOWN,
        },
        SdkError::ResponseError(_) => UNKNOWN,
        SdkError::ServiceError(service) => {
            let code = err.code().unwrap_or_default();
            if THROTTLING_CODES.contains(&code) {
                Class {
                    transient: true,
                    unapplied: true,
                }
            } else if TRANSIENT_CODES.contains(&code) || service.raw().status().is_server_error() {
                UNKNOWN
            } else {
                PERMANENT
            }
        }
        _ => PERMANENT,
    }
}

/// Whether DynamoDB turned the request away for load (throttling), for the metrics.
#[cfg(feature = "metrics")]
pub(crate) fn is_throttling<E>(err: &SdkError<E, HttpResponse>) -> bool
where
    E: ProvideErrorMetadata + StdError + 'static,
{
    matches!(err, SdkError::ServiceError(_))
        && THROTTLING_CODES.contains(&err.code().unwrap_or_default())
}

/// Why a request failed before DynamoDB answered, in words an operator can act on.
#[derive(Debug, PartialEq, Eq)]
struct Cause {
    transient: bool,
    text: String,
}

impl Cause {
    fn permanent(text: String) -> Self {
        Self {
            transient: false,
            text,
        }
    }

    fn transient(text: String) -> Self {
        Self {
            transient: true,
            text,
        }
    }
}

/// The error and its sources, outermost first.
fn chain<'e>(err: &'e (dyn StdError + 'static)) -> Vec<&'e (dyn StdError + 'static)> {
    let mut links = vec![err];
    let mut next = err.source();
    while let Some(link) = next {
        // A cycle would be a bug in a source; never loop on one.
        if links.len() >= 32 {
            break;
        }
        links.push(link);
        next = link.source();
    }
    links
}

/// The texts of `links` joined with `: `, on one line.
fn joined(links: &[&(dyn StdError + 'static)]) -> String {
    let mut text = String::new();
    for link in links {
        let part = link.to_string();
        let part = part.trim();
        if part.is_empty() || text.ends_with(part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(part);
    }
    // Multi-line texts (the credential chain lists every provider tried) on one line.
    let mut line = String::with_capacity(text.len());
    for part in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if !line.is_empty() {
            line.push_str(if line.ends_with(':') { " " } else { "; " });
        }
        line.push_str(part);
    }
    line
}

/// Links of an error chain, outermost first.
type Links<'e> = [&'e (dyn StdError + 'static)];

/// Recognises the failures of a client that cannot send (credentials, region, endpoint, host
/// name) and network failures worth naming; `None` for anything else.
fn client_side_cause(err: &(dyn StdError + 'static), context: &Context<'_>) -> Option<Cause> {
    let links = chain(err);
    credentials_cause(&links).or_else(|| {
        let texts: Vec<String> = links.iter().map(|l| l.to_string()).collect();
        configuration_cause(&links, &texts, context)
            .or_else(|| resolution_cause(&links, &texts, context))
    })
}

/// Whether any link's text contains `needle`.
fn mentions(texts: &[String], needle: &str) -> bool {
    texts.iter().any(|t| t.contains(needle))
}

/// The credentials provider's own errors.
fn credentials_cause(links: &Links<'_>) -> Option<Cause> {
    for (i, link) in links.iter().enumerate() {
        if let Some(credentials) = link.downcast_ref::<CredentialsError>() {
            let detail = joined(&links[i..]);
            return Some(match credentials {
                CredentialsError::CredentialsNotLoaded(_) => Cause::permanent(format!(
                    "no AWS credentials found ({CREDENTIALS_HELP}): {detail}"
                )),
                CredentialsError::InvalidConfiguration(_) => Cause::permanent(format!(
                    "the AWS credentials configuration is invalid: {detail}"
                )),
                // Every provider of the chain had its turn: none found credentials in time.
                CredentialsError::ProviderTimedOut(_) => Cause::permanent(format!(
                    "no AWS credentials found: loading them timed out ({CREDENTIALS_HELP}): \
                     {detail}"
                )),
                // The instance metadata service turned us away (disabled, no role): the last
                // provider of the chain has nothing to give, now or later.
                CredentialsError::ProviderError(_) if metadata_refused(&links[i..]) => {
                    Cause::permanent(format!(
                        "no AWS credentials found ({CREDENTIALS_HELP}): {detail}"
                    ))
                }
                CredentialsError::ProviderError(_) => {
                    Cause::transient(format!("loading AWS credentials failed: {detail}"))
                }
                _ => Cause::permanent(format!("loading AWS credentials failed: {detail}")),
            });
        }
    }
    None
}

/// What the SDK's instance metadata client says when IMDS answers 401, 403 or 404: disabled,
/// forbidden, or no role attached. None of these changes by asking again.
const METADATA_REFUSED: &[&str] = &[
    "IMDS is disabled",
    "request forbidden",
    "insufficient permissions",
    "401",
    "403",
    "404",
    "not found",
];

/// Whether a credentials failure came from an instance metadata service that refused us.
fn metadata_refused(links: &Links<'_>) -> bool {
    let texts: Vec<String> = links.iter().map(|l| l.to_string()).collect();
    mentions(&texts, "IMDS") && METADATA_REFUSED.iter().any(|m| mentions(&texts, m))
}

/// A client configured so that it cannot sign or address a request: no credentials provider,
/// no or a bad region, a bad endpoint URL.
fn configuration_cause(
    links: &Links<'_>,
    texts: &[String],
    context: &Context<'_>,
) -> Option<Cause> {
    let region = context
        .region
        .map(|r| format!(" `{r}`"))
        .unwrap_or_default();
    if mentions(texts, "no identity resolver") || mentions(texts, "failed to select an auth scheme")
    {
        return Some(Cause::permanent(format!(
            "no AWS credentials found: the client has no credentials provider ({CREDENTIALS_HELP})"
        )));
    }
    if mentions(texts, "missing signing region") || mentions(texts, "Missing Region") {
        return Some(Cause::permanent(format!(
            "no AWS region configured ({REGION_HELP})"
        )));
    }
    if mentions(texts, "`region`") && mentions(texts, "valid host label") {
        return Some(Cause::permanent(format!(
            "the AWS region{region} is not valid: it must be a host label such as us-east-1"
        )));
    }
    if let Some((i, url)) = texts.iter().enumerate().find_map(|(i, t)| {
        let rest = t.strip_prefix("failed to apply endpoint `")?;
        Some((i, rest.split_once('`').map_or(rest, |(url, _)| url)))
    }) {
        let why = joined(&links[i + 1..]);
        let why = if why.is_empty() {
            String::new()
        } else {
            format!(": {why}")
        };
        return Some(Cause::permanent(format!(
            "endpoint `{url}` is not a valid URL{why} (write it as http://HOST:PORT or https://HOST)"
        )));
    }
    if let Some(scheme) = texts
        .iter()
        .find_map(|t| t.strip_prefix("unsupported scheme "))
    {
        return Some(Cause::permanent(format!(
            "the endpoint URL has the unsupported scheme `{scheme}` (use http:// or https://)"
        )));
    }
    None
}

/// The endpoint's host name or the endpoint itself could not be resolved.
fn resolution_cause(links: &Links<'_>, texts: &[String], context: &Context<'_>) -> Option<Cause> {
    if let Some(i) = texts.iter().position(|t| t == "dns error") {
        let detail = joined(&links[i..]);
        let region_hint = match context.region {
            Some(region) => format!(", and the region `{region}` when no URL is set"),
            None => ", or the region when no URL is set".to_owned(),
        };
        return Some(if NO_SUCH_HOST.iter().any(|n| mentions(texts, n)) {
            Cause::permanent(format!(
                "cannot resolve host: the endpoint's host name does not exist (check the \
                 endpoint URL{region_hint}): {detail}"
            ))
        } else {
            Cause::transient(format!(
                "cannot resolve host: the endpoint's host name did not resolve, DNS may be \
                 failing: {detail}"
            ))
        });
    }
    let endpoint_error = links
        .iter()
        .enumerate()
        .find(|(_, link)| format!("{link:?}").starts_with("ResolveEndpointError"));
    if let Some((i, _)) = endpoint_error {
        return Some(Cause::permanent(format!(
            "cannot work out the DynamoDB endpoint: {}",
            joined(&links[i..])
        )));
    }
    None
}

/// A hint for an error DynamoDB answered, by code and message.
fn service_hint(code: &str, message: &str, context: &Context<'_>) -> Option<String> {
    let table = context.table;
    match code {
        TABLE_MISSING_CODE => Some(match context.region {
            Some(region) => format!(
                "table `{table}` does not exist in region {region} (or the credentials cannot see it)"
            ),
            None => format!(
                "table `{table}` does not exist in this region and account (or the credentials cannot see it)"
            ),
        }),
        "ValidationException" if KEY_SCHEMA_MISMATCH.iter().any(|m| message.contains(m)) => {
            Some(match context.keys {
                Some((pk, sk)) => format!(
                    "the keys are written as string attributes ({pk}, {sk}); does the table's \
                     key schema match? configure the key attribute names to match it"
                ),
                None => "the keys are written as two string attributes (pk and sk unless \
                         renamed); does the table's key schema match? configure the key \
                         attribute names to match it"
                    .to_owned(),
            })
        }
        "AccessDeniedException" => Some(
            "the credentials are not allowed this operation on this table; grant the IAM \
             actions the lease-dynamo docs list"
                .to_owned(),
        ),
        "UnrecognizedClientException" | "InvalidClientTokenId" => Some(
            "the AWS access key ID or session token is not valid for this endpoint and region"
                .to_owned(),
        ),
        "InvalidSignatureException" | "SignatureDoesNotMatch" => Some(
            "the request signature is wrong: check the secret access key, and that this \
             host's clock is correct"
                .to_owned(),
        ),
        "ExpiredTokenException" | "RequestExpired" => {
            Some("the AWS credentials have expired; refresh them".to_owned())
        }
        "MissingAuthenticationTokenException" | "IncompleteSignatureException" => Some(format!(
            "the request was not signed properly ({CREDENTIALS_HELP})"
        )),
        _ => None,
    }
}

/// The SDK error's chain of causes on one line, in words: no `Debug` dump of the SDK's types
/// (which `DisplayErrorContext` appends).
pub(crate) fn plain(err: &(dyn StdError + 'static)) -> String {
    joined(&chain(err))
}

/// Turns a failed request into a [`LeaseError::Backend`] naming the operation and table.
#[cfg(test)]
pub(crate) fn backend_error<E>(
    operation: &'static str,
    table: &str,
    err: SdkError<E, HttpResponse>,
) -> LeaseError
where
    E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
{
    backend_error_in(operation, &Context::table(table), err)
}

/// [`backend_error`] with everything the caller knows about the manager, for better hints.
pub(crate) fn backend_error_in<E>(
    operation: &'static str,
    context: &Context<'_>,
    err: SdkError<E, HttpResponse>,
) -> LeaseError
where
    E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
{
    let class = classify(&err);
    let code = err.code().map(str::to_owned);
    let message = match (&err, err.message()) {
        (SdkError::ServiceError(_), Some(message)) => {
            match service_hint(code.as_deref().unwrap_or_default(), message, context) {
                Some(hint) => format!("{}; {hint}", message.trim_end_matches('.')),
                None => message.to_owned(),
            }
        }
        (SdkError::ServiceError(_), None) => plain(&err),
        _ => match client_side_cause(&err, context) {
            Some(cause) => cause.text,
            None => plain(&err),
        },
    };
    let schema_mismatch = code.as_deref() == Some("ValidationException")
        && err
            .message()
            .is_some_and(|m| KEY_SCHEMA_MISMATCH.iter().any(|k| m.contains(k)));
    LeaseError::backend(
        "dynamodb",
        class.transient,
        DynamoError {
            operation,
            table: context.table.to_owned(),
            code,
            message,
            schema_mismatch,
        },
    )
}

/// An item that broke the layout this crate (and the Go package) writes: a corrupt record, not a
/// failure of DynamoDB. Nothing was acted on halfway; an operator must look.
pub(crate) fn malformed(key: &LeaseKey, table: &str, what: impl fmt::Display) -> LeaseError {
    LeaseError::corrupt(key.clone(), format!("DynamoDB table {table}: {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
    use aws_smithy_runtime_api::client::result::ConnectorError;
    use aws_smithy_runtime_api::http::StatusCode;
    use aws_smithy_types::body::SdkBody;
    use aws_smithy_types::error::ErrorMetadata;

    type Sdk = SdkError<UpdateItemError, HttpResponse>;

    fn service_with(code: &str, message: &str, status: u16) -> Sdk {
        let err =
            UpdateItemError::generic(ErrorMetadata::builder().code(code).message(message).build());
        let status = StatusCode::try_from(status).unwrap_or_else(|_| unreachable!());
        SdkError::service_error(err, HttpResponse::new(status, SdkBody::empty()))
    }

    fn service(code: &str, status: u16) -> Sdk {
        service_with(code, "m", status)
    }

    /// A failure that never left the client, as the orchestrator reports them.
    fn other(source: impl Into<aws_smithy_runtime_api::box_error::BoxError>) -> Sdk {
        SdkError::dispatch_failure(ConnectorError::other(source.into(), None))
    }

    /// An error with a text and one source, like hyper's `ConnectError("dns error", io)`.
    #[derive(Debug)]
    struct Wrapped(&'static str, std::io::Error);

    impl fmt::Display for Wrapped {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }

    impl StdError for Wrapped {
        fn source(&self) -> Option<&(dyn StdError + 'static)> {
            Some(&self.1)
        }
    }

    fn dns(resolver_says: &str) -> Sdk {
        SdkError::dispatch_failure(ConnectorError::io(Box::new(Wrapped(
            "dns error",
            std::io::Error::other(resolver_says.to_owned()),
        ))))
    }

    fn text_of(err: Sdk, context: &Context<'_>) -> (bool, String) {
        let error = backend_error_in("UpdateItem", context, err);
        (error.is_transient(), report(&error))
    }

    /// The error and its sources, as a report shows them, joined by `: `.
    fn report(error: &(dyn StdError + 'static)) -> String {
        let mut text = error.to_string();
        let mut next = error.source();
        while let Some(source) = next {
            text.push_str(": ");
            text.push_str(&source.to_string());
            next = source.source();
        }
        text
    }

    fn describe(err: Sdk) -> (bool, String) {
        text_of(err, &Context::table("leases"))
    }

    #[test]
    fn every_kind_says_each_sentence_once_in_a_report() {
        let kinds: Vec<(&str, Sdk)> = vec![
            (
                "missing table",
                service_with(TABLE_MISSING_CODE, "Requested resource not found", 400),
            ),
            (
                "throttled",
                service_with("ThrottlingException", "Rate exceeded", 400),
            ),
            (
                "server",
                service_with("InternalServerError", "Internal error", 500),
            ),
            ("no message", service("ValidationException", 400)),
            ("timeout", SdkError::timeout_error("slow")),
            ("dns", dns("Name or service not known")),
            ("other", other("something new went wrong")),
            (
                "credentials",
                other(CredentialsError::not_loaded(
                    "no credentials found in chain",
                )),
            ),
        ];
        for (kind, err) in kinds {
            let error = backend_error_in("UpdateItem", &Context::table("leases"), err);
            let mut levels = vec![error.to_string()];
            let mut next = StdError::source(&error);
            while let Some(source) = next {
                levels.push(source.to_string());
                next = source.source();
            }
            assert_eq!(levels.len(), 2, "{kind}: {levels:?}");
            assert!(
                levels[1].starts_with("UpdateItem on table `leases` failed: "),
                "{kind}"
            );
            for sentence in levels[0].split([':', ';', '(', ')']).map(str::trim) {
                assert!(
                    sentence.len() < 8 || !levels[1].contains(sentence),
                    "{kind}: {sentence:?} is said twice: {levels:?}"
                );
            }
        }
    }

    #[test]
    fn no_sdk_debug_dump_in_messages() {
        // Issue 23: messages ended in `(TimeoutError(TimeoutError { source: ... }))`.
        for err in [
            SdkError::timeout_error("operation attempt timeout occurred after 2s"),
            other("something new went wrong"),
            service("ValidationException", 400),
        ] {
            let (_, text) = describe(err);
            assert!(!text.contains(" { ") && !text.contains("(\""), "{text}");
            assert!(
                !text.contains("TimeoutError(") && !text.contains("DispatchFailure("),
                "{text}"
            );
        }
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
            "UnrecognizedClientException",
            "ExpiredTokenException",
        ] {
            assert!(!classify(&service(code, 400)).transient, "{code}");
        }
        let io: Sdk = SdkError::dispatch_failure(ConnectorError::io("reset".into()));
        assert!(classify(&io).transient);
        let timeout: Sdk = SdkError::timeout_error("slow");
        assert!(classify(&timeout).transient);
        let user: Sdk = SdkError::dispatch_failure(ConnectorError::user("bad endpoint".into()));
        assert!(!classify(&user).transient);
        // An unrecognised client-side failure stays transient, outcome unknown.
        let class = classify(&other("something new"));
        assert!(class.transient && !class.unapplied);
    }

    #[test]
    fn credential_failures_are_permanent_unless_the_provider_may_recover() {
        let (transient, text) = describe(other(CredentialsError::not_loaded(
            "no credentials found in chain. Attempted:\n  Environment: not set\n  Profile: not enabled",
        )));
        assert!(!transient, "{text}");
        assert!(
            text.starts_with("dynamodb backend failed: UpdateItem on table `leases` failed: no AWS credentials found (set AWS_ACCESS_KEY_ID"),
            "{text}"
        );
        assert!(
            text.contains("Attempted: Environment: not set; Profile: not enabled"),
            "{text}"
        );

        let (transient, text) = describe(other(CredentialsError::invalid_configuration(
            "profile loop",
        )));
        assert!(!transient, "{text}");
        assert!(
            text.contains("the AWS credentials configuration is invalid"),
            "{text}"
        );
        assert!(text.contains("profile loop"), "{text}");

        let (transient, text) = describe(other(CredentialsError::unhandled("garbage from IMDS")));
        assert!(!transient, "{text}");
        assert!(text.contains("loading AWS credentials failed"), "{text}");

        // A 503 from STS or a slow IMDS may pass: transient, but still named, and unapplied.
        let provider = other(CredentialsError::provider_error("503 from STS"));
        let class = classify(&provider);
        assert!(class.transient && class.unapplied);
        let (transient, text) = describe(provider);
        assert!(transient);
        assert!(text.contains("loading AWS credentials failed: "), "{text}");
        assert!(text.contains("503 from STS"), "{text}");
        // The whole chain timed out: nothing found, at once, with the help (issue 23).
        let (transient, text) = describe(other(CredentialsError::provider_timed_out(
            std::time::Duration::from_secs(5),
        )));
        assert!(!transient);
        assert!(
            text.contains(
                "no AWS credentials found: loading them timed out (set AWS_ACCESS_KEY_ID"
            ),
            "{text}"
        );
        // Instance metadata disabled (403): permanent, with the help (issue 23).
        let (transient, text) = describe(other(CredentialsError::provider_error(
            "failed to load IMDS session token: service error: request forbidden: IMDS is disabled or the caller has insufficient permissions.",
        )));
        assert!(!transient, "{text}");
        assert!(
            text.contains("no AWS credentials found (set AWS_ACCESS_KEY_ID"),
            "{text}"
        );
    }

    #[test]
    fn refused_credentials_say_what_to_fix() {
        let cases = [
            (
                "AccessDeniedException",
                "User: arn:aws:iam::1:user/x is not authorized to perform: dynamodb:UpdateItem",
                "not allowed this operation on this table",
            ),
            (
                "UnrecognizedClientException",
                "The security token included in the request is invalid.",
                "access key ID or session token is not valid",
            ),
            (
                "InvalidSignatureException",
                "The request signature we calculated does not match the signature you provided.",
                "check the secret access key",
            ),
            (
                "ExpiredTokenException",
                "The security token included in the request is expired",
                "have expired",
            ),
            (
                "MissingAuthenticationTokenException",
                "Request is missing Authentication Token",
                "not signed properly",
            ),
        ];
        for (code, message, hint) in cases {
            let (transient, text) = describe(service_with(code, message, 400));
            assert!(!transient, "{code}");
            let message = message.trim_end_matches('.');
            assert!(text.contains(&format!("{code}: {message}; ")), "{text}");
            assert!(text.contains(hint), "{code}: {text}");
        }
    }

    #[test]
    fn only_a_host_name_that_does_not_exist_is_permanent() {
        for nxdomain in NO_SUCH_HOST {
            let err = dns(&format!("failed to lookup address information: {nxdomain}"));
            assert!(!classify(&err).transient, "{nxdomain}");
            let (transient, text) = describe(err);
            assert!(!transient);
            assert!(text.contains("cannot resolve host"), "{text}");
            assert!(text.contains("does not exist"), "{text}");
            assert!(text.contains(nxdomain), "{text}");
        }
        let err = dns("failed to lookup address information: Temporary failure in name resolution");
        let class = classify(&err);
        assert!(class.transient && class.unapplied);
        let (transient, text) = text_of(
            err,
            &Context {
                region: Some("eu-west-1"),
                ..Context::table("leases")
            },
        );
        assert!(transient);
        assert!(text.contains("DNS may be failing"), "{text}");
        // Refused and reset connections are not DNS: transient, text unchanged.
        let refused: Sdk = SdkError::dispatch_failure(ConnectorError::io(Box::new(
            std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
        )));
        let (transient, text) = describe(refused);
        assert!(transient);
        assert!(text.contains("dispatch failure"), "{text}");
    }

    #[test]
    fn an_unknown_host_names_the_region_when_known() {
        let err = dns("Name or service not known");
        let (_, text) = text_of(
            err,
            &Context {
                region: Some("us-east-7"),
                ..Context::table("leases")
            },
        );
        assert!(text.contains("the region `us-east-7`"), "{text}");
    }

    #[test]
    fn a_missing_table_is_named_without_rust_advice() {
        let err = backend_error(
            "UpdateItem",
            "leases",
            service_with(
                "ResourceNotFoundException",
                "Requested resource not found",
                400,
            ),
        );
        assert!(!err.is_transient());
        let text = report(&err);
        assert!(
            text.contains(
                "UpdateItem on table `leases` failed: ResourceNotFoundException: Requested resource not found; table `leases` does not exist in this region and account (or the credentials cannot see it)"
            ),
            "{text}"
        );
        assert!(!text.contains("create_table"), "{text}");
        let source = StdError::source(&err).and_then(|s| s.downcast_ref::<DynamoError>());
        assert!(source.is_some_and(DynamoError::is_table_missing));

        let (_, text) = text_of(
            service_with(
                "ResourceNotFoundException",
                "Requested resource not found",
                400,
            ),
            &Context {
                region: Some("eu-west-1"),
                ..Context::table("leases")
            },
        );
        assert!(
            text.contains("table `leases` does not exist in region eu-west-1 (or the credentials cannot see it)"),
            "{text}"
        );

        let other = backend_error("UpdateItem", "leases", service("ValidationException", 400));
        let source = StdError::source(&other).and_then(|s| s.downcast_ref::<DynamoError>());
        assert!(source.is_some_and(|e| !e.is_table_missing()));
    }

    #[test]
    fn a_key_schema_mismatch_names_the_key_attributes() {
        let mismatch = || {
            service_with(
                "ValidationException",
                "The provided key element does not match the schema",
                400,
            )
        };
        let (transient, text) = text_of(
            mismatch(),
            &Context {
                keys: Some(("id", "range")),
                ..Context::table("leases")
            },
        );
        assert!(!transient);
        assert!(
            text.contains(
                "The provided key element does not match the schema; the keys are written as string attributes (id, range); does the table's key schema match? configure the key attribute names to match it"
            ),
            "{text}"
        );
        let (_, text) = describe(mismatch());
        assert!(
            text.contains("does the table's key schema match?"),
            "{text}"
        );
        // Other validation errors get no key hint.
        let (_, text) = describe(service_with(
            "ValidationException",
            "Item size too large",
            400,
        ));
        assert!(!text.contains("key schema"), "{text}");
    }
}
