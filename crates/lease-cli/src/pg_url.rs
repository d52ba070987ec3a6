//! The PostgreSQL URL of `--postgres` (or `LEASE_POSTGRES_URL`), and keeping its password (and
//! that of `--redis`, `crate::redis_url`) out of every message and trace.
//!
//! The URL is taken as the driver reads it (`postgres://user:password@host/db?param=value`, or
//! the `key=value` form) and never shown as given: messages name it [`PostgresUrl::redacted`],
//! with every password replaced by `***`. As a second line of defence, [`register`] records the
//! password's text, and [`scrub`] removes it from whatever `lease` prints on stderr (failures
//! and the `LEASE_LOG` traces), should a driver's message ever quote it.

use std::fmt;
use std::sync::{Mutex, PoisonError};

/// What a password is replaced with.
const HIDDEN: &str = "***";

/// A PostgreSQL URL or connection string, kept as given for the driver; its `Debug` and
/// `Display` forms are [`PostgresUrl::redacted`].
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct PostgresUrl(String);

impl PostgresUrl {
    /// clap's value parser: any text is accepted here (the driver reads it when the store is
    /// opened), so that clap never quotes the URL in an error of its own.
    pub(crate) fn from_arg(text: &str) -> Result<Self, std::convert::Infallible> {
        Ok(Self(text.to_owned()))
    }

    /// The text the driver reads. Never print it: print [`Self::redacted`].
    #[cfg_attr(not(any(feature = "postgres", test)), expect(dead_code))]
    pub(crate) fn secret_text(&self) -> &str {
        &self.0
    }

    /// The URL with every password replaced by `***`.
    pub(crate) fn redacted(&self) -> String {
        let mut text = self.0.clone();
        for secret in self.secrets() {
            text = text.replace(&secret, HIDDEN);
        }
        text
    }

    /// The password texts this URL carries, as written and percent-decoded: the userinfo's
    /// password of the URL form, and every `password` parameter (query or `key=value` form).
    pub(crate) fn secrets(&self) -> Vec<String> {
        let text = self.0.as_str();
        let mut found = Vec::new();
        let url = ["postgres://", "postgresql://"]
            .iter()
            .find_map(|scheme| text.strip_prefix(scheme));
        match url {
            Some(rest) => {
                // As tokio-postgres reads it: the credentials run to the first '@'.
                if let Some((credentials, _)) = rest.split_once('@')
                    && let Some((_, password)) = credentials.split_once(':')
                {
                    found.push(password.to_owned());
                }
                if let Some((_, query)) = rest.split_once('?') {
                    for pair in query.split('&') {
                        if let Some(("password", value)) = pair.split_once('=') {
                            found.push(value.to_owned());
                        }
                    }
                }
            }
            None => found.extend(key_value_passwords(text)),
        }
        let decoded: Vec<String> = found.iter().filter_map(|s| percent_decoded(s)).collect();
        found.extend(decoded);
        found.retain(|secret| !secret.is_empty());
        // Longest first, so that a password containing another is replaced whole.
        found.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
        found.dedup();
        found
    }
}

impl fmt::Debug for PostgresUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("PostgresUrl")
            .field(&self.redacted())
            .finish()
    }
}

impl fmt::Display for PostgresUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

/// The values of `password=...` in a `key=value` connection string (`'quoted values'` with
/// `\'` escapes, as libpq and tokio-postgres read them).
fn key_value_passwords(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("password") {
        let after = rest[at + "password".len()..].trim_start();
        let starts_word = rest[..at]
            .chars()
            .next_back()
            .is_none_or(char::is_whitespace);
        rest = after;
        let Some(value) = after.strip_prefix('=').map(str::trim_start) else {
            continue;
        };
        if !starts_word {
            continue;
        }
        if let Some(quoted) = value.strip_prefix('\'') {
            let mut secret = String::new();
            let mut raw_end = quoted.len();
            let mut chars = quoted.char_indices();
            while let Some((at, c)) = chars.next() {
                match c {
                    '\\' => secret.extend(chars.next().map(|(_, c)| c)),
                    '\'' => {
                        raw_end = at;
                        break;
                    }
                    c => secret.push(c),
                }
            }
            // The escaped form too, as it appears in the text.
            found.push(quoted[..raw_end].to_owned());
            found.push(secret);
        } else {
            let end = value.find(char::is_whitespace).unwrap_or(value.len());
            found.push(value[..end].to_owned());
        }
    }
    found
}

