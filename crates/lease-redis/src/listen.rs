//! Wake-ups pushed by the server: one pub/sub connection per manager, opened when the first
//! watch is made, reconnected when it drops. Every script that frees or takes a key publishes
//! the key on the prefix's channel in the same atomic step.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::StreamExt as _;
use lease_core::backend::Changes;
use lease_core::{LeaseKey, RecordWatch};

use crate::keys::Keys;

/// The watches of one manager: the change counter of every key watched, and whether the
/// subscribing task runs.
#[derive(Debug, Default)]
pub(crate) struct Listener {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    keys: HashMap<String, Changes>,
    running: bool,
}

impl Listener {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Wakes the watches of `payload`'s key.
    fn deliver(&self, payload: &str) {
        let changes = self.lock().keys.get(payload).cloned();
        if let Some(changes) = changes {
            changes.notify();
        }
    }

    /// Wakes every watch: a message may have been missed (the connection was down).
    fn wake_all(&self) {
        let all: Vec<Changes> = self.lock().keys.values().cloned().collect();
        for changes in all {
            changes.notify();
        }
    }
}

/// A watch on `key`, armed now; `None` (the caller polls) outside a tokio runtime.
pub(crate) fn watch(
    listener: &Arc<Listener>,
    source: &crate::source::Source,
    keys: &Keys,
    key: &LeaseKey,
) -> Option<Box<dyn RecordWatch>> {
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    let (watch, start) = {
        let mut state = listener.lock();
        let changes = state.keys.entry(Keys::payload(key)).or_default().clone();
        let start = !state.running;
        state.running = true;
        (changes.watch(), start)
    };
    if start {
        let task = SubscribeTask {
            listener: Arc::downgrade(listener),
            source: source.clone(),
            channel: keys.channel.clone(),
            prefix: keys.prefix.clone(),
        };
        runtime.spawn(task.run());
    }
    Some(watch)
}

struct SubscribeTask {
    listener: Weak<Listener>,
    source: crate::source::Source,
    channel: String,
    prefix: String,
}

impl SubscribeTask {
    /// Subscribes until the manager is gone, reconnecting with a capped backoff. Every
    /// (re)subscription wakes every watch: a change may have landed while nobody listened.
    async fn run(self) {
        let mut backoff =
            lease_core::Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
        loop {
            if self.listener.strong_count() == 0 {
                return;
            }
            match self.subscribe_once().await {
                Ok(()) => return,
                Err(error) => {
                    tracing::warn!(prefix = %self.prefix, %error, "Redis pub/sub connection lost; watches wake and it reconnects");
                    if let Some(listener) = self.listener.upgrade() {
                        listener.wake_all();
                    }
                }
            }
            tokio::time::sleep(backoff.next_delay().max(Duration::from_millis(20))).await;
        }
    }

    /// One connection: `SUBSCRIBE`, then deliver messages until it fails (`Err`) or the
    /// manager is gone (`Ok`).
    async fn subscribe_once(&self) -> Result<(), String> {
        // With Sentinel, the primary of now: after a failover the subscription follows it.
        let connect = async {
            let client = self.source.client().await?;
            client.get_async_pubsub().await
        };
        let mut pubsub = tokio::time::timeout(Duration::from_secs(5), connect)
            .await
            .map_err(|_| "connecting timed out".to_owned())?
            .map_err(|e| e.to_string())?;
        pubsub
            .subscribe(&self.channel)
            .await
            .map_err(|e| e.to_string())?;
        tracing::debug!(prefix = %self.prefix, channel = %self.channel, "subscribed to lease changes");
        match self.listener.upgrade() {
            Some(listener) => listener.wake_all(),
            None => return Ok(()),
        }
        let mut messages = pubsub.on_message();
        loop {
            let next = tokio::time::timeout(Duration::from_secs(5), messages.next()).await;
            let Some(listener) = self.listener.upgrade() else {
                return Ok(());
            };
            match next {
                Ok(Some(message)) => {
                    let payload: String = message.get_payload().unwrap_or_default();
                    listener.deliver(&payload);
                }
                Ok(None) => return Err("the connection closed".to_owned()),
                Err(_) => {} // a periodic look whether the manager is gone
            }
        }
    }
}
