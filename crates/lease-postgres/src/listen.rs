//! Wake-ups pushed by the server: one `LISTEN` connection per manager, opened when the first
//! watch is made, reconnected when it drops. Every statement that changes a holder calls
//! `pg_notify(channel, key)`, delivered when it commits.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use lease_core::backend::Changes;
use lease_core::{LeaseKey, RecordWatch};
use tokio_postgres::config::SslMode;
use tokio_postgres::{AsyncMessage, Config};

use crate::table::TableName;

/// The watches of one manager: the change counter of every key watched, and whether the
/// listening task runs.
#[derive(Debug, Default)]
pub(crate) struct Listener {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Each watched key's change counter and how many watches of it are alive: an entry goes
    /// when its last watch is dropped, so a manager that watches many keys over its life holds
    /// only those watched now.
    keys: HashMap<String, (Changes, usize)>,
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
        let changes = self
            .lock()
            .keys
            .get(payload)
            .map(|(changes, _)| changes.clone());
        if let Some(changes) = changes {
            changes.notify();
        }
    }

    /// Wakes every watch: a notification may have been missed (the connection was down).
    fn wake_all(&self) {
        let all: Vec<Changes> = self
            .lock()
            .keys
            .values()
            .map(|(changes, _)| changes.clone())
            .collect();
        for changes in all {
            changes.notify();
        }
    }

    /// A new watch of the key whose payload is `payload`, counted until it is dropped.
    fn watch(self: &Arc<Self>, payload: String) -> (KeyWatch, bool) {
        let mut state = self.lock();
        let (changes, watches) = state.keys.entry(payload.clone()).or_default();
        *watches += 1;
        let inner = changes.watch();
        let start = !state.running;
        state.running = true;
        let watch = KeyWatch {
            inner,
            listener: Arc::downgrade(self),
            payload,
        };
        (watch, start)
    }

    /// Forgets one watch of `payload`'s key, and the key once none is left.
    fn unwatch(&self, payload: &str) {
        let mut state = self.lock();
        if let Some((_, watches)) = state.keys.get_mut(payload) {
            *watches = watches.saturating_sub(1);
            if *watches == 0 {
                state.keys.remove(payload);
            }
        }
    }

    /// How many keys have a live watch.
    #[cfg(test)]
    fn watched_keys(&self) -> usize {
        self.lock().keys.len()
    }
}

/// One watch of a key: lease-core's watch of the key's counter, which it forgets when dropped.
#[derive(Debug)]
struct KeyWatch {
    inner: Box<dyn RecordWatch>,
    listener: Weak<Listener>,
    payload: String,
}

impl RecordWatch for KeyWatch {
    fn next_change(&mut self) -> lease_core::BoxFuture<'_, ()> {
        self.inner.next_change()
    }
}

impl Drop for KeyWatch {
    fn drop(&mut self) {
        if let Some(listener) = self.listener.upgrade() {
            listener.unwatch(&self.payload);
        }
    }
}

/// The payload a statement notifies for `key`.
fn payload(key: &LeaseKey) -> String {
    format!("{}\u{1f}{}", key.partition(), key.sort().unwrap_or(""))
}

/// A watch on `key`, armed now; `None` (the caller polls) without a listener configuration or
/// outside a tokio runtime.
pub(crate) fn watch(
    listener: &Arc<Listener>,
    config: Option<&Config>,
    table: &TableName,
    key: &LeaseKey,
) -> Option<Box<dyn RecordWatch>> {
    let config = config?.clone();
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    let (watch, start) = listener.watch(payload(key));
    if start {
        let task = ListenTask {
            listener: Arc::downgrade(listener),
            config,
            channel: table.channel.clone(),
            table: table.plain.clone(),
        };
        runtime.spawn(task.run());
    }
    Some(Box::new(watch))
}

struct ListenTask {
    listener: Weak<Listener>,
    config: Config,
    channel: String,
    table: String,
}

impl ListenTask {
    /// Listens until the manager is gone, reconnecting with a capped backoff. Every (re)connect
    /// wakes every watch: a change may have landed while nobody listened.
    async fn run(self) {
        let mut backoff =
            lease_core::Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
        loop {
            if self.listener.strong_count() == 0 {
                return;
            }
            match self.listen_once().await {
                Ok(()) => return,
                Err(error) => {
                    tracing::warn!(table = %self.table, %error, "LISTEN connection lost; watches wake and reconnect");
                    if let Some(listener) = self.listener.upgrade() {
                        listener.wake_all();
                    }
                }
            }
            tokio::time::sleep(backoff.next_delay().max(Duration::from_millis(20))).await;
        }
    }

    /// One connection: `LISTEN`, then deliver notifications until it fails (`Err`) or the
    /// manager is gone (`Ok`).
    async fn listen_once(&self) -> Result<(), String> {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let client = match self.config.get_ssl_mode() {
            SslMode::Disable => {
                let (client, connection) = self
                    .config
                    .connect(tokio_postgres::NoTls)
                    .await
                    .map_err(|e| e.to_string())?;
                tokio::spawn(drive(connection, tx));
                client
            }
            _ => {
                let tls = crate::connect::tls_connector().map_err(|e| e.to_string())?;
                let (client, connection) =
                    self.config.connect(tls).await.map_err(|e| e.to_string())?;
                tokio::spawn(drive(connection, tx));
                client
            }
        };
        client
            .batch_execute(&format!("LISTEN \"{}\"", self.channel))
            .await
            .map_err(|e| e.to_string())?;
        tracing::debug!(table = %self.table, channel = %self.channel, "listening for lease changes");
        match self.listener.upgrade() {
            Some(listener) => listener.wake_all(),
            None => return Ok(()),
        }
        loop {
            let next = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await;
            let Some(listener) = self.listener.upgrade() else {
                return Ok(());
            };
            match next {
                Ok(Some(payload)) => listener.deliver(&payload),
                Ok(None) => return Err("the connection closed".to_owned()),
                Err(_) => {} // a periodic look whether the manager is gone
            }
        }
    }
}

/// Drives a connection, passing on its notifications, until it ends.
async fn drive<S, T>(
    mut connection: tokio_postgres::Connection<S, T>,
    tx: tokio::sync::mpsc::UnboundedSender<String>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    loop {
        match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            Some(Ok(AsyncMessage::Notification(n))) => {
                if tx.send(n.payload().to_owned()).is_err() {
                    return;
                }
            }
            Some(Ok(_)) => {}
            Some(Err(_)) | None => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_key_is_forgotten_when_its_last_watch_is_dropped() {
        let listener = Arc::new(Listener::default());
        // A server that is not there: the listening task retries in the background, and ends
        // once the listener is dropped.
        let config: Config = "host=127.0.0.1 port=1 user=nobody connect_timeout=1"
            .parse()
            .unwrap_or_else(|_| Config::new());
        let table = TableName::parse("leases").expect("a valid table name");
        let key = |n: usize| LeaseKey::new(format!("key-{n}")).expect("a valid key");
        let many: Vec<_> = (0..1000)
            .filter_map(|n| watch(&listener, Some(&config), &table, &key(n)))
            .collect();
        assert_eq!(listener.watched_keys(), 1000);
        let first = watch(&listener, Some(&config), &table, &key(0));
        drop(many);
        assert_eq!(listener.watched_keys(), 1, "key-0 still has a watch");
        let mut first = first.expect("a watch");
        listener.deliver(&payload(&key(0)));
        tokio::time::timeout(Duration::from_secs(1), first.next_change())
            .await
            .expect("the watch still wakes");
        drop(first);
        assert_eq!(listener.watched_keys(), 0);
    }
}
