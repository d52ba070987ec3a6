//! The Redis URL of `--redis` (or `LEASE_REDIS_URL`), and keeping its password out of every
//! message and trace, as [`crate::pg_url`] does for PostgreSQL's.
//!
//! The URL is taken as redis-rs reads it (`redis://[USER:PASSWORD@]HOST[:PORT][/DB]`,
//! `rediss://...` for TLS, or `redis+unix:///PATH?pass=PASSWORD`) and never shown as given:
//! messages name it [`RedisUrl::redacted`], with every password replaced by `***`. `main`
//! registers its passwords with [`crate::pg_url::register_secrets`], so that
//! [`crate::pg_url::scrub`] removes them from whatever `lease` prints on stderr, should a
//! driver's message ever quote one.

use std::fmt;

use crate::pg_url::percent_decoded;

/// What a password is replaced with.
const HIDDEN: &str = "***";

/// A Redis URL, kept as given for the client; its `Debug` and `Display` forms are
/// [`RedisUrl::redacted`].
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct RedisUrl(String);

impl RedisUrl {
    /// clap's value parser: any text is accepted here (the client reads it when the store is
    /// opened), so that clap never quotes the URL in an error of its own.
    pub(crate) fn from_arg(text: &str) -> Result<Self, std::convert::Infallible> {
        Ok(Self(text.to_owned()))
    }

    /// The text the client reads. Never print it: print [`Self::redacted`].
    #[cfg_attr(not(any(feature = "redis", test)), expect(dead_code))]
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
    /// password (everything after the first `:` of what precedes the last `@` before the query,
    /// so that a password with an unescaped `@` or `/` is hidden whole), and every `pass` or
    /// `password` query parameter (redis-rs reads `pass` in `redis+unix://` URLs). A URL
    /// without a scheme redis-rs knows is taken whole as a secret: it cannot be read, and may
    /// be a password pasted in the wrong place.
    pub(crate) fn secrets(&self) -> Vec<String> {
        let text = self.0.as_str();
        let mut found = Vec::new();
        let rest = [
            "redis://",
            "rediss://",
            "redis+unix://",
            "unix://",
            "valkey://",
            "valkeys://",
        ]
        .iter()
        .find_map(|scheme| text.strip_prefix(scheme));
        match rest {
            Some(rest) => {
                let (head, query) = match rest.split_once('?') {
                    Some((head, query)) => (head, Some(query)),
                    None => (rest, None),
                };
                let head = head.split_once('#').map_or(head, |(head, _)| head);
                if let Some((credentials, _)) = head.rsplit_once('@')
                    && let Some((_, password)) = credentials.split_once(':')
                {
                    found.push(password.to_owned());
                }
                if let Some(query) = query {
                    let query = query.split_once('#').map_or(query, |(query, _)| query);
                    for pair in query.split('&') {
                        if let Some(("pass" | "password", value)) = pair.split_once('=') {
                            found.push(value.to_owned());
                        }
                    }
                }
            }
            None => found.push(text.to_owned()),
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

impl fmt::Debug for RedisUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RedisUrl").field(&self.redacted()).finish()
    }
}

impl fmt::Display for RedisUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redacted(text: &str) -> String {
        RedisUrl(text.to_owned()).redacted()
    }

    #[test]
    fn passwords_are_hidden_in_every_form() {
        assert_eq!(
            redacted("redis://:s3cret@cache:6379/0"),
            "redis://:***@cache:6379/0"
        );
        assert_eq!(
            redacted("rediss://app:s3cret@cache.internal:6380"),
            "rediss://app:***@cache.internal:6380"
        );
        assert_eq!(
            redacted("redis+unix:///run/redis.sock?db=1&pass=s3cret"),
            "redis+unix:///run/redis.sock?db=1&pass=***"
        );
        // An unescaped '@' or '/' in the password: hidden whole.
        assert_eq!(redacted("redis://:p@ss@cache"), "redis://:***@cache");
        assert_eq!(redacted("redis://:a/b@cache/2"), "redis://:***@cache/2");
        // Percent-encoded: both forms are secrets.
        let url = RedisUrl("redis://app:p%40ss@cache".to_owned());
        assert_eq!(url.redacted(), "redis://app:***@cache");
        assert!(url.secrets().contains(&"p@ss".to_owned()));
        // No password (a user name alone is not one): unchanged.
        assert_eq!(
            redacted("redis://127.0.0.1:38214"),
            "redis://127.0.0.1:38214"
        );
        assert_eq!(redacted("redis://app@cache"), "redis://app@cache");
        // Not a Redis URL: nothing of it is shown.
        assert_eq!(redacted("s3cret"), "***");
        assert_eq!(
            format!("{:?}", RedisUrl("redis://a:b1@h".to_owned())),
            "RedisUrl(\"redis://a:***@h\")"
        );
    }

    #[test]
    fn registered_passwords_are_scrubbed_from_any_text() {
        crate::pg_url::register_secrets(
            RedisUrl("rediss://default:swordfish-unique@cache".to_owned()).secrets(),
        );
        assert_eq!(
            crate::pg_url::scrub("WRONGPASS swordfish-unique at cache"),
            "WRONGPASS *** at cache"
        );
    }
}
