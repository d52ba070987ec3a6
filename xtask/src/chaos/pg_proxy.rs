//! A fault-injecting TCP proxy between the chaos actors and PostgreSQL (protocol 3.0, no TLS).
//!
//! The proxy frames PostgreSQL's wire protocol, so that it can pick out one *request* and inject
//! a [`Fault`] into it: a simple `Query`, or the messages of an extended query up to and
//! including its `Sync` (one `query_typed` call: Parse, Bind, Describe, Execute, Sync). A
//! request is never forwarded twice nor in parts. The startup and authentication messages,
//! `Flush` and `Terminate` pass untouched. An `SSLRequest` or `GSSENCRequest` is answered `N`
//! by the proxy (the chaos run speaks plain TCP on loopback), so that every server message is
//! framed (a type byte and a length).
//!
//! Each client connection gets its own upstream connection and two threads: one reads the
//! client's requests and injects the faults, one relays the server's messages (and throws a
//! reply away for [`Fault::LostReply`]). When either side ends, both sockets are shut down, as a
//! server going away would. Every socket uses [`TICK`] timeouts, so every thread notices the
//! proxy's stop promptly. [`Fault::Throttle`] (a DynamoDB answer) is not armed here; it passes
//! the request on untouched. The proxy itself (listener, armed faults, counters) is
//! [`super::proxy::Proxy::start_postgres`].

use std::io::{self, Read as _, Write as _};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use super::proxy::{Fault, Shared};

/// How long a blocked socket operation waits before it looks at the stop flags again.
pub(super) const TICK: Duration = Duration::from_millis(100);
/// How long connecting to the server may take before it counts as down.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// The largest message accepted (PostgreSQL's own limit for a message is 1 GB; the leases'
/// statements are a few kilobytes).
const MAX_MESSAGE: usize = 64 * 1024 * 1024;
/// The startup codes the proxy answers `N` itself: SSLRequest and GSSENCRequest.
const ENCRYPTION_REQUESTS: [u32; 2] = [80_877_103, 80_877_104];

/// One client connection and its server connection, as both threads see them.
pub(super) struct Conn {
    pub(super) client: TcpStream,
    pub(super) server: TcpStream,
    /// Set when either side ends: both threads then stop.
    closed: AtomicBool,
    /// Set by [`Fault::LostReply`]: the server's messages are thrown away up to and including
    /// the next `ReadyForQuery`, then the connection is closed.
    pub(super) lose_reply: AtomicBool,
}

impl Conn {
    pub(super) fn over(&self, shared: &Shared) -> bool {
        self.closed.load(Ordering::SeqCst) || shared.stopping()
    }

    /// Ends the connection: both sockets shut down (FIN, or RST if `reset`).
    pub(super) fn close(&self, reset: bool) {
        self.closed.store(true, Ordering::SeqCst);
        if reset {
            let _ = nix::sys::socket::setsockopt(
                &self.client,
                nix::sys::socket::sockopt::Linger,
                &nix::libc::linger {
                    l_onoff: 1,
                    l_linger: 0,
                },
            );
        }
        let _ = self.client.shutdown(Shutdown::Both);
        let _ = self.server.shutdown(Shutdown::Both);
    }
}

/// Serves one client connection (the accept loop of [`super::proxy::Proxy`] runs it on a
/// thread of its own): its server connection, and a second thread relaying the replies.
pub(super) fn serve(client: TcpStream, shared: &Shared) {
    serve_with(client, shared, forward_requests, relay_replies);
}

