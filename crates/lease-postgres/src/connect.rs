//! A pool from a URL, with TLS on rustls when the URL asks for it.

use std::str::FromStr;
use std::sync::Arc;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use lease_core::LeaseError;
use tokio_postgres::config::SslMode;

/// A connection pool for `url` (`postgres://user:password@host:port/db?sslmode=require`, or the
/// `key=value` form), as the tokio-postgres driver reads it. With `sslmode=require` the
/// connection is encrypted with rustls (no OpenSSL) and the server's certificate is checked
/// against the system's root certificates; `prefer` (the default) tries TLS and falls back to
/// plain text; `disable` never encrypts. The pool is deadpool's, the one tokio-postgres users
/// run: pass your own pool to [`PgLeases::builder`](crate::PgLeases::builder) instead to share
/// it. Needs a tokio runtime when connections are made, not here: nothing is sent until the
/// first operation.
///
/// Set `connect_timeout` in the URL to bound connecting (the pool waits for a connection no
/// longer than each attempt's timeout, see [`RetryPolicy`](crate::RetryPolicy)).
///
/// ```
/// let pool = lease_postgres::pool_from_url("postgres://app@localhost:5432/app?connect_timeout=5")?;
/// # let _ = pool;
/// # Ok::<(), lease_core::LeaseError>(())
/// ```
///
/// # Errors
/// [`LeaseError::InvalidInput`] for a URL the driver cannot read, or when the system's root
/// certificates cannot be loaded for a URL that asks for TLS.
pub fn pool_from_url(url: &str) -> Result<Pool, LeaseError> {
    let config = parse_url(url)?;
    let manager_config = ManagerConfig {
        recycling_method: RecyclingMethod::Fast,
    };
    let manager = if config.get_ssl_mode() == SslMode::Disable {
        Manager::from_config(config, tokio_postgres::NoTls, manager_config)
    } else {
        Manager::from_config(config, tls_connector()?, manager_config)
    };
    Pool::builder(manager)
        .max_size(16)
        .build()
        .map_err(|e| LeaseError::invalid("PostgreSQL URL", e.to_string()))
}

/// A rustls connector that trusts the system's root certificates.
pub(crate) fn tls_connector() -> Result<tokio_postgres_rustls::MakeRustlsConnect, LeaseError> {
    let mut roots = rustls::RootCertStore::empty();
    let loaded = rustls_native_certs::load_native_certs();
    for cert in loaded.certs {
        // A certificate the store cannot parse is skipped, as browsers do.
        let _ = roots.add(cert);
    }
    if roots.is_empty() {
        return Err(LeaseError::invalid(
            "PostgreSQL URL",
            "asks for TLS, but no root certificate could be loaded from the system \
             (install ca-certificates, or set SSL_CERT_FILE)",
        ));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| LeaseError::invalid("PostgreSQL URL", e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

/// The driver's reading of `url`.
pub(crate) fn parse_url(url: &str) -> Result<tokio_postgres::Config, LeaseError> {
    tokio_postgres::Config::from_str(url)
        .map_err(|e| LeaseError::invalid("PostgreSQL URL", e.to_string()))
}
