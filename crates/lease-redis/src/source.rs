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
    /// The primary that owns `slot` in a Redis Cluster, as the first seed that answers
    /// `CLUSTER SLOTS` says.
    Cluster {
        seeds: Arc<Vec<redis::Client>>,
        slot: u16,
    },
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Direct(_) => f.write_str("Direct"),
            Self::Sentinel(_) => f.write_str("Sentinel"),
            Self::Cluster { slot, .. } => write!(f, "Cluster(slot {slot})"),
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
            Self::Cluster { seeds, slot } => slot_owner(seeds, *slot).await,
        }
    }
}

/// The Redis Cluster hash slot of a key whose hash tag is `tag`: CRC16 (XMODEM) mod 16384.
pub(crate) fn hash_slot(tag: &str) -> u16 {
    let mut crc: u16 = 0;
    for byte in tag.bytes() {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// A client for the primary that owns `slot`, asked of each seed in turn (`CLUSTER SLOTS`); the
/// seed's credentials and TLS settings are kept, its address replaced.
async fn slot_owner(seeds: &[redis::Client], slot: u16) -> redis::RedisResult<redis::Client> {
    let mut last = redis::RedisError::from((
        redis::ErrorKind::InvalidClientConfig,
        "no Redis Cluster seed given",
    ));
    for seed in seeds {
        let answer = async {
            let mut connection = seed.get_multiplexed_async_connection().await?;
            redis::cmd("CLUSTER")
                .arg("SLOTS")
                .query_async::<redis::Value>(&mut connection)
                .await
        };
        match answer.await {
            Ok(slots) => match owner_in(&slots, slot) {
                Some((host, port)) => {
                    let info = seed.get_connection_info().clone();
                    let addr = match info.addr() {
                        redis::ConnectionAddr::TcpTls {
                            insecure,
                            tls_params,
                            ..
                        } => redis::ConnectionAddr::TcpTls {
                            host,
                            port,
                            insecure: *insecure,
                            tls_params: tls_params.clone(),
                        },
                        _ => redis::ConnectionAddr::Tcp(host, port),
                    };
                    return redis::Client::open(info.set_addr(addr));
                }
                None => {
                    last = redis::RedisError::from((
                        redis::ErrorKind::Server(redis::ServerErrorKind::ClusterDown),
                        "no node of the cluster serves the prefix's hash slot",
                    ));
                }
            },
            Err(error) => last = error,
        }
    }
    Err(last)
}

/// The primary's address for `slot` in a `CLUSTER SLOTS` answer: entries of `[start, end,
/// [host, port, id, ...], replicas...]`.
fn owner_in(slots: &redis::Value, slot: u16) -> Option<(String, u16)> {
    let redis::Value::Array(ranges) = slots else {
        return None;
    };
    ranges.iter().find_map(|range| {
        let redis::Value::Array(parts) = range else {
            return None;
        };
        let number = |v: Option<&redis::Value>| match v {
            Some(redis::Value::Int(n)) => Some(*n),
            _ => None,
        };
        let (start, end) = (number(parts.first())?, number(parts.get(1))?);
        if !(start..=end).contains(&i64::from(slot)) {
            return None;
        }
        let redis::Value::Array(primary) = parts.get(2)? else {
            return None;
        };
        let host = crate::record::text(primary.first()?)?;
        let port = u16::try_from(number(primary.get(1))?).ok()?;
        Some((host, port))
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn hash_slots_match_redis() {
        // From the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(super::hash_slot("123456789"), 0x31C3);
        assert_eq!(super::hash_slot("foo"), 12182);
        assert_eq!(super::hash_slot("leases"), super::hash_slot("leases"));
    }
}