/// Serves one client connection with a protocol's two halves: `forward` reads the client's
/// requests (taking a fault for each), `relay` relays the server's replies on a second thread
/// (and throws them away once `lose_reply` is set). The Redis proxy frames its requests so.
pub(super) fn serve_with(
    client: TcpStream,
    shared: &Shared,
    forward: fn(&Conn, &Shared) -> Result<(), Ending>,
    relay: fn(&Conn, &Shared),
) {
    let Ok(server) = TcpStream::connect_timeout(&shared.upstream, CONNECT_TIMEOUT) else {
        shared.count(|c| c.upstream_down += 1);
        return;
    };
    let setup = |s: &TcpStream| {
        s.set_nonblocking(false)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(TICK))
    };
    if setup(&client).is_err() || setup(&server).is_err() {
        return;
    }
    let conn = Conn {
        client,
        server,
        closed: AtomicBool::new(false),
        lose_reply: AtomicBool::new(false),
    };
    let relayed = thread::scope(|scope| {
        let relay = scope.spawn(|| relay(&conn, shared));
        if let Err(Ending::Malformed) = forward(&conn, shared) {
            shared.count(|c| c.malformed += 1);
        }
        conn.close(false);
        relay.join()
    });
    if relayed.is_err() {
        shared.count(|c| c.panicked += 1);
    }
}

/// Why a direction of a connection ended early.
#[derive(Debug)]
pub(super) enum Ending {
    /// Closed: by a side, a fault, or the proxy stopping.
    Closed,
    /// A message the proxy cannot frame.
    Malformed,
}

/// Reads exactly `buf.len()` bytes, waking every [`TICK`] to look at the flags.
fn read_exact(
    mut from: &TcpStream,
    buf: &mut [u8],
    conn: &Conn,
    shared: &Shared,
) -> Result<(), Ending> {
    let mut at = 0;
    while at < buf.len() {
        if conn.over(shared) {
            return Err(Ending::Closed);
        }
        match from.read(&mut buf[at..]) {
            Ok(0) => return Err(Ending::Closed),
            Ok(n) => at += n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Err(Ending::Closed),
        }
    }
    Ok(())
}

/// A message's length field: the length of the rest, the field included.
fn body_len(len: [u8; 4]) -> Result<usize, Ending> {
    let len = usize::try_from(u32::from_be_bytes(len)).map_err(|_| Ending::Malformed)?;
    if !(4..=MAX_MESSAGE).contains(&len) {
        return Err(Ending::Malformed);
    }
    Ok(len - 4)
}

/// One typed message (type byte, length, body), whole.
fn read_typed(from: &TcpStream, conn: &Conn, shared: &Shared) -> Result<Vec<u8>, Ending> {
    let mut head = [0u8; 5];
    read_exact(from, &mut head, conn, shared)?;
    let len = body_len([head[1], head[2], head[3], head[4]])?;
    let mut message = Vec::with_capacity(5 + len);
    message.extend_from_slice(&head);
    message.resize(5 + len, 0);
    read_exact(from, &mut message[5..], conn, shared)?;
    Ok(message)
}

pub(super) fn send(mut to: &TcpStream, bytes: &[u8]) -> Result<(), Ending> {
    to.write_all(bytes).map_err(|_| Ending::Closed)
}

/// The client's side: the startup (encryption requests answered `N`), then requests, each
/// forwarded whole or hit by the next armed fault.
fn forward_requests(conn: &Conn, shared: &Shared) -> Result<(), Ending> {
    loop {
        let mut len = [0u8; 4];
        read_exact(&conn.client, &mut len, conn, shared)?;
        let mut startup = len.to_vec();
        startup.resize(4 + body_len(len)?, 0);
        read_exact(&conn.client, &mut startup[4..], conn, shared)?;
        let code = startup
            .get(4..8)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
        if code.is_some_and(|code| ENCRYPTION_REQUESTS.contains(&code)) {
            send(&conn.client, b"N")?;
            continue;
        }
        send(&conn.server, &startup)?;
        break;
    }
    let mut request = Vec::new();
    loop {
        let message = read_typed(&conn.client, conn, shared)?;
        let kind = message[0];
        request.extend_from_slice(&message);
        match kind {
            // Parse, Bind, Describe, Execute, Close: an extended query goes on to its Sync.
            b'P' | b'B' | b'D' | b'E' | b'C' => continue,
            b'S' | b'Q' => {
                shared.count(|c| c.requests += 1);
                let fault = shared.take_fault();
                inject(conn, shared, &request, fault)?;
            }
            // Startup and authentication answers, Flush, Terminate, copy data: untouched.
            _ => send(&conn.server, &request)?,
        }
        request.clear();
    }
}