/// `text` with its `%XX` escapes decoded, when it has any and they decode to UTF-8.
pub(crate) fn percent_decoded(text: &str) -> Option<String> {
    if !text.contains('%') {
        return None;
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// The passwords [`scrub`] removes.
static SECRETS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Records `url`'s passwords, so that [`scrub`] removes them from whatever `lease` prints.
pub(crate) fn register(url: &PostgresUrl) {
    register_secrets(url.secrets());
}

/// Records password texts (a PostgreSQL URL's, a Redis URL's: `crate::redis_url`) for
/// [`scrub`].
pub(crate) fn register_secrets(found: Vec<String>) {
    let mut secrets = SECRETS.lock().unwrap_or_else(PoisonError::into_inner);
    secrets.extend(found.into_iter().filter(|secret| !secret.is_empty()));
    secrets.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
    secrets.dedup();
}

/// `text` with every registered password replaced by `***`.
pub(crate) fn scrub(text: &str) -> String {
    let secrets = SECRETS.lock().unwrap_or_else(PoisonError::into_inner);
    let mut text = text.to_owned();
    for secret in secrets.iter() {
        if text.contains(secret.as_str()) {
            text = text.replace(secret.as_str(), HIDDEN);
        }
    }
    text
}

/// Standard error for the `LEASE_LOG` traces, through [`scrub`]: the formatter writes each
/// event in one call, so a password is never split across two.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ScrubbedStderr;

impl std::io::Write for ScrubbedStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        std::io::stderr().write_all(scrub(&text).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redacted(text: &str) -> String {
        PostgresUrl(text.to_owned()).redacted()
    }

    #[test]
    fn passwords_are_hidden_in_every_form() {
        assert_eq!(
            redacted("postgres://app:s3cret@db:5432/app?sslmode=require"),
            "postgres://app:***@db:5432/app?sslmode=require"
        );
        assert_eq!(
            redacted("postgresql://app@db/app?password=s3cret&sslmode=disable"),
            "postgresql://app@db/app?password=***&sslmode=disable"
        );
        assert_eq!(
            redacted("host=db user=app password=s3cret dbname=app"),
            "host=db user=app password=*** dbname=app"
        );
        assert_eq!(
            redacted("host=db password='a b\\'c' user=x"),
            "host=db password='***' user=x"
        );
        // Percent-encoded: both forms are secrets.
        let url = PostgresUrl("postgres://app:p%40ss@db/app".to_owned());
        assert_eq!(url.redacted(), "postgres://app:***@db/app");
        assert!(url.secrets().contains(&"p@ss".to_owned()));
        // No password: unchanged.
        assert_eq!(
            redacted("postgres://postgres@127.0.0.1:38112/postgres"),
            "postgres://postgres@127.0.0.1:38112/postgres"
        );
        assert_eq!(
            format!("{:?}", PostgresUrl("postgres://a:b1@h".to_owned())),
            "PostgresUrl(\"postgres://a:***@h\")"
        );
    }

    #[test]
    fn registered_passwords_are_scrubbed_from_any_text() {
        register(&PostgresUrl(
            "postgres://app:hunter2-unique@db/app".to_owned(),
        ));
        assert_eq!(
            scrub("auth failed for hunter2-unique at db"),
            "auth failed for *** at db"
        );
    }
}
