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

    /// Wakes every watch: a notification may have been missed (the connection was down).
    fn wake_all(&self) {
        let all: Vec<Changes> = self.lock().keys.values().cloned().collect();
        for changes in all {
            changes.notify();
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
    let (watch, start) = {
        let mut state = listener.lock();
        let changes = state.keys.entry(payload(key)).or_default().clone();
        let start = !state.running;
        state.running = true;
        (changes.watch(), start)
    };
    if start {
        let task = ListenTask {
            listener: Arc::downgrade(listener),
            config,
            channel: table.channel.clone(),
            table: table.plain.clone(),
        };
        runtime.spawn(task.run());
    }
    Some(watch)
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