/// Forwards `request`, or does what `fault` says instead.
pub(super) fn inject(
    conn: &Conn,
    shared: &Shared,
    request: &[u8],
    fault: Option<Fault>,
) -> Result<(), Ending> {
    let forward = || {
        shared.count(|c| c.forwarded += 1);
        send(&conn.server, request)
    };
    match fault {
        None | Some(Fault::Throttle) => forward(),
        Some(Fault::Delay(hold)) => {
            pause(hold, conn, shared)?;
            forward()
        }
        Some(Fault::Drop) => {
            conn.close(false);
            Err(Ending::Closed)
        }
        Some(Fault::Reset) => {
            conn.close(true);
            Err(Ending::Closed)
        }
        Some(Fault::Blackhole(hold)) => {
            // Swallow what the client sends meanwhile; then close.
            let until = Instant::now() + hold;
            let mut sink = [0u8; 4096];
            while Instant::now() < until && !conn.over(shared) {
                match (&conn.client).read(&mut sink) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                        ) => {}
                    Err(_) => break,
                }
            }
            conn.close(false);
            Err(Ending::Closed)
        }
        Some(Fault::LostReply) => {
            conn.lose_reply.store(true, Ordering::SeqCst);
            forward()
        }
    }
}

fn pause(hold: Duration, conn: &Conn, shared: &Shared) -> Result<(), Ending> {
    let until = Instant::now() + hold;
    while Instant::now() < until {
        if conn.over(shared) {
            return Err(Ending::Closed);
        }
        thread::sleep(until.saturating_duration_since(Instant::now()).min(TICK));
    }
    Ok(())
}

