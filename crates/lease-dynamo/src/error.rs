//! Mapping SDK errors into [`LeaseError`], by meaning.
//!
//! A request that fails before it reaches DynamoDB fails because of how the client is
//! configured (no credentials, no region, an endpoint that is not a URL, a host name that does
//! not exist) or because the network failed on the way. Only the second may succeed if sent
//! again: the first are permanent, come back at once, and say what to fix.
//!
//! What DynamoDB answered is classified by its error code (`ProvideErrorMetadata::code`) and
//! the HTTP status of the raw response; what never reached it, by the error types in its chain
//! of sources (`CredentialsError`, the instance metadata client's `ImdsError` and the HTTP
//! status of its replies). Text is read in two places only, where nothing typed tells: the
//! resolver's words for a host name that does not exist (the standard library's lookup error
//! carries no code), and DynamoDB's words for a key that does not fit the table's key schema
//! (a `ValidationException` like any other invalid request). Neither decides whether a request
//! is retried except the host name, and that one only between two network failures.

use std::error::Error as StdError;
use std::fmt;

use aws_config::imds::client::error::{ImdsError, TokenError};
use aws_credential_types::provider::error::CredentialsError;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::http::Response as HttpResponse;
use lease_core::{LeaseError, LeaseKey};

/// Codes that mean the server turned the request away unapplied because of load.
const THROTTLING_CODES: &[&str] = &[
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
];

/// Codes, beside the throttling ones and any HTTP 5xx, with which DynamoDB says a request may
/// succeed if sent again.
const UNAVAILABLE_CODES: &[&str] = &[
    "InternalServerError",
    "ServiceUnavailable",
    "TransactionConflictException",
];

/// The code DynamoDB answers for a table that does not exist (or that the caller cannot see).
const TABLE_MISSING_CODE: &str = "ResourceNotFoundException";

/// The code of a request the credentials are not allowed to make.
const ACCESS_DENIED_CODE: &str = "AccessDeniedException";

/// HTTP statuses with which the instance metadata service turns a caller away for good:
/// 401 (unauthorised, after its own retries), 403 (disabled or forbidden), 404 (no role).
const METADATA_REFUSED_STATUSES: &[u16] = &[401, 403, 404];

/// What resolvers say when a host name does not exist (rather than "try again later"): glibc,
/// musl, macOS and Windows. The standard library's lookup error carries only this text.
const NO_SUCH_HOST: &[&str] = &[
    "Name or service not known",
    "No address associated with hostname",
    "Name does not resolve",
    "nodename nor servname provided",
    "No such host is known",
];

/// What DynamoDB (and DynamoDB Local) say in a `ValidationException` when the key sent does not
/// fit the table's key schema: no code of its own tells this apart from other invalid requests.
const KEY_SCHEMA_MISMATCH: &[&str] = &[
    "key element does not match the schema",
    "number of conditions on the keys is invalid",
    "Type mismatch for key",
    "Missing the key",
    "required keys was not given a value",
];

/// How the SDK begins the error of an endpoint it cannot apply; the rest of that text is the
/// request's `Debug` form.
const APPLY_ENDPOINT: &str = "failed to apply endpoint `";

/// Where to put credentials, for messages.
const CREDENTIALS_HELP: &str = "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, \
     or run where an instance, container or web-identity role is available";

/// Where to put a region, for messages.
const REGION_HELP: &str =
    "set AWS_REGION or a region in the AWS profile, or configure one on the client";

