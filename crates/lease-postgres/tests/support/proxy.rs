//! A loopback TCP proxy in front of the server that understands just enough of PostgreSQL's
//! wire protocol to lose a reply for real: it forwards a write statement, lets the server run
//! and commit it (its `ReadyForQuery` arrives), and then closes the client's connection instead
//! of passing the reply on. It can also cut every connection at once.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use lease_core::BoxFuture;
use lease_core::conformance::ReplyFaults;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// The statements whose replies may be lost: those that write.
const WRITES: [&str; 6] = [
    "/* lease_postgres acquire */",
    "/* lease_postgres renew */",
    "/* lease_postgres release */",
    "/* lease_postgres delete */",
    "/* lease_postgres fence_and_read */",
    "/* lease_postgres put_fenced */",
];

/// Replies to lose, and what runs between each loss and the client's retry.
#[derive(Default)]
pub struct Faults {
    pending: Mutex<VecDeque<Option<BoxFuture<'static, ()>>>>,
    lost: AtomicU32,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faults")
            .field("lost", &self.lost.load(Ordering::SeqCst))
            .finish_non_exhaustive()
    }
}

impl Faults {
    /// Loses the replies of the next `n` write statements.
    pub fn lose_replies(&self, n: usize) {
        let mut pending = self.pending.lock().unwrap();
        for _ in 0..n {
            pending.push_back(None);
        }
    }

    /// Replies lost so far.
    pub fn lost(&self) -> u32 {
        self.lost.load(Ordering::SeqCst)
    }

    fn take(&self) -> Option<Option<BoxFuture<'static, ()>>> {
        self.pending.lock().unwrap().pop_front()
    }
}

impl ReplyFaults for Faults {
    fn lose_next_reply(&self, meanwhile: Option<BoxFuture<'static, ()>>) {
        self.pending.lock().unwrap().push_back(meanwhile);
    }

    fn lost_replies(&self) -> u32 {
        self.lost()
    }
}

/// The proxy: listening on loopback, forwarding to the server of a URL.
#[derive(Debug)]
pub struct Proxy {
    port: u16,
    /// The faults it places.
    pub faults: Arc<Faults>,
    cut: watch::Sender<u64>,
    statements: Arc<AtomicU32>,
    syncs: Arc<AtomicU32>,
    texts: Arc<Mutex<Vec<String>>>,
}

impl Proxy {
    /// Starts a proxy to `url`'s server.
    pub async fn start(url: &str) -> Arc<Self> {
        let upstream = super::config(url, None);
        let host = match upstream.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
            _ => "127.0.0.1".to_owned(),
        };
        let port = upstream.get_ports().first().copied().unwrap_or(5432);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (cut, _) = watch::channel(0);
        let proxy = Arc::new(Self {
            port: listener.local_addr().unwrap().port(),
            faults: Arc::new(Faults::default()),
            cut,
            statements: Arc::new(AtomicU32::new(0)),
            syncs: Arc::new(AtomicU32::new(0)),
            texts: Arc::default(),
        });
        let weak = Arc::downgrade(&proxy);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Some(proxy) = weak.upgrade() else { return };
                let Ok(server) = TcpStream::connect((host.as_str(), port)).await else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                tokio::spawn(pump(
                    client,
                    server,
                    proxy.faults.clone(),
                    proxy.cut.subscribe(),
                    proxy.statements.clone(),
                    proxy.syncs.clone(),
                    proxy.texts.clone(),
                ));
            }
        });
        proxy
    }

    /// The port to connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Cuts every connection open now (a network failure; the server notices later).
    pub fn cut_all(&self) {
        self.cut.send_modify(|n| *n += 1);
    }

    /// Statements (`Parse` messages) seen so far.
    pub fn statements(&self) -> u32 {
        self.statements.load(Ordering::SeqCst)
    }

    /// The text of every statement parsed so far, and forgets them: what the benchmark's raw
    /// client sends verbatim.
    pub fn take_statements(&self) -> Vec<String> {
        std::mem::take(&mut *self.texts.lock().unwrap())
    }

    /// Round trips so far: `Sync` messages (the client waits for `ReadyForQuery` after each),
    /// and simple queries (`Query`).
    pub fn round_trips(&self) -> u32 {
        self.syncs.load(Ordering::SeqCst)
    }
}

