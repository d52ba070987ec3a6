//! A loopback TCP proxy in front of the server that understands just enough of RESP to count
//! commands and lose a reply for real: it forwards a writing script (`EVALSHA`/`EVAL` whose
//! `ARGV[1]` names a writing operation), lets the server run it, and then closes the client's
//! connection instead of passing the reply on. It can also cut every connection at once.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use lease_core::BoxFuture;
use lease_core::conformance::ReplyFaults;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::OwnedReadHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// The operations whose replies may be lost: those that write.
const WRITES: [&str; 6] = [
    "acquire",
    "renew",
    "release",
    "delete",
    "fence_and_read",
    "put_fenced",
];

type Meanwhile = Option<BoxFuture<'static, ()>>;

/// Replies to lose, and what runs between each loss and the client's retry.
#[derive(Default)]
pub struct Faults {
    pending: Mutex<VecDeque<Meanwhile>>,
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
    /// Loses the replies of the next `n` writing scripts.
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

    fn take(&self) -> Option<Meanwhile> {
        self.pending.lock().unwrap().pop_front()
    }

    fn put_back(&self, meanwhile: Meanwhile) {
        self.pending.lock().unwrap().push_front(meanwhile);
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
    commands: Arc<Mutex<Vec<String>>>,
    count: Arc<AtomicU32>,
}

impl Proxy {
    /// Starts a proxy to `url`'s server.
    pub async fn start(url: &str) -> Arc<Self> {
        let (host, port) = super::host_port(url);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (cut, _) = watch::channel(0);
        let proxy = Arc::new(Self {
            port: listener.local_addr().unwrap().port(),
            faults: Arc::new(Faults::default()),
            cut,
            commands: Arc::default(),
            count: Arc::default(),
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
                tokio::spawn(pump(client, server, proxy.clone()));
            }
        });
        proxy
    }

    /// The port to connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Cuts every connection open now (a network failure).
    pub fn cut_all(&self) {
        self.cut.send_modify(|n| *n += 1);
    }

    /// Commands sent so far, over every connection: each is one round trip, since the crate
    /// never pipelines the commands of one operation.
    pub fn commands(&self) -> u32 {
        self.count.load(Ordering::SeqCst)
    }

    /// Each command seen so far (its name, and for a script the operation it names), and
    /// forgets them.
    pub fn take_commands(&self) -> Vec<String> {
        std::mem::take(&mut *self.commands.lock().unwrap())
    }
}

/// One RESP frame, whole, as the bytes that carried it; its parts when it is an array of bulk
/// strings (a command).
async fn read_frame(reader: &mut BufReader<OwnedReadHalf>) -> Option<(Vec<u8>, Vec<Vec<u8>>)> {
    let mut frame = Vec::new();
    let mut parts = Vec::new();
    read_into(reader, &mut frame, Some(&mut parts)).await?;
    Some((frame, parts))
}

async fn read_line(reader: &mut BufReader<OwnedReadHalf>, frame: &mut Vec<u8>) -> Option<String> {
    let mut line = Vec::new();
    if reader.read_until(b'\n', &mut line).await.ok()? == 0 {
        return None;
    }
    frame.extend_from_slice(&line);
    Some(String::from_utf8_lossy(&line).trim_end().to_owned())
}

fn read_into<'a>(
    reader: &'a mut BufReader<OwnedReadHalf>,
    frame: &'a mut Vec<u8>,
    parts: Option<&'a mut Vec<Vec<u8>>>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<()>> + Send + 'a>> {
    Box::pin(async move {
        let line = read_line(reader, frame).await?;
        let (kind, rest) = line.split_at(1.min(line.len()));
        match kind {
            "$" => {
                let len: i64 = rest.parse().ok()?;
                if len >= 0 {
                    let mut body = vec![0; usize::try_from(len).ok()? + 2];
                    reader.read_exact(&mut body).await.ok()?;
                    frame.extend_from_slice(&body);
                    body.truncate(body.len() - 2);
                    if let Some(parts) = parts {
                        parts.push(body);
                    }
                }
            }
            "*" => {
                let count: i64 = rest.parse().ok()?;
                let mut parts = parts;
                for _ in 0..count.max(0) {
                    let mut sub = Vec::new();
                    read_into(reader, frame, Some(&mut sub)).await?;
                    if let Some(parts) = parts.as_deref_mut() {
                        parts.extend(sub);
                    }
                }
            }
            _ => {}
        }
        Some(())
    })
}

/// What a command is, for the tests: its name, and for a script the operation (`ARGV[1]`).
fn describe(parts: &[Vec<u8>]) -> (String, Option<String>) {
    let text = |i: usize| {
        parts
            .get(i)
            .map(|p| String::from_utf8_lossy(p).into_owned())
    };
    let name = text(0).unwrap_or_default().to_uppercase();
    let op = if name == "EVALSHA" || name == "EVAL" {
        let keys: usize = text(2).and_then(|n| n.parse().ok()).unwrap_or(0);
        text(3 + keys)
    } else {
        None
    };
    (name, op)
}

async fn pump(client: TcpStream, server: TcpStream, proxy: Arc<Proxy>) {
    let (client_read, mut client_write) = client.into_split();
    let (server_read, mut server_write) = server.into_split();
    let (mut client_read, mut server_read) =
        (BufReader::new(client_read), BufReader::new(server_read));
    let mut cut = proxy.cut.subscribe();
    let faults = proxy.faults.clone();
    // One marker per command forwarded, in order: whether its reply is to be lost.
    let (marks_tx, mut marks_rx) = tokio::sync::mpsc::unbounded_channel::<Option<Meanwhile>>();
    let upstream = {
        let proxy = proxy.clone();
        async move {
            while let Some((frame, parts)) = read_frame(&mut client_read).await {
                let (name, op) = describe(&parts);
                proxy.count.fetch_add(1, Ordering::SeqCst);
                proxy.commands.lock().unwrap().push(match &op {
                    Some(op) => format!("{name} {op}"),
                    None => name.clone(),
                });
                let doom = match op {
                    Some(op) if WRITES.contains(&op.as_str()) => proxy.faults.take(),
                    _ => None,
                };
                let _ = marks_tx.send(doom);
                if server_write.write_all(&frame).await.is_err() {
                    return;
                }
            }
        }
    };
    let downstream = async move {
        while let Some((frame, _)) = read_frame(&mut server_read).await {
            // Pub/sub messages come unasked: they take no marker.
            if let Ok(Some(meanwhile)) = marks_rx.try_recv() {
                if frame.starts_with(b"-NOSCRIPT") {
                    // Nothing ran: the fault waits for the script's next sending.
                    faults.put_back(meanwhile);
                } else {
                    // Applied, and the reply withheld: another client acts, then the
                    // connection drops (this future returns and closes the client's side).
                    if let Some(meanwhile) = meanwhile {
                        meanwhile.await;
                    }
                    faults.lost.fetch_add(1, Ordering::SeqCst);
                    return;
                }
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