/// What a failed DynamoDB request means, by [`DynamoError::kind`].
///
/// Whether sending it again may help is [`LeaseError::is_transient`] on the error that carries
/// it: throttling, server errors and network failures are transient, the rest permanent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DynamoErrorKind {
    /// The table does not exist in the client's region and account, or the credentials cannot
    /// see it (`ResourceNotFoundException`).
    /// [`DynamoLeases::ensure_table`](crate::DynamoLeases::ensure_table) creates it.
    TableMissing,
    /// The table's key schema does not fit the keys this manager writes: two string
    /// attributes named by [`AttributeNames`](crate::AttributeNames)'s `partition_key` and
    /// `sort_key`. Found by [`ensure_table`](crate::DynamoLeases::ensure_table) on an existing
    /// table, or said by DynamoDB of a request.
    KeySchemaMismatch,
    /// The credentials may not make this request on this table (`AccessDeniedException`): grant
    /// the IAM actions listed under *IAM* in [`DynamoLeases`](crate::DynamoLeases)'s docs.
    AccessDenied,
    /// No usable credentials: none found, an invalid configuration, keys DynamoDB does not
    /// recognise, a wrong secret, or expired ones.
    Credentials,
    /// The client cannot address or sign a request: no region, an invalid region, an endpoint
    /// that is not a URL, or a host name that does not exist.
    Configuration,
    /// DynamoDB turned the request away unapplied for load (`ThrottlingException`,
    /// `ProvisionedThroughputExceededException`, `RequestLimitExceeded`). Transient.
    Throttled,
    /// DynamoDB could not serve the request now: a server error (HTTP 5xx,
    /// `InternalServerError`, `ServiceUnavailable`), a conflicting transaction on the item, or a
    /// table that did not become `ACTIVE` in time. Transient.
    Unavailable,
    /// No usable reply: a timeout, a connection refused or reset, a DNS failure, a reply that
    /// could not be read, or a write whose outcome a lost reply left unknown. Transient unless
    /// the outcome is what is unknown.
    Unreachable,
    /// DynamoDB refused the request as it stands: a `ValidationException` other than a key
    /// schema mismatch, or another error of the caller's. Permanent.
    Rejected,
}

/// A failed DynamoDB request: the source of [`LeaseError::Backend`] errors from this crate.
///
/// It says what failed and what that means, by [`kind`](Self::kind); its
/// [`source`](StdError::source) is what the SDK reported: DynamoDB's answer (its code and
/// message), or the failure that kept the request from reaching DynamoDB (credentials, the
/// connection, a timeout) with its own chain of sources. A report that prints every source, as
/// the `lease` command does, reads for example
/// ``UpdateItem on table `leases` failed: table `leases` does not exist in region eu-west-1 (or
/// the credentials cannot see it): ResourceNotFoundException: Requested resource not found``.
///
/// Reach it from a [`LeaseError`] through [`std::error::Error::source`]:
///
/// ```no_run
/// use lease_core::{LeaseBackend, LeaseError};
/// use lease_dynamo::{DynamoError, DynamoErrorKind, DynamoLeases};
///
/// # async fn demo(leases: DynamoLeases, key: lease_core::LeaseKey) -> Result<(), LeaseError> {
/// if let Err(e) = leases.inspect(&key).await {
///     let kind = std::error::Error::source(&e)
///         .and_then(|source| source.downcast_ref::<DynamoError>())
///         .map(DynamoError::kind);
///     if kind == Some(DynamoErrorKind::TableMissing) {
///         leases.ensure_table().await?; // and try again
///     } else {
///         return Err(e);
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct DynamoError {
    operation: &'static str,
    table: String,
    kind: DynamoErrorKind,
    code: Option<String>,
    /// What the failure means and what to do about it; never the source's own words.
    meaning: String,
    source: Option<Box<dyn StdError + Send + Sync>>,
    /// Links of `source`'s chain that [`source`](StdError::source) passes over: said better by
    /// `meaning`, in words that would dump a request's `Debug` form.
    skip: usize,
}

impl DynamoError {
    /// A failure this crate found itself (no SDK error under it).
    pub(crate) fn new(
        operation: &'static str,
        table: &str,
        kind: DynamoErrorKind,
        meaning: impl Into<String>,
    ) -> Self {
        Self {
            operation,
            table: table.to_owned(),
            kind,
            code: None,
            meaning: meaning.into(),
            source: None,
            skip: 0,
        }
    }

    /// Adds the error under this one.
    pub(crate) fn set_source(&mut self, source: impl StdError + Send + Sync + 'static) {
        self.source = Some(Box::new(source));
    }

    /// What the failure means.
    pub fn kind(&self) -> DynamoErrorKind {
        self.kind
    }

    /// The table the request was for.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// DynamoDB's error code (`ResourceNotFoundException`, `ValidationException`, ...), when
    /// DynamoDB answered.
    pub fn code(&self) -> Option<&str> {
        self.code.as_deref()
    }
}

impl fmt::Display for DynamoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} on table `{}` failed: {}",
            self.operation, self.table, self.meaning
        )
    }
}

impl StdError for DynamoError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        let mut link: &(dyn StdError + 'static) = self.source.as_deref()?;
        for _ in 0..self.skip {
            link = link.source()?;
        }
        Some(link)
    }
}

/// What DynamoDB answered: its code and message, said once. The SDK's operation error is kept
/// whole, but not offered as a further source: its chain only repeats the code and message
/// (a modelled error wraps an exception that prints the same), or dumps them as `Debug` (an
/// unmodelled one).
struct ServiceAnswer {
    code: Option<String>,
    message: Option<String>,
    error: Box<dyn StdError + Send + Sync>,
}