/// Reads one message: the type byte (none for the startup phase) and the whole frame.
async fn read_message(
    stream: &mut tokio::net::tcp::OwnedReadHalf,
    typed: bool,
) -> Option<(u8, Vec<u8>)> {
    let mut frame = Vec::new();
    let kind = if typed {
        let kind = stream.read_u8().await.ok()?;
        frame.push(kind);
        kind
    } else {
        0
    };
    let len = stream.read_u32().await.ok()?;
    frame.extend_from_slice(&len.to_be_bytes());
    let mut body = vec![0; usize::try_from(len).ok()?.checked_sub(4)?];
    stream.read_exact(&mut body).await.ok()?;
    frame.extend_from_slice(&body);
    Some((kind, frame))
}

async fn pump(
    client: TcpStream,
    server: TcpStream,
    faults: Arc<Faults>,
    mut cut: watch::Receiver<u64>,
    statements: Arc<AtomicU32>,
    syncs: Arc<AtomicU32>,
    texts: Arc<Mutex<Vec<String>>>,
) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    // The fault armed for the statement in flight on this connection.
    let lost = faults.clone();
    let (doom_tx, mut doom_rx) =
        tokio::sync::mpsc::unbounded_channel::<Option<BoxFuture<'static, ()>>>();
    let upstream = async move {
        let mut typed = false;
        while let Some((kind, frame)) = read_message(&mut client_read, typed).await {
            if !typed {
                // SSLRequest and GSSENCRequest keep the startup phase; the tests use sslmode=disable.
                let code = frame
                    .get(4..8)
                    .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
                typed = !matches!(code, Some(80_877_103 | 80_877_104));
            } else if kind == b'S' || kind == b'Q' {
                syncs.fetch_add(1, Ordering::SeqCst);
            } else if kind == b'P' {
                statements.fetch_add(1, Ordering::SeqCst);
                // Parse: the statement's name (empty: unnamed), NUL, the text, NUL, ...
                let body = &frame[5..];
                let name_end = body.iter().position(|b| *b == 0).unwrap_or(0);
                let text_bytes = &body[name_end + 1..];
                let text_end = text_bytes
                    .iter()
                    .position(|b| *b == 0)
                    .unwrap_or(text_bytes.len());
                let text = String::from_utf8_lossy(&text_bytes[..text_end]).into_owned();
                if name_end > 0 {
                    // A named (prepared) statement: what a transaction-mode pooler breaks.
                    texts.lock().unwrap().push(format!("NAMED {text}"));
                } else {
                    texts.lock().unwrap().push(text.clone());
                }
                if WRITES.iter().any(|w| text.contains(w))
                    && let Some(meanwhile) = faults.take()
                {
                    let _ = doom_tx.send(meanwhile);
                }
            }
            if server_write.write_all(&frame).await.is_err() {
                return;
            }
        }
    };
    let downstream = async move {
        let mut doomed: Option<Option<BoxFuture<'static, ()>>> = None;
        while let Some((kind, frame)) = read_message(&mut server_read, true).await {
            if doomed.is_none()
                && let Ok(meanwhile) = doom_rx.try_recv()
            {
                doomed = Some(meanwhile);
            }
            if let Some(meanwhile) = doomed.take() {
                if kind == b'Z' {
                    // Committed, and the reply withheld: another client acts, then the
                    // connection drops (this future returns and closes the client's side).
                    if let Some(meanwhile) = meanwhile {
                        meanwhile.await;
                    }
                    lost.lost.fetch_add(1, Ordering::SeqCst);
                    return;
                }
                doomed = Some(meanwhile);
                continue;
            }
            if client_write.write_all(&frame).await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        () = upstream => {}
        () = downstream => {}
        _ = cut.changed() => {}
    }
}
