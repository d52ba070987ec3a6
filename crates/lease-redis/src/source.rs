//! Where the primary is: one address (a standalone server, or a name a proxy or DNS moves on
//! failover), or whatever the Sentinels say the primary of a named group is now, asked again
//! for every new connection.

use std::sync::Arc;

use redis::sentinel::SentinelClient;

/// How a manager finds the primary it sends every call to.
#[derive(Clone)]
pub(crate) enum Source {
    /// One address, as a [`redis::Client`] knows it (boxed: it is large, and cloned once per
    /// connection).
    Direct(Box<redis::Client>),
    /// The primary the Sentinels name (they verify its `ROLE` on the way).
    Sentinel(Arc<tokio::sync::Mutex<SentinelClient>>),
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Direct(_) => f.write_str("Direct"),
            Self::Sentinel(_) => f.write_str("Sentinel"),
        }
    }
}

impl Source {
    /// A client for the primary now: for Sentinel, one round trip to a Sentinel and a `ROLE`
    /// to the primary it names.
    pub(crate) async fn client(&self) -> redis::RedisResult<redis::Client> {
        match self {
            Self::Direct(client) => Ok(redis::Client::clone(client)),
            Self::Sentinel(sentinel) => sentinel.lock().await.async_get_client().await,
        }
    }
}