/// The server's side: every message relayed, except the reply a [`Fault::LostReply`] throws
/// away (up to its `ReadyForQuery`, after which the connection closes).
fn relay_replies(conn: &Conn, shared: &Shared) {
    while let Ok(message) = read_typed(&conn.server, conn, shared) {
        if conn.lose_reply.load(Ordering::SeqCst) {
            if message[0] == b'Z' {
                break;
            }
            continue;
        }
        if send(&conn.client, &message).is_err() {
            break;
        }
    }
    conn.close(false);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chaos::proxy::Proxy;
    use std::net::{Ipv4Addr, SocketAddr, TcpListener};
    use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

    fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
        mutex.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A server that speaks just enough of the protocol: any startup is answered
    /// `AuthenticationOk` and `ReadyForQuery`; every request (up to `Sync` or a `Query`) with
    /// `CommandComplete` and `ReadyForQuery`. Counts the requests it received.
    fn fake_server() -> (SocketAddr, Arc<Mutex<u32>>) {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        let addr = listener.local_addr().expect("addr");
        let seen = Arc::new(Mutex::new(0));
        let counted = Arc::clone(&seen);
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let counted = Arc::clone(&counted);
                thread::spawn(move || answer(stream, &counted));
            }
        });
        (addr, seen)
    }

    fn answer(mut stream: TcpStream, seen: &Mutex<u32>) {
        let mut len = [0u8; 4];
        if stream.read_exact(&mut len).is_err() {
            return;
        }
        let mut rest = vec![0u8; u32::from_be_bytes(len) as usize - 4];
        let _ = stream.read_exact(&mut rest);
        let ready = [b'Z', 0, 0, 0, 5, b'I'];
        let _ = stream.write_all(&[b'R', 0, 0, 0, 8, 0, 0, 0, 0]);
        let _ = stream.write_all(&ready);
        loop {
            let mut head = [0u8; 5];
            if stream.read_exact(&mut head).is_err() {
                return;
            }
            let mut body =
                vec![0u8; u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize - 4];
            if stream.read_exact(&mut body).is_err() {
                return;
            }
            if matches!(head[0], b'S' | b'Q') {
                *lock(seen) += 1;
                let _ = stream.write_all(&[b'C', 0, 0, 0, 5, 0]);
                let _ = stream.write_all(&ready);
            }
        }
    }

    /// Connects through `proxy`: an SSLRequest (answered `N`), a startup, and its answer.
    fn connect(proxy: &Proxy) -> TcpStream {
        let mut stream = TcpStream::connect(proxy.addr()).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        stream
            .write_all(&[0, 0, 0, 8, 4, 210, 22, 47])
            .expect("ssl request");
        let mut n = [0u8; 1];
        stream.read_exact(&mut n).expect("ssl answer");
        assert_eq!(&n, b"N");
        stream
            .write_all(&[0, 0, 0, 9, 0, 3, 0, 0, 0])
            .expect("startup");
        let mut answer = [0u8; 15];
        stream.read_exact(&mut answer).expect("auth ok and ready");
        assert_eq!((answer[0], answer[9]), (b'R', b'Z'));
        stream
    }

    /// An extended query: Parse, Bind, Execute, Sync. Returns the answer's bytes (empty if the
    /// connection closed without one).
    fn query(stream: &mut TcpStream) -> Vec<u8> {
        let parse = [b'P', 0, 0, 0, 4];
        let bind = [b'B', 0, 0, 0, 4];
        let execute = [b'E', 0, 0, 0, 4];
        let sync = [b'S', 0, 0, 0, 4];
        for message in [parse, bind, execute, sync] {
            if stream.write_all(&message).is_err() {
                return Vec::new();
            }
        }
        let mut answer = [0u8; 12];
        match stream.read_exact(&mut answer) {
            Ok(()) => answer.to_vec(),
            Err(_) => Vec::new(),
        }
    }

    #[test]
    fn requests_pass_whole_and_faults_hit_them_in_order() {
        let (upstream, seen) = fake_server();
        let proxy = Proxy::start_postgres(upstream).expect("proxy");
        let mut client = connect(&proxy);
        assert_eq!(query(&mut client)[0], b'C');
        assert_eq!(*lock(&seen), 1);

        // Lost reply: applied once, no answer, the connection closed.
        proxy.arm(Fault::LostReply, 1);
        assert!(query(&mut client).is_empty());
        assert_eq!(*lock(&seen), 2);

        // Drop: not applied, closed.
        let mut client = connect(&proxy);
        proxy.arm(Fault::Drop, 1);
        assert!(query(&mut client).is_empty());
        assert_eq!(*lock(&seen), 2);

        // Delay: applied, answered, later.
        let mut client = connect(&proxy);
        proxy.arm(Fault::Delay(Duration::from_millis(300)), 1);
        let started = Instant::now();
        assert_eq!(query(&mut client)[0], b'C');
        assert!(started.elapsed() >= Duration::from_millis(300));
        assert_eq!(*lock(&seen), 3);

        // Blackhole: neither applied nor answered, then closed.
        proxy.arm(Fault::Blackhole(Duration::from_millis(200)), 1);
        assert!(query(&mut client).is_empty());
        assert_eq!(*lock(&seen), 3);

        let counters = proxy.counters();
        assert_eq!(
            (
                counters.lost_reply,
                counters.drop,
                counters.delay,
                counters.blackhole
            ),
            (1, 1, 1, 1)
        );
        assert_eq!((counters.requests, counters.forwarded), (5, 3));
        assert_eq!(counters.panicked, 0);
    }

    #[test]
    fn a_server_that_is_down_closes_the_client_connection() {
        let free = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        let gone = free.local_addr().expect("addr");
        drop(free);
        let proxy = Proxy::start_postgres(gone).expect("proxy");
        let mut client = TcpStream::connect(proxy.addr()).expect("connect");
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut byte = [0u8; 1];
        assert!(matches!(client.read(&mut byte), Ok(0) | Err(_)));
        let started = Instant::now();
        while proxy.counters().upstream_down == 0 {
            assert!(started.elapsed() < Duration::from_secs(5));
            thread::sleep(Duration::from_millis(10));
        }
    }
}