impl fmt::Debug for ServiceAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.error, f)
    }
}

impl fmt::Display for ServiceAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.code, &self.message) {
            (Some(code), Some(message)) => write!(f, "{code}: {message}"),
            (Some(code), None) => f.write_str(code),
            (None, Some(message)) => f.write_str(message),
            (None, None) => fmt::Display::fmt(&self.error, f),
        }
    }
}

impl StdError for ServiceAnswer {}

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
            } else if UNAVAILABLE_CODES.contains(&code) || service.raw().status().is_server_error()
            {
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

/// Why a request failed before DynamoDB answered, in words an operator can act on (the
/// failure's own words stay in the source chain).
#[derive(Debug, PartialEq, Eq)]
struct Cause {
    kind: DynamoErrorKind,
    transient: bool,
    text: String,
}

impl Cause {
    fn permanent(kind: DynamoErrorKind, text: impl Into<String>) -> Self {
        Self {
            kind,
            transient: false,
            text: text.into(),
        }
    }

    fn transient(kind: DynamoErrorKind, text: impl Into<String>) -> Self {
        Self {
            kind,
            transient: true,
            text: text.into(),
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

/// The texts of `links` joined with `: `, on one line (for logs).
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
        configuration_cause(&texts, context).or_else(|| resolution_cause(&links, &texts, context))
    })
}

/// Whether any link's text contains `needle`.
fn mentions(texts: &[String], needle: &str) -> bool {
    texts.iter().any(|t| t.contains(needle))
}

/// The credentials provider's own errors, by their variant.
fn credentials_cause(links: &Links<'_>) -> Option<Cause> {
    use DynamoErrorKind::Credentials;
    let (i, credentials) = links
        .iter()
        .enumerate()
        .find_map(|(i, link)| Some((i, link.downcast_ref::<CredentialsError>()?)))?;
    Some(match credentials {
        CredentialsError::CredentialsNotLoaded(_) => Cause::permanent(
            Credentials,
            format!("no AWS credentials found ({CREDENTIALS_HELP})"),
        ),
        CredentialsError::InvalidConfiguration(_) => {
            Cause::permanent(Credentials, "the AWS credentials configuration is invalid")
        }
        // Every provider of the chain had its turn: none found credentials in time.
        CredentialsError::ProviderTimedOut(_) => Cause::permanent(
            Credentials,
            format!("no AWS credentials found: loading them timed out ({CREDENTIALS_HELP})"),
        ),
        // The instance metadata service turned us away (disabled, no role): the last provider
        // of the chain has nothing to give, now or later.
        CredentialsError::ProviderError(_) if metadata_refused(&links[i..]) => Cause::permanent(
            Credentials,
            format!(
                "no AWS credentials found: the instance metadata service refused them \
                 ({CREDENTIALS_HELP})"
            ),
        ),
        CredentialsError::ProviderError(_) => {
            Cause::transient(Credentials, "loading AWS credentials failed")
        }
        _ => Cause::permanent(Credentials, "loading AWS credentials failed"),
    })
}

/// Whether a credentials failure came from an instance metadata service that refused us: an
/// [`ImdsError`] whose reply, or whose session token request's reply, has a refusing HTTP
/// status.
fn metadata_refused(links: &Links<'_>) -> bool {
    let refused = |status: u16| METADATA_REFUSED_STATUSES.contains(&status);
    links.iter().any(|link| {
        if let Some(ImdsError::ErrorResponse(reply)) = link.downcast_ref::<ImdsError>() {
            return refused(reply.response().status().as_u16());
        }
        link.downcast_ref::<SdkError<TokenError, HttpResponse>>()
            .and_then(SdkError::raw_response)
            .is_some_and(|reply| refused(reply.status().as_u16()))
    })
}

/// A client configured so that it cannot sign or address a request: no credentials provider,
/// no or a bad region, a bad endpoint URL. (The SDK reports these as text only.)
fn configuration_cause(texts: &[String], context: &Context<'_>) -> Option<Cause> {
    use DynamoErrorKind::{Configuration, Credentials};
    if mentions(texts, "no identity resolver") || mentions(texts, "failed to select an auth scheme")
    {
        return Some(Cause::permanent(
            Credentials,
            format!(
                "no AWS credentials found: the client has no credentials provider \
                 ({CREDENTIALS_HELP})"
            ),
        ));
    }
    if mentions(texts, "missing signing region") || mentions(texts, "Missing Region") {
        return Some(Cause::permanent(
            Configuration,
            format!("no AWS region configured ({REGION_HELP})"),
        ));
    }
    if mentions(texts, "`region`") && mentions(texts, "valid host label") {
        let region = context
            .region
            .map(|r| format!(" `{r}`"))
            .unwrap_or_default();
        return Some(Cause::permanent(
            Configuration,
            format!(
                "the AWS region{region} is not valid: it must be a host label such as us-east-1"
            ),
        ));
    }
    if let Some(url) = texts.iter().find_map(|t| {
        let rest = t.strip_prefix(APPLY_ENDPOINT)?;
        Some(rest.split_once('`').map_or(rest, |(url, _)| url))
    }) {
        return Some(Cause::permanent(
            Configuration,
            format!(
                "endpoint `{url}` is not a valid URL (write it as http://HOST:PORT or https://HOST)"
            ),
        ));
    }
    if let Some(scheme) = texts
        .iter()
        .find_map(|t| t.strip_prefix("unsupported scheme "))
    {
        return Some(Cause::permanent(
            Configuration,
            format!(
                "the endpoint URL has the unsupported scheme `{scheme}` (use http:// or https://)"
            ),
        ));
    }
    None
}

/// The endpoint's host name or the endpoint itself could not be resolved.
fn resolution_cause(links: &Links<'_>, texts: &[String], context: &Context<'_>) -> Option<Cause> {
    if texts.iter().any(|t| t == "dns error") {
        let region_hint = match context.region {
            Some(region) => format!(", and the region `{region}` when no URL is set"),
            None => ", or the region when no URL is set".to_owned(),
        };
        return Some(if NO_SUCH_HOST.iter().any(|n| mentions(texts, n)) {
            Cause::permanent(
                DynamoErrorKind::Configuration,
                format!(
                    "cannot resolve host: the endpoint's host name does not exist (check the \
                     endpoint URL{region_hint})"
                ),
            )
        } else {
            Cause::transient(
                DynamoErrorKind::Unreachable,
                "cannot resolve host: the endpoint's host name did not resolve, DNS may be \
                 failing",
            )
        });
    }
    // `ResolveEndpointError` lives in a 0.x crate of the SDK's; its name, not its version, is
    // what stays stable.
    let endpoint_error = links
        .iter()
        .any(|link| format!("{link:?}").starts_with("ResolveEndpointError"));
    endpoint_error.then(|| {
        Cause::permanent(
            DynamoErrorKind::Configuration,
            "cannot work out the DynamoDB endpoint",
        )
    })
}

/// What an answer of DynamoDB's means, by its code and HTTP status: the kind and the words for
/// it (with what to do, where that is known).
fn service_meaning(
    code: &str,
    message: Option<&str>,
    status: u16,
    context: &Context<'_>,
) -> (DynamoErrorKind, String) {
    use DynamoErrorKind::*;
    let table = context.table;
    let key_schema = code == "ValidationException"
        && message.is_some_and(|m| KEY_SCHEMA_MISMATCH.iter().any(|k| m.contains(k)));
    match code {
        TABLE_MISSING_CODE => (
            TableMissing,
            match context.region {
                Some(region) => format!(
                    "table `{table}` does not exist in region {region} (or the credentials cannot see it)"
                ),
                None => format!(
                    "table `{table}` does not exist in this region and account (or the credentials cannot see it)"
                ),
            },
        ),
        _ if key_schema => (
            KeySchemaMismatch,
            match context.keys {
                Some((pk, sk)) => format!(
                    "the keys are written as string attributes ({pk}, {sk}); does the table's \
                     key schema match? configure the key attribute names to match it"
                ),
                None => "the keys are written as two string attributes (pk and sk unless \
                         renamed); does the table's key schema match? configure the key \
                         attribute names to match it"
                    .to_owned(),
            },
        ),
        ACCESS_DENIED_CODE => (
            AccessDenied,
            "the credentials are not allowed this operation on this table; grant the IAM \
             actions the lease-dynamo docs list"
                .to_owned(),
        ),
        "UnrecognizedClientException" | "InvalidClientTokenId" => (
            Credentials,
            "the AWS access key ID or session token is not valid for this endpoint and region"
                .to_owned(),
        ),
        "InvalidSignatureException" | "SignatureDoesNotMatch" => (
            Credentials,
            "the request signature is wrong: check the secret access key, and that this \
             host's clock is correct"
                .to_owned(),
        ),
        "ExpiredTokenException" | "RequestExpired" => (
            Credentials,
            "the AWS credentials have expired; refresh them".to_owned(),
        ),
        "MissingAuthenticationTokenException" | "IncompleteSignatureException" => (
            Credentials,
            format!("the request was not signed properly ({CREDENTIALS_HELP})"),
        ),
        _ if THROTTLING_CODES.contains(&code) => (
            Throttled,
            "DynamoDB throttled the request: the table's or the account's throughput is used up"
                .to_owned(),
        ),
        _ if UNAVAILABLE_CODES.contains(&code) || (500..600).contains(&status) => (
            Unavailable,
            format!("DynamoDB could not serve the request (HTTP {status})"),
        ),
        _ => (
            Rejected,
            format!("DynamoDB refused the request (HTTP {status})"),
        ),
    }
}

/// The SDK error's chain of causes on one line, in words: no `Debug` dump of the SDK's types
/// (which `DisplayErrorContext` appends). For logs.
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

/// The [`DynamoError`] of a failed request: its meaning from everything the caller knows about
/// the manager (for better hints), the SDK's error as its source.
pub(crate) fn dynamo_error<E>(
    operation: &'static str,
    context: &Context<'_>,
    err: SdkError<E, HttpResponse>,
) -> DynamoError
where
    E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
{
    use DynamoErrorKind::{Configuration, Unreachable};
    let code = err.code().map(str::to_owned);
    let (kind, meaning) = match &err {
        SdkError::ServiceError(service) => service_meaning(
            code.as_deref().unwrap_or_default(),
            err.message(),
            service.raw().status().as_u16(),
            context,
        ),
        SdkError::TimeoutError(_) => (Unreachable, "no reply in time".to_owned()),
        SdkError::ResponseError(_) => (Unreachable, "the reply could not be read".to_owned()),
        SdkError::DispatchFailure(failure) => match client_side_cause(&err, context) {
            Some(cause) => (cause.kind, cause.text),
            None if failure.is_user() => (
                Configuration,
                "the client could not send the request".to_owned(),
            ),
            None if failure.is_timeout() => (Unreachable, "no reply in time".to_owned()),
            None => (
                Unreachable,
                "the request could not be sent, or its reply was lost".to_owned(),
            ),
        },
        _ => match client_side_cause(&err, context) {
            Some(cause) => (cause.kind, cause.text),
            None => (Configuration, "the request could not be built".to_owned()),
        },
    };
    let answered = matches!(err, SdkError::ServiceError(_));
    let message = err.message().map(str::to_owned);
    // The service error for an answer; what failed on the way for the rest.
    let cause: Box<dyn StdError + Send + Sync> =
        err.into_source().unwrap_or_else(|err| Box::new(err));
    // A connector error only says "io error" or "other" above its own source.
    let cause = match cause.downcast::<ConnectorError>() {
        Ok(connector) => connector.into_source(),
        Err(cause) => cause,
    };
    let source: Box<dyn StdError + Send + Sync> = if answered {
        Box::new(ServiceAnswer {
            code: code.clone(),
            message,
            error: cause,
        })
    } else {
        cause
    };
    // The endpoint's own error is said by `meaning`, and dumps the request: start below it.
    let skip = chain(&*source)
        .iter()
        .position(|link| link.to_string().starts_with(APPLY_ENDPOINT))
        .map_or(0, |at| at + 1);
    DynamoError {
        operation,
        table: context.table.to_owned(),
        kind,
        code,
        meaning,
        source: Some(source),
        skip,
    }
}

/// [`dynamo_error`] as a [`LeaseError::Backend`], transient as [`classify`] says.
pub(crate) fn backend_error_in<E>(
    operation: &'static str,
    context: &Context<'_>,
    err: SdkError<E, HttpResponse>,
) -> LeaseError
where
    E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
{
    let transient = classify(&err).transient;
    LeaseError::backend(
        crate::BACKEND,
        transient,
        dynamo_error(operation, context, err),
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
    use DynamoErrorKind::*;
    use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
    use aws_sdk_dynamodb::types::error::ResourceNotFoundException;
    use aws_smithy_runtime_api::http::StatusCode;
    use aws_smithy_types::body::SdkBody;
    use aws_smithy_types::error::ErrorMetadata;

    type Sdk = SdkError<UpdateItemError, HttpResponse>;

    fn reply(status: u16) -> HttpResponse {
        let status = StatusCode::try_from(status).unwrap_or_else(|_| unreachable!());
        HttpResponse::new(status, SdkBody::empty())
    }

    /// An answer the SDK does not model for `UpdateItem` (`Unhandled`), with `code`.
    fn service_with(code: &str, message: &str, status: u16) -> Sdk {
        let err =
            UpdateItemError::generic(ErrorMetadata::builder().code(code).message(message).build());
        SdkError::service_error(err, reply(status))
    }

    fn service(code: &str, status: u16) -> Sdk {
        service_with(code, "m", status)
    }

    /// A `ResourceNotFoundException`, as the SDK models it for `UpdateItem`.
    fn table_missing() -> Sdk {
        let modelled = ResourceNotFoundException::builder()
            .message("Requested resource not found")
            .meta(
                ErrorMetadata::builder()
                    .code(TABLE_MISSING_CODE)
                    .message("Requested resource not found")
                    .build(),
            )
            .build();
        SdkError::service_error(
            UpdateItemError::ResourceNotFoundException(modelled),
            reply(400),
        )
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
        chain(error)
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(": ")
    }

    fn describe(err: Sdk) -> (bool, String) {
        text_of(err, &Context::table("leases"))
    }

    /// The [`DynamoError`] under a [`LeaseError`].
    fn dynamo(error: &LeaseError) -> &DynamoError {
        StdError::source(error)
            .and_then(|s| s.downcast_ref::<DynamoError>())
            .unwrap_or_else(|| panic!("no DynamoError under {error}"))
    }

    fn kind_of(err: Sdk) -> DynamoErrorKind {
        dynamo(&backend_error("UpdateItem", "leases", err)).kind()
    }

    #[test]
    fn every_kind_says_each_sentence_once_in_a_report() {
        let kinds: Vec<(&str, Sdk)> = vec![
            ("missing table", table_missing()),
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
            let levels: Vec<String> = chain(&error).iter().map(ToString::to_string).collect();
            assert!(
                levels.len() >= 3,
                "{kind}: the SDK's error is a source: {levels:?}"
            );
            assert!(
                levels[1].starts_with("UpdateItem on table `leases` failed: "),
                "{kind}"
            );
            for (i, level) in levels.iter().enumerate() {
                for sentence in level.split([':', ';', '(', ')']).map(str::trim) {
                    let elsewhere = levels
                        .iter()
                        .enumerate()
                        .any(|(j, other)| j != i && other.contains(sentence));
                    assert!(
                        sentence.len() < 8 || !elsewhere,
                        "{kind}: {sentence:?} is said twice: {levels:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn no_sdk_debug_dump_in_messages() {
        // Issue 23: messages ended in `(TimeoutError(TimeoutError { source: ... }))`; an
        // unmodelled answer's own source prints `Error { code: .., message: .. }`.
        for err in [
            SdkError::timeout_error("operation attempt timeout occurred after 2s"),
            other("something new went wrong"),
            service("ValidationException", 400),
            table_missing(),
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
    fn the_sdk_error_is_the_source_not_a_string() {
        // A connector's failure: its own error is reachable, typed, under the DynamoError.
        let refused: Sdk = SdkError::dispatch_failure(ConnectorError::io(Box::new(
            std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
        )));
        let error = backend_error("UpdateItem", "leases", refused);
        let io = chain(&error)
            .into_iter()
            .find_map(|link| link.downcast_ref::<std::io::Error>())
            .map(std::io::Error::kind);
        assert_eq!(io, Some(std::io::ErrorKind::ConnectionRefused));
        // The credentials provider's error too.
        let error = backend_error(
            "UpdateItem",
            "leases",
            other(CredentialsError::not_loaded("nothing in the chain")),
        );
        assert!(
            chain(&error)
                .into_iter()
                .any(|link| link.downcast_ref::<CredentialsError>().is_some())
        );
        // An answer: DynamoDB's code and message, said once, and the code to branch on.
        let error = backend_error("UpdateItem", "leases", table_missing());
        assert_eq!(dynamo(&error).code(), Some(TABLE_MISSING_CODE));
        assert!(
            report(&error).ends_with(": ResourceNotFoundException: Requested resource not found"),
            "{}",
            report(&error)
        );
    }

    #[test]
    fn classifies_by_meaning() {
        for code in THROTTLING_CODES {
            let class = classify(&service(code, 400));
            assert!(class.transient && class.unapplied, "{code}");
            assert_eq!(kind_of(service(code, 400)), Throttled, "{code}");
        }
        let class = classify(&service("InternalServerError", 500));
        assert!(class.transient && !class.unapplied, "5xx: outcome unknown");
        assert!(classify(&service("SomethingNew", 503)).transient, "any 5xx");
        assert_eq!(kind_of(service("SomethingNew", 503)), Unavailable);
        assert_eq!(
            kind_of(service("TransactionConflictException", 400)),
            Unavailable
        );
        for (code, kind) in [
            ("ResourceNotFoundException", TableMissing),
            ("ValidationException", Rejected),
            ("AccessDeniedException", AccessDenied),
            ("UnrecognizedClientException", Credentials),
            ("ExpiredTokenException", Credentials),
            ("ItemCollectionSizeLimitExceededException", Rejected),
        ] {
            assert!(!classify(&service(code, 400)).transient, "{code}");
            assert_eq!(kind_of(service(code, 400)), kind, "{code}");
        }
        assert_eq!(
            kind_of(table_missing()),
            TableMissing,
            "the modelled variant"
        );
        let io: Sdk = SdkError::dispatch_failure(ConnectorError::io("reset".into()));
        assert!(classify(&io).transient);
        assert_eq!(kind_of(io), Unreachable);
        let timeout: Sdk = SdkError::timeout_error("slow");
        assert!(classify(&timeout).transient);
        assert_eq!(kind_of(timeout), Unreachable);
        let user: Sdk = SdkError::dispatch_failure(ConnectorError::user("bad endpoint".into()));
        assert!(!classify(&user).transient);
        assert_eq!(kind_of(user), Configuration);
        // An unrecognised client-side failure stays transient, outcome unknown.
        let class = classify(&other("something new"));
        assert!(class.transient && !class.unapplied);
    }

    #[test]
    fn answers_are_classified_by_code_and_status_not_by_their_words() {
        // Each of these messages would mislead a classifier that reads words: "not found",
        // "throttl", "Internal", "denied" and "expired" name nothing here but the text.
        let cases = [
            (
                "ValidationException",
                "Requested resource not found",
                400,
                Rejected,
                false,
            ),
            (
                "ValidationException",
                "throttling settings are invalid",
                400,
                Rejected,
                false,
            ),
            (
                "ConditionalCheckFailedException",
                "Internal error? no",
                400,
                Rejected,
                false,
            ),
            (
                "SomethingNew",
                "access denied to the cache (not found)",
                503,
                Unavailable,
                true,
            ),
            (
                "ThrottlingException",
                "The table was not found",
                400,
                Throttled,
                true,
            ),
            (
                "ResourceNotFoundException",
                "expired token",
                400,
                TableMissing,
                false,
            ),
        ];
        for (code, message, status, kind, transient) in cases {
            let err = || service_with(code, message, status);
            assert_eq!(classify(&err()).transient, transient, "{code}: {message}");
            assert_eq!(kind_of(err()), kind, "{code}: {message}");
        }
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
        assert!(text.contains("Environment: not set"), "{text}");
        assert_eq!(
            kind_of(other(CredentialsError::not_loaded("none"))),
            Credentials
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
    }

    /// A provider error whose words name the instance metadata service and every status and
    /// phrase the old classifier looked for, but which carries no refusal from it: a text
    /// classifier called it permanent; it is a provider failing for now.
    #[test]
    fn a_metadata_refusal_is_read_from_the_reply_not_from_words() {
        let words = CredentialsError::provider_error(
            "IMDS: request forbidden, insufficient permissions, 401 403 404, profile not found",
        );
        let class = classify(&other(words));
        assert!(class.transient, "words alone are no refusal");
    }

    /// Serves every HTTP request on a loopback port with `status` and an empty body, like an
    /// instance metadata service that turns callers away; returns its URL.
    fn refusing_metadata_service(status: u16) -> String {
        use std::io::{Read, Write};
        let listener =
            std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind: {e}"));
        let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut request = Vec::new();
                let mut buffer = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buffer) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&buffer[..n]),
                    }
                }
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status} Refused\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                );
            }
        });
        format!("http://127.0.0.1:{port}")
    }

    /// The credentials error of the SDK's own instance metadata provider against a service
    /// that answers `status`.
    async fn imds_credentials_error(status: u16) -> CredentialsError {
        use aws_credential_types::provider::ProvideCredentials;
        let endpoint = refusing_metadata_service(status);
        let client = aws_config::imds::Client::builder()
            .endpoint(endpoint.as_str())
            .unwrap_or_else(|e| panic!("endpoint: {e}"))
            .max_attempts(1)
            .build();
        let provider = aws_config::imds::credentials::ImdsCredentialsProvider::builder()
            .imds_client(client)
            .build();
        match provider.provide_credentials().await {
            Ok(_) => panic!("a refusing metadata service gave credentials"),
            Err(e) => e,
        }
    }

    #[tokio::test]
    async fn a_metadata_service_that_refuses_is_permanent_and_one_that_fails_is_not() {
        // 403 to the session token request: IMDS disabled, or the caller may not use it.
        let forbidden = imds_credentials_error(403).await;
        assert!(
            matches!(forbidden, CredentialsError::ProviderError(_)),
            "{forbidden:?}"
        );
        let (transient, text) = describe(other(forbidden));
        assert!(!transient, "{text}");
        assert!(
            text.contains("the instance metadata service refused them (set AWS_ACCESS_KEY_ID"),
            "{text}"
        );
        // 500: the service is failing, and may recover.
        let failing = imds_credentials_error(500).await;
        let class = classify(&other(failing));
        assert!(class.transient && class.unapplied);
    }

    #[test]
    fn refused_credentials_say_what_to_fix() {
        let cases = [
            (
                "AccessDeniedException",
                "User: arn:aws:iam::1:user/x is not authorized to perform: dynamodb:UpdateItem",
                "not allowed this operation on this table",
                AccessDenied,
            ),
            (
                "UnrecognizedClientException",
                "The security token included in the request is invalid.",
                "access key ID or session token is not valid",
                Credentials,
            ),
            (
                "InvalidSignatureException",
                "The request signature we calculated does not match the signature you provided.",
                "check the secret access key",
                Credentials,
            ),
            (
                "ExpiredTokenException",
                "The security token included in the request is expired",
                "have expired",
                Credentials,
            ),
            (
                "MissingAuthenticationTokenException",
                "Request is missing Authentication Token",
                "not signed properly",
                Credentials,
            ),
        ];
        for (code, message, hint, kind) in cases {
            let (transient, text) = describe(service_with(code, message, 400));
            assert!(!transient, "{code}");
            assert!(text.ends_with(&format!(": {code}: {message}")), "{text}");
            assert!(text.contains(hint), "{code}: {text}");
            assert_eq!(kind_of(service_with(code, message, 400)), kind, "{code}");
        }
    }

    #[test]
    fn only_a_host_name_that_does_not_exist_is_permanent() {
        for nxdomain in NO_SUCH_HOST {
            let err = || dns(&format!("failed to lookup address information: {nxdomain}"));
            assert!(!classify(&err()).transient, "{nxdomain}");
            assert_eq!(kind_of(err()), Configuration);
            let (transient, text) = describe(err());
            assert!(!transient);
            assert!(text.contains("cannot resolve host"), "{text}");
            assert!(text.contains("does not exist"), "{text}");
            assert!(text.contains(nxdomain), "{text}");
        }
        let err =
            || dns("failed to lookup address information: Temporary failure in name resolution");
        let class = classify(&err());
        assert!(class.transient && class.unapplied);
        assert_eq!(kind_of(err()), Unreachable);
        let (transient, text) = text_of(
            err(),
            &Context {
                region: Some("eu-west-1"),
                ..Context::table("leases")
            },
        );
        assert!(transient);
        assert!(text.contains("DNS may be failing"), "{text}");
        // Refused and reset connections are not DNS: transient, said as what they are.
        let refused: Sdk = SdkError::dispatch_failure(ConnectorError::io(Box::new(
            std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
        )));
        let (transient, text) = describe(refused);
        assert!(transient);
        assert!(
            text.contains("the request could not be sent, or its reply was lost: "),
            "{text}"
        );
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
        let err = backend_error("UpdateItem", "leases", table_missing());
        assert!(!err.is_transient());
        let text = report(&err);
        assert!(
            text.contains(
                "UpdateItem on table `leases` failed: table `leases` does not exist in this region and account (or the credentials cannot see it): ResourceNotFoundException: Requested resource not found"
            ),
            "{text}"
        );
        assert!(!text.contains("create_table"), "{text}");
        assert_eq!(dynamo(&err).kind(), TableMissing);
        assert_eq!(dynamo(&err).table(), "leases");

        let (_, text) = text_of(
            table_missing(),
            &Context {
                region: Some("eu-west-1"),
                ..Context::table("leases")
            },
        );
        assert!(
            text.contains("table `leases` does not exist in region eu-west-1 (or the credentials cannot see it)"),
            "{text}"
        );
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
                "the keys are written as string attributes (id, range); does the table's key schema match? configure the key attribute names to match it: ValidationException: The provided key element does not match the schema"
            ),
            "{text}"
        );
        assert_eq!(kind_of(mismatch()), KeySchemaMismatch);
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
