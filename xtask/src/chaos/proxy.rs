//! A fault-injecting TCP proxy between the chaos actors and DynamoDB Local (HTTP/1.1),
//! PostgreSQL (its protocol is framed in `super::pg_proxy`, with the same faults and counters),
//! or Redis (RESP commands framed in `super::redis_proxy`).
//!
//! The proxy frames HTTP/1.1 itself, so that it can pick out one request and inject a [`Fault`]
//! into it without disturbing any other: it reads a whole request (head up to `\r\n\r\n`, then
//! `Content-Length` bytes or a chunked body), decides, forwards it in one piece, reads the whole
//! response (`Content-Length`, chunked, or until the upstream closes) and relays it. A request is
//! never forwarded twice nor in parts, and a response only ever goes to the request it answers.
//!
//! Each client connection gets a thread and, at its first forwarded request, its own upstream
//! connection. The client connection lives no longer than that upstream connection: when
//! DynamoDB Local closes it (or cannot be reached, or fails mid-exchange) the proxy closes the
//! client connection, as DynamoDB itself would. Every socket uses [`TICK`] timeouts, so every
//! thread notices [`Proxy::stop`] promptly.

use std::collections::VecDeque;
use std::io::{self, Read as _, Write as _};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use nix::libc;
use nix::sys::socket::{setsockopt, sockopt};

/// How long a blocked socket operation waits before it looks at the stop flag again.
const TICK: Duration = Duration::from_millis(100);
/// How long connecting to the upstream may take before it counts as down. On loopback a
/// connect is refused or accepted at once; only a stopped server with a full backlog waits.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// The longest request or response head accepted.
const MAX_HEAD: usize = 64 * 1024;
/// The longest chunk-size or trailer line accepted.
const MAX_LINE: usize = 8 * 1024;
/// The largest message (head and body) buffered; DynamoDB requests are at most 16 MB.
const MAX_MESSAGE: usize = 64 * 1024 * 1024;
/// The body of [`Fault::Throttle`]'s answer. The SDK takes the error code from `__type` after
/// the `#`: `ThrottlingException` is in the AWS SDK's list of throttling errors (aws-runtime's
/// `THROTTLING_ERRORS`) and in lease-dynamo's own list of throttling codes, which both retry.
const THROTTLE_BODY: &str = concat!(
    r#"{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","#,
    r#""message":"Rate of requests exceeds the allowed throughput."}"#
);

/// A fault the proxy injects into one request (see [`Proxy::arm`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Hold the request this long, then forward it.
    Delay(Duration),
    /// Close the client connection (FIN) without forwarding the request.
    Drop,
    /// Reset the client connection (`SO_LINGER` 0, then close: RST) without forwarding.
    Reset,
    /// Neither forward nor answer: keep reading and discarding what the client sends for this
    /// long or until the client closes, then close.
    Blackhole(Duration),
    /// Forward, read the whole response (so the request was applied), discard it and close the
    /// client connection.
    LostReply,
    /// Do not forward; answer `400` with a DynamoDB `ThrottlingException`, which the AWS SDK
    /// and lease-dynamo classify as throttling and retry. The connection stays open.
    Throttle,
}

impl Fault {
    /// The fault's `<kind>` in `faults.log` (docs/chaos.md).
    pub(crate) fn kind(self) -> &'static str {
        match self {
            Self::Delay(_) => "delay",
            Self::Drop => "drop",
            Self::Reset => "reset",
            Self::Blackhole(_) => "blackhole",
            Self::LostReply => "lost-reply",
            Self::Throttle => "throttle",
        }
    }
}

/// What the proxy has done since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ProxyCounters {
    /// Client connections accepted.
    pub(crate) connections: u64,
    /// Complete requests read from clients.
    pub(crate) requests: u64,
    /// Requests sent upstream in full (pass-through, `delay` and `lost-reply`).
    pub(crate) forwarded: u64,
    /// Requests hit by [`Fault::Delay`].
    pub(crate) delay: u64,
    /// Requests hit by [`Fault::Drop`].
    pub(crate) drop: u64,
    /// Requests hit by [`Fault::Reset`].
    pub(crate) reset: u64,
    /// Requests hit by [`Fault::Blackhole`].
    pub(crate) blackhole: u64,
    /// Requests hit by [`Fault::LostReply`].
    pub(crate) lost_reply: u64,
    /// Requests hit by [`Fault::Throttle`].
    pub(crate) throttle: u64,
    /// Client connections closed because the upstream could not be reached or failed
    /// mid-exchange (closed, reset, or answered something that is not HTTP/1.1).
    pub(crate) upstream_down: u64,
    /// Client connections closed because the client sent something the proxy cannot frame.
    pub(crate) malformed: u64,
    /// Connection threads that panicked (a bug in the proxy).
    pub(crate) panicked: u64,
}

impl ProxyCounters {
    /// How many requests the fault of this `kind` (as [`Fault::kind`]) hit; 0 for other words.
    pub(crate) fn hits(&self, kind: &str) -> u64 {
        match kind {
            "delay" => self.delay,
            "drop" => self.drop,
            "reset" => self.reset,
            "blackhole" => self.blackhole,
            "lost-reply" => self.lost_reply,
            "throttle" => self.throttle,
            _ => 0,
        }
    }

    /// Counts one request hit by `fault`.
    fn hit(&mut self, fault: Fault) {
        let counter = match fault {
            Fault::Delay(_) => &mut self.delay,
            Fault::Drop => &mut self.drop,
            Fault::Reset => &mut self.reset,
            Fault::Blackhole(_) => &mut self.blackhole,
            Fault::LostReply => &mut self.lost_reply,
            Fault::Throttle => &mut self.throttle,
        };
        *counter += 1;
    }
}

/// The fault-injecting proxy: listens on `127.0.0.1:<ephemeral>`, forwards to one upstream.
/// Dropping it stops it.
#[derive(Debug)]
pub(crate) struct Proxy {
    /// Where clients connect.
    addr: SocketAddr,
    /// State shared with the accept loop and the connection threads.
    shared: Arc<Shared>,
    /// The accept loop, until stopped.
    acceptor: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Listens on an ephemeral loopback port and forwards HTTP/1.1 to `upstream` (DynamoDB
    /// Local).
    pub(crate) fn start(upstream: SocketAddr) -> io::Result<Self> {
        Self::start_with(upstream, serve)
    }

    /// Listens on an ephemeral loopback port and forwards PostgreSQL's protocol to `upstream`
    /// (`super::pg_proxy`): the same faults, each hitting one query.
    pub(crate) fn start_postgres(upstream: SocketAddr) -> io::Result<Self> {
        Self::start_with(upstream, super::pg_proxy::serve)
    }

    /// Listens on an ephemeral loopback port and forwards RESP to `upstream` (Redis,
    /// `super::redis_proxy`): the same faults, each hitting one command.
    pub(crate) fn start_redis(upstream: SocketAddr) -> io::Result<Self> {
        Self::start_with(upstream, super::redis_proxy::serve)
    }

    /// Listens on an ephemeral loopback port; each connection is served by `serve`.
    fn start_with(upstream: SocketAddr, serve: fn(TcpStream, &Shared)) -> io::Result<Self> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            upstream,
            stop: AtomicBool::new(false),
            armed: Mutex::new(VecDeque::new()),
            counters: Mutex::new(ProxyCounters::default()),
            workers: Mutex::new(Vec::new()),
            next_request_id: AtomicU64::new(1),
        });
        let acceptor = thread::Builder::new()
            .name("chaos-proxy-accept".into())
            .spawn({
                let shared = Arc::clone(&shared);
                move || accept_loop(&listener, &shared, serve)
            })?;
        Ok(Self {
            addr,
            shared,
            acceptor: Some(acceptor),
        })
    }

    /// Where clients connect.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The endpoint URL to give the AWS SDK: `http://127.0.0.1:PORT`.
    pub(crate) fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queues `fault` for the next `requests` requests, on any connection, after the faults
    /// already queued (first in, first out; each request takes at most one). 0 queues nothing.
    pub(crate) fn arm(&self, fault: Fault, requests: u32) {
        if requests > 0 {
            lock(&self.shared.armed).push_back((fault, requests));
        }
    }

    /// A snapshot of the counters.
    pub(crate) fn counters(&self) -> ProxyCounters {
        *lock(&self.shared.counters)
    }

    /// Stops accepting, closes every connection and waits for every thread of the proxy.
    /// Idempotent; returns within about [`TICK`] (or [`CONNECT_TIMEOUT`] if a connection is
    /// just then connecting to a stopped upstream).
    pub(crate) fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(acceptor) = self.acceptor.take() {
            // Wakes the blocked accept(); if this fails, accept() is failing too and the loop
            // sees the flag anyway.
            let _wake = TcpStream::connect_timeout(&self.addr, CONNECT_TIMEOUT);
            if acceptor.join().is_err() {
                self.shared.count(|c| c.panicked += 1);
            }
        }
        // The accept loop has ended: no worker is added any more.
        let workers = std::mem::take(&mut *lock(&self.shared.workers));
        self.shared.join(workers);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What the accept loop, the connection threads and the [`Proxy`] handle share.
#[derive(Debug)]
pub(super) struct Shared {
    /// Where requests are forwarded.
    pub(super) upstream: SocketAddr,
    /// Set once by [`Proxy::stop`].
    stop: AtomicBool,
    /// Armed faults and how many more requests each is to hit, oldest first.
    armed: Mutex<VecDeque<(Fault, u32)>>,
    /// What the proxy has done.
    counters: Mutex<ProxyCounters>,
    /// Connection threads not yet joined.
    workers: Mutex<Vec<JoinHandle<()>>>,
    /// The next `x-amzn-RequestId` the proxy makes up.
    next_request_id: AtomicU64,
}

impl Shared {
    /// Whether [`Proxy::stop`] was called.
    pub(super) fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// `Err(End::Stopped)` once [`Proxy::stop`] was called.
    fn check_stop(&self) -> Result<(), End> {
        if self.stopping() {
            Err(End::Stopped)
        } else {
            Ok(())
        }
    }

    /// Updates the counters.
    pub(super) fn count(&self, update: impl FnOnce(&mut ProxyCounters)) {
        update(&mut lock(&self.counters));
    }

    /// Takes the fault for the next request, if one is armed, and counts its hit.
    pub(super) fn take_fault(&self) -> Option<Fault> {
        let fault = {
            let mut armed = lock(&self.armed);
            let (fault, left) = armed.front_mut()?;
            let fault = *fault;
            *left -= 1;
            if *left == 0 {
                armed.pop_front();
            }
            fault
        };
        self.count(|c| c.hit(fault));
        Some(fault)
    }

    /// Sleeps for `duration`, waking every [`TICK`] to look at the stop flag.
    fn sleep(&self, duration: Duration) -> Result<(), End> {
        let deadline = Instant::now() + duration;
        loop {
            self.check_stop()?;
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(());
            }
            thread::sleep(left.min(TICK));
        }
    }

    /// Joins connection threads, counting those that panicked.
    fn join(&self, workers: Vec<JoinHandle<()>>) {
        for worker in workers {
            if worker.join().is_err() {
                self.count(|c| c.panicked += 1);
            }
        }
    }
}

/// Locks `mutex`, also after a thread panicked holding it (the data stay consistent: every
/// critical section is a few plain assignments).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Accepts client connections, one thread each (running `serve`), until the proxy stops.
fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>, serve: fn(TcpStream, &Shared)) {
    for incoming in listener.incoming() {
        if shared.stopping() {
            return;
        }
        let Ok(client) = incoming else {
            // Out of file descriptors, say: wait instead of spinning.
            thread::sleep(TICK / 10);
            continue;
        };
        shared.count(|c| c.connections += 1);
        let spawned = thread::Builder::new()
            .name("chaos-proxy-conn".into())
            .spawn({
                let shared = Arc::clone(shared);
                move || serve(client, &shared)
            });
        let finished = {
            let mut workers = lock(&shared.workers);
            if let Ok(worker) = spawned {
                workers.push(worker);
            }
            let (finished, running) = std::mem::take(&mut *workers)
                .into_iter()
                .partition(JoinHandle::is_finished);
            *workers = running;
            finished
        };
        shared.join(finished);
    }
}

/// Why a client connection ends.
#[derive(Debug)]
enum End {
    /// The client closed, the upstream closed an idle connection, or a fault closed it.
    Done,
    /// The proxy is stopping.
    Stopped,
    /// The client sent something the proxy cannot frame.
    Malformed(&'static str),
    /// The upstream could not be reached or failed mid-exchange.
    UpstreamDown,
    /// Reading from or writing to the client failed.
    ClientGone,
}

/// Serves one client connection and counts how it ended.
fn serve(client: TcpStream, shared: &Shared) {
    let Ok(client) = Wire::new(client, Side::Client) else {
        return;
    };
    let mut conn = Conn {
        client,
        upstream: None,
        shared,
    };
    match conn.run() {
        End::Done | End::Stopped | End::ClientGone => {}
        End::Malformed(why) => {
            shared.count(|c| c.malformed += 1);
            // Best effort: the client is about to see the connection close anyway.
            let _ignored = conn.client.send(&bad_request(why), shared);
        }
        End::UpstreamDown => shared.count(|c| c.upstream_down += 1),
    }
}

/// A `400 Bad Request` that closes the connection, saying why in plain text.
fn bad_request(why: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\nchaos proxy: {why}\n",
        why.len() + "chaos proxy: \n".len()
    )
    .into_bytes()
}

/// The answer of [`Fault::Throttle`], shaped like DynamoDB's.
fn throttle_response(request_id: u64) -> Vec<u8> {
    format!(
        "HTTP/1.1 400 Bad Request\r\nContent-Type: application/x-amz-json-1.0\r\n\
         x-amzn-RequestId: CHAOSPROXY{request_id:042}\r\nContent-Length: {}\r\n\r\n{THROTTLE_BODY}",
        THROTTLE_BODY.len()
    )
    .into_bytes()
}

/// One client connection and its upstream connection.
struct Conn<'a> {
    /// The client side.
    client: Wire,
    /// The upstream side, once a request was forwarded.
    upstream: Option<Wire>,
    /// The proxy's shared state.
    shared: &'a Shared,
}

impl Conn<'_> {
    /// Reads, injects into, forwards and answers requests until the connection ends.
    fn run(&mut self) -> End {
        loop {
            let request = match self.read_request() {
                Ok(Some(request)) => request,
                Ok(None) => return End::Done,
                Err(end) => return end,
            };
            self.shared.count(|c| c.requests += 1);
            let fault = self.shared.take_fault();
            if let Err(end) = self.handle(&request, fault) {
                return end;
            }
        }
    }

    /// Reads the next whole request; `None` when the client closed between requests. While
    /// waiting, it watches the upstream connection: once DynamoDB closes it, this one ends too.
    fn read_request(&mut self) -> Result<Option<Message>, End> {
        let shared = self.shared;
        let Self {
            client, upstream, ..
        } = self;
        let mut between_requests = || {
            shared.check_stop()?;
            upstream.as_mut().map_or(Ok(()), Wire::check_idle)
        };
        let Some(head_len) = client.read_head(&mut between_requests)? else {
            return Ok(None);
        };
        let head = Head::parse_request(&client.buf[..head_len]).map_err(End::Malformed)?;
        let body = head.request_body().map_err(End::Malformed)?;
        if head.has_token("expect", "100-continue") && client.buf.len() == head_len {
            // The client waits for this before it sends the body, which the proxy must read
            // before it forwards anything; the upstream's own 100 is dropped.
            client.send(b"HTTP/1.1 100 Continue\r\n\r\n", shared)?;
        }
        let mut mid_request = || shared.check_stop();
        let len = client.read_body(head_len, body, &mut mid_request)?;
        Ok(Some(Message {
            bytes: client.take(len),
            head,
        }))
    }

    /// Handles one request: applies `fault`, forwards, answers. `Err` ends the connection.
    fn handle(&mut self, request: &Message, fault: Option<Fault>) -> Result<(), End> {
        match fault {
            None => self.pass(request),
            Some(Fault::Delay(hold)) => {
                self.shared.sleep(hold)?;
                self.pass(request)
            }
            Some(Fault::Drop) => {
                // Sends FIN now; dropping the sockets then closes both sides.
                let _ignored = self.client.stream.shutdown(Shutdown::Write);
                Err(End::Done)
            }
            Some(Fault::Reset) => {
                let abort = libc::linger {
                    l_onoff: 1,
                    l_linger: 0,
                };
                // If this fails the close below sends FIN instead of RST: still a lost reply.
                let _ignored = setsockopt(&self.client.stream, sockopt::Linger, &abort);
                Err(End::Done)
            }
            Some(Fault::Blackhole(hold)) => {
                self.client.swallow(hold, self.shared)?;
                Err(End::Done)
            }
            Some(Fault::LostReply) => {
                self.exchange(request)?;
                let _ignored = self.client.stream.shutdown(Shutdown::Write);
                Err(End::Done)
            }
            Some(Fault::Throttle) => {
                let id = self.shared.next_request_id.fetch_add(1, Ordering::Relaxed);
                self.client.send(&throttle_response(id), self.shared)?;
                if request.head.wants_close() {
                    return Err(End::Done);
                }
                Ok(())
            }
        }
    }

    /// Forwards the request and relays its response to the client.
    fn pass(&mut self, request: &Message) -> Result<(), End> {
        let (response, upstream_closes) = self.exchange(request)?;
        self.client.send(&response.bytes, self.shared)?;
        if upstream_closes || response.head.wants_close() || request.head.wants_close() {
            return Err(End::Done);
        }
        Ok(())
    }

    /// Forwards the request in one piece and reads its whole final response; also says whether
    /// the upstream connection is over (its body ran until close).
    fn exchange(&mut self, request: &Message) -> Result<(Message, bool), End> {
        let shared = self.shared;
        if self.upstream.is_none() {
            // Opened lazily: a client that is only ever faulted never reaches the upstream.
            let stream = TcpStream::connect_timeout(&shared.upstream, CONNECT_TIMEOUT)
                .map_err(|_| End::UpstreamDown)?;
            self.upstream = Some(Wire::new(stream, Side::Upstream).map_err(|_| End::UpstreamDown)?);
        }
        let upstream = self.upstream.as_mut().ok_or(End::UpstreamDown)?;
        upstream.send(&request.bytes, shared)?;
        shared.count(|c| c.forwarded += 1);
        let head_request = request.head.start.starts_with("HEAD ");
        let mut waiting = || shared.check_stop();
        loop {
            let Some(head_len) = upstream.read_head(&mut waiting)? else {
                return Err(End::UpstreamDown);
            };
            let head =
                Head::parse_response(&upstream.buf[..head_len]).map_err(|_| End::UpstreamDown)?;
            let body = head
                .response_body(head_request)
                .map_err(|_| End::UpstreamDown)?;
            let len = upstream.read_body(head_len, body, &mut waiting)?;
            let bytes = upstream.take(len);
            if head.status / 100 == 1 {
                continue; // an interim response (100 Continue): the final one follows
            }
            if !upstream.buf.is_empty() {
                // Bytes after the response answer no request: never pass them on.
                return Err(End::UpstreamDown);
            }
            let closes = body == Body::UntilClose;
            return Ok((Message { head, bytes }, closes));
        }
    }
}

/// One HTTP/1.1 message as read off the wire: its parsed head and all its bytes, verbatim.
#[derive(Debug)]
struct Message {
    /// The parsed head.
    head: Head,
    /// Head and body exactly as received.
    bytes: Vec<u8>,
}

/// Which end of the proxy a [`Wire`] faces: decides what its failures mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    /// A client of the proxy.
    Client,
    /// DynamoDB Local.
    Upstream,
}

/// A socket with a read buffer, reading in [`TICK`] steps.
#[derive(Debug)]
struct Wire {
    /// The socket, with [`TICK`] read and write timeouts.
    stream: TcpStream,
    /// Bytes read and not yet taken.
    buf: Vec<u8>,
    /// Which end this is.
    side: Side,
}

impl Wire {
    /// Wraps a connected socket: [`TICK`] timeouts, no Nagle delay.
    fn new(stream: TcpStream, side: Side) -> io::Result<Self> {
        stream.set_read_timeout(Some(TICK))?;
        stream.set_write_timeout(Some(TICK))?;
        stream.set_nodelay(true)?;
        Ok(Self {
            stream,
            buf: Vec::new(),
            side,
        })
    }

    /// The end of the connection when this side sent something the proxy cannot frame.
    fn malformed(&self, why: &'static str) -> End {
        match self.side {
            Side::Client => End::Malformed(why),
            Side::Upstream => End::UpstreamDown,
        }
    }

    /// The end of the connection when this side's socket failed or closed mid-message.
    fn lost(&self) -> End {
        match self.side {
            Side::Client => End::ClientGone,
            Side::Upstream => End::UpstreamDown,
        }
    }

    /// Reads more bytes into the buffer; `false` at end of stream. On every read timeout it
    /// calls `idle`, whose error ends the wait.
    fn fill(&mut self, idle: &mut dyn FnMut() -> Result<(), End>) -> Result<bool, End> {
        if self.buf.len() > MAX_MESSAGE {
            return Err(self.malformed("message too large"));
        }
        let mut chunk = [0_u8; 16 * 1024];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => return Ok(false),
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    return Ok(true);
                }
                Err(e) if is_timeout(&e) => idle()?,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Err(self.lost()),
            }
        }
    }

    /// Reads until the buffer holds `len` bytes.
    fn ensure(&mut self, len: usize, idle: &mut dyn FnMut() -> Result<(), End>) -> Result<(), End> {
        while self.buf.len() < len {
            if !self.fill(idle)? {
                return Err(self.lost());
            }
        }
        Ok(())
    }

    /// Reads up to the end of the next head; returns its length, or `None` if the stream
    /// ended before its first byte.
    fn read_head(
        &mut self,
        idle: &mut dyn FnMut() -> Result<(), End>,
    ) -> Result<Option<usize>, End> {
        let mut searched = 0;
        loop {
            if let Some(at) = find(&self.buf[searched..], b"\r\n\r\n") {
                return Ok(Some(searched + at + 4));
            }
            searched = self.buf.len().saturating_sub(3);
            if self.buf.len() > MAX_HEAD {
                return Err(self.malformed("head too long"));
            }
            if !self.fill(idle)? {
                return if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(self.lost())
                };
            }
        }
    }

    /// Reads the body that starts at `at` in the buffer; returns where the message ends.
    fn read_body(
        &mut self,
        at: usize,
        body: Body,
        idle: &mut dyn FnMut() -> Result<(), End>,
    ) -> Result<usize, End> {
        match body {
            Body::Length(len) => {
                self.ensure(at + len, idle)?;
                Ok(at + len)
            }
            Body::Chunked => self.read_chunks(at, idle),
            Body::UntilClose => {
                while self.fill(idle)? {}
                Ok(self.buf.len())
            }
        }
    }

    /// Reads a chunked body that starts at `at`, trailers included; returns where it ends.
    fn read_chunks(
        &mut self,
        mut at: usize,
        idle: &mut dyn FnMut() -> Result<(), End>,
    ) -> Result<usize, End> {
        loop {
            let line_end = self.read_line(at, idle)?;
            let size = chunk_size(&self.buf[at..line_end - 2])
                .ok_or_else(|| self.malformed("bad chunk size"))?;
            at = line_end;
            if size == 0 {
                // Trailer fields, up to an empty line.
                loop {
                    let end = self.read_line(at, idle)?;
                    let empty = end == at + 2;
                    at = end;
                    if empty {
                        return Ok(at);
                    }
                }
            }
            self.ensure(at + size + 2, idle)?;
            if &self.buf[at + size..at + size + 2] != b"\r\n" {
                return Err(self.malformed("chunk not followed by CRLF"));
            }
            at += size + 2;
        }
    }

    /// Reads up to the end of the line that starts at `at`; returns where it ends (after CRLF).
    fn read_line(
        &mut self,
        at: usize,
        idle: &mut dyn FnMut() -> Result<(), End>,
    ) -> Result<usize, End> {
        let mut searched = at;
        loop {
            if let Some(end) = find(&self.buf[searched..], b"\r\n") {
                return Ok(searched + end + 2);
            }
            searched = self.buf.len().saturating_sub(1).max(at);
            if self.buf.len() - at > MAX_LINE {
                return Err(self.malformed("chunk line too long"));
            }
            if !self.fill(idle)? {
                return Err(self.lost());
            }
        }
    }

    /// Takes the first `len` bytes of the buffer.
    fn take(&mut self, len: usize) -> Vec<u8> {
        let rest = self.buf.split_off(len);
        std::mem::replace(&mut self.buf, rest)
    }

    /// Writes all of `bytes`, looking at the stop flag at every write timeout.
    fn send(&mut self, mut bytes: &[u8], shared: &Shared) -> Result<(), End> {
        while !bytes.is_empty() {
            match self.stream.write(bytes) {
                Ok(0) => return Err(self.lost()),
                Ok(n) => bytes = &bytes[n..],
                Err(e) if is_timeout(&e) => shared.check_stop()?,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Err(self.lost()),
            }
        }
        Ok(())
    }

    /// Between requests: ends the client connection if the upstream closed its connection
    /// (as DynamoDB does to idle ones) or sent bytes no request asked for.
    fn check_idle(&mut self) -> Result<(), End> {
        let mut byte = [0_u8; 1];
        let peeked = self
            .stream
            .set_nonblocking(true)
            .and_then(|()| self.stream.peek(&mut byte));
        let restored = self.stream.set_nonblocking(false);
        match (peeked, restored) {
            (Err(e), Ok(())) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
            (Ok(0), Ok(())) => Err(End::Done),
            _ => Err(End::UpstreamDown),
        }
    }

    /// [`Fault::Blackhole`]: reads and discards for `hold`, or until the client closes.
    fn swallow(&mut self, hold: Duration, shared: &Shared) -> Result<(), End> {
        self.buf.clear();
        let deadline = Instant::now() + hold;
        let mut sink = [0_u8; 16 * 1024];
        loop {
            shared.check_stop()?;
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(());
            }
            let wait = left.clamp(Duration::from_millis(1), TICK);
            if self.stream.set_read_timeout(Some(wait)).is_err() {
                return Ok(());
            }
            match self.stream.read(&mut sink) {
                Ok(0) => return Ok(()),
                Ok(_) => {}
                Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Ok(()),
            }
        }
    }
}

/// Whether an I/O error is a socket timeout.
fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// Where `needle` first occurs in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The size on a chunk-size line (hex digits, then optional `;extensions`), if it is one and
/// at most [`MAX_MESSAGE`].
fn chunk_size(line: &[u8]) -> Option<usize> {
    let line = std::str::from_utf8(line).ok()?;
    let digits = line.split(';').next()?.trim_matches([' ', '\t']);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let size = usize::from_str_radix(digits, 16).ok()?;
    (size <= MAX_MESSAGE).then_some(size)
}

/// How a message's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    /// Exactly this many bytes (0: no body).
    Length(usize),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Until the sender closes the connection (responses only).
    UntilClose,
}

/// A parsed request or response head.
#[derive(Debug)]
struct Head {
    /// The request line or status line.
    start: String,
    /// The status code (responses; 0 for requests).
    status: u16,
    /// Header fields: lowercase name, value without surrounding blanks.
    fields: Vec<(String, String)>,
}

impl Head {
    /// Parses a head (up to and including its empty line) into start line and fields.
    fn parse(bytes: &[u8]) -> Result<Self, &'static str> {
        let text = std::str::from_utf8(bytes).map_err(|_| "head is not UTF-8")?;
        let text = text.strip_suffix("\r\n\r\n").ok_or("head without an end")?;
        if text.split("\r\n").any(|line| line.contains(['\r', '\n'])) {
            return Err("bare CR or LF in head");
        }
        let mut lines = text.split("\r\n");
        let start = lines.next().unwrap_or_default();
        let mut fields = Vec::new();
        for line in lines {
            if line.starts_with([' ', '\t']) {
                return Err("folded header line");
            }
            let (name, value) = line.split_once(':').ok_or("header line without a colon")?;
            if name.is_empty() || !name.bytes().all(is_token_byte) {
                return Err("bad header name");
            }
            fields.push((
                name.to_ascii_lowercase(),
                value.trim_matches([' ', '\t']).into(),
            ));
        }
        Ok(Self {
            start: start.to_owned(),
            status: 0,
            fields,
        })
    }

    /// Parses a request head: `METHOD SP target SP HTTP/1.x`, then fields.
    fn parse_request(bytes: &[u8]) -> Result<Self, &'static str> {
        let head = Self::parse(bytes)?;
        let parts: Vec<&str> = head.start.split(' ').collect();
        let [method, target, version] = parts.as_slice() else {
            return Err("bad request line");
        };
        if method.is_empty() || !method.bytes().all(is_token_byte) || target.is_empty() {
            return Err("bad request line");
        }
        if !matches!(*version, "HTTP/1.1" | "HTTP/1.0") {
            return Err("not HTTP/1.x");
        }
        Ok(head)
    }

    /// Parses a response head: `HTTP/1.x SP status SP reason`, then fields.
    fn parse_response(bytes: &[u8]) -> Result<Self, &'static str> {
        let mut head = Self::parse(bytes)?;
        let mut parts = head.start.splitn(3, ' ');
        let version = parts.next().unwrap_or_default();
        let status = parts.next().unwrap_or_default();
        if !matches!(version, "HTTP/1.1" | "HTTP/1.0")
            || status.len() != 3
            || !status.bytes().all(|b| b.is_ascii_digit())
        {
            return Err("bad status line");
        }
        head.status = status.parse().map_err(|_| "bad status line")?;
        if head.status == 101 {
            return Err("protocol switch");
        }
        Ok(head)
    }

    /// The values of every field called `name` (lowercase), split at commas.
    fn list(&self, name: &str) -> impl Iterator<Item = &str> {
        self.fields
            .iter()
            .filter(move |(field, _)| field == name)
            .flat_map(|(_, value)| value.split(','))
            .map(|item| item.trim_matches([' ', '\t']))
            .filter(|item| !item.is_empty())
    }

    /// Whether the list field `name` holds `token` (case-insensitive).
    fn has_token(&self, name: &str, token: &str) -> bool {
        self.list(name).any(|item| item.eq_ignore_ascii_case(token))
    }

    /// Whether the connection ends after this message: `Connection: close`, or HTTP/1.0
    /// without `Connection: keep-alive`.
    fn wants_close(&self) -> bool {
        let http10 = self.start.starts_with("HTTP/1.0") || self.start.ends_with("HTTP/1.0");
        self.has_token("connection", "close")
            || (http10 && !self.has_token("connection", "keep-alive"))
    }

    /// The `Content-Length`, if any: every value (repeats are allowed if equal) must agree.
    fn content_length(&self) -> Result<Option<usize>, &'static str> {
        let mut length = None;
        for value in self.list("content-length") {
            if value.len() > 12 || !value.bytes().all(|b| b.is_ascii_digit()) {
                return Err("bad Content-Length");
            }
            let value: usize = value.parse().map_err(|_| "bad Content-Length")?;
            if length.is_some_and(|known| known != value) {
                return Err("conflicting Content-Length values");
            }
            length = Some(value);
        }
        match length {
            Some(len) if len > MAX_MESSAGE => Err("body too large"),
            _ => Ok(length),
        }
    }

    /// How this request's body is delimited. Chunked is the only transfer coding accepted.
    fn request_body(&self) -> Result<Body, &'static str> {
        let codings: Vec<&str> = self.list("transfer-encoding").collect();
        let length = self.content_length()?;
        match codings.as_slice() {
            [] => Ok(Body::Length(length.unwrap_or(0))),
            _ if length.is_some() => Err("both Transfer-Encoding and Content-Length"),
            [only] if only.eq_ignore_ascii_case("chunked") => Ok(Body::Chunked),
            _ => Err("unsupported Transfer-Encoding: only chunked is accepted"),
        }
    }

    /// How this response's body is delimited (RFC 9112 §6.3), given whether it answers HEAD.
    fn response_body(&self, answers_head: bool) -> Result<Body, &'static str> {
        if answers_head || self.status / 100 == 1 || matches!(self.status, 204 | 304) {
            return Ok(Body::Length(0));
        }
        let last_coding = self.list("transfer-encoding").last();
        match last_coding {
            Some(coding) if coding.eq_ignore_ascii_case("chunked") => Ok(Body::Chunked),
            Some(_) => Ok(Body::UntilClose),
            None => Ok(self
                .content_length()?
                .map_or(Body::UntilClose, Body::Length)),
        }
    }
}

/// Whether `b` may appear in a method or header name (RFC 9110 `tchar`).
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// How long a test client waits for bytes before the test fails: bounds every test.
    const CLIENT_TIMEOUT: Duration = Duration::from_secs(3);

    /// One HTTP/1.1 message as the tests read it: head text and decoded body.
    #[derive(Debug)]
    struct Msg {
        head: String,
        body: Vec<u8>,
    }

    impl Msg {
        fn status(&self) -> u16 {
            self.head.split(' ').nth(1).unwrap().parse().unwrap()
        }

        fn header(&self, name: &str) -> Option<&str> {
            self.head.split("\r\n").skip(1).find_map(|line| {
                let (field, value) = line.split_once(':')?;
                field.eq_ignore_ascii_case(name).then_some(value.trim())
            })
        }

        fn text(&self) -> String {
            String::from_utf8(self.body.clone()).unwrap()
        }
    }

    /// Reads more bytes into `buf`; `false` at end of stream.
    fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> io::Result<bool> {
        let mut chunk = [0_u8; 4096];
        let n = stream.read(&mut chunk)?;
        buf.extend_from_slice(&chunk[..n]);
        Ok(n > 0)
    }

    /// Reads until `buf` holds `len` bytes.
    fn read_to(stream: &mut TcpStream, buf: &mut Vec<u8>, len: usize) -> io::Result<()> {
        while buf.len() < len {
            if !read_more(stream, buf)? {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
        Ok(())
    }

    /// Takes a CRLF-terminated line off the front of `buf`, without the CRLF.
    fn read_crlf_line(stream: &mut TcpStream, buf: &mut Vec<u8>) -> io::Result<String> {
        loop {
            if let Some(at) = buf.windows(2).position(|w| w == b"\r\n") {
                let line: Vec<u8> = buf.drain(..at + 2).take(at).collect();
                return Ok(String::from_utf8(line).unwrap());
            }
            if !read_more(stream, buf)? {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
    }

    /// The tests' own HTTP/1.1 reader, independent of the proxy's: a head, then a
    /// Content-Length, chunked or until-close body. `None` at a clean end.
    fn read_msg(stream: &mut TcpStream, buf: &mut Vec<u8>) -> io::Result<Option<Msg>> {
        let head_end = loop {
            if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            if !read_more(stream, buf)? {
                return if buf.is_empty() {
                    Ok(None)
                } else {
                    Err(io::ErrorKind::UnexpectedEof.into())
                };
            }
        };
        let head = String::from_utf8(buf.drain(..head_end).collect()).unwrap();
        let mut msg = Msg { head, body: vec![] };
        if msg.header("transfer-encoding") == Some("chunked") {
            loop {
                let line = read_crlf_line(stream, buf)?;
                let size = usize::from_str_radix(line.split(';').next().unwrap(), 16).unwrap();
                if size == 0 {
                    while !read_crlf_line(stream, buf)?.is_empty() {} // trailers
                    return Ok(Some(msg));
                }
                read_to(stream, buf, size + 2)?;
                msg.body.extend(buf.drain(..size));
                buf.drain(..2);
            }
        }
        if let Some(len) = msg.header("content-length") {
            let len = len.parse().unwrap();
            read_to(stream, buf, len)?;
            msg.body = buf.drain(..len).collect();
        } else if msg.head.starts_with("HTTP/") {
            while read_more(stream, buf)? {}
            msg.body = std::mem::take(buf);
        }
        Ok(Some(msg))
    }

    /// How the test upstream answers.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Answer {
        /// A Content-Length body, keep-alive.
        Length,
        /// A chunked body in two chunks, keep-alive.
        Chunked,
        /// `Connection: close` and a body that runs until close.
        UntilClose,
        /// A Content-Length body, then it closes the connection without saying so.
        LengthThenClose,
    }

    /// A tiny HTTP/1.1 upstream: answers each request with `reply to <request line>: <body>`
    /// and counts the requests and connections it received.
    struct Upstream {
        addr: SocketAddr,
        requests: Arc<AtomicUsize>,
        connections: Arc<AtomicUsize>,
        stop: Arc<AtomicBool>,
        acceptor: Option<JoinHandle<()>>,
    }

    impl Upstream {
        fn start(answer: Answer) -> Self {
            let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
            listener.set_nonblocking(true).unwrap();
            let addr = listener.local_addr().unwrap();
            let requests = Arc::new(AtomicUsize::new(0));
            let connections = Arc::new(AtomicUsize::new(0));
            let stop = Arc::new(AtomicBool::new(false));
            let acceptor = thread::spawn({
                let (requests, connections, stop) =
                    (requests.clone(), connections.clone(), stop.clone());
                move || {
                    while !stop.load(Ordering::SeqCst) {
                        let Ok((stream, _)) = listener.accept() else {
                            thread::sleep(Duration::from_millis(5));
                            continue;
                        };
                        connections.fetch_add(1, Ordering::SeqCst);
                        let requests = requests.clone();
                        thread::spawn(move || upstream_conn(stream, answer, &requests));
                    }
                }
            });
            Self {
                addr,
                requests,
                connections,
                stop,
                acceptor: Some(acceptor),
            }
        }

        fn requests(&self) -> usize {
            self.requests.load(Ordering::SeqCst)
        }

        fn connections(&self) -> usize {
            self.connections.load(Ordering::SeqCst)
        }
    }

    impl Drop for Upstream {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::SeqCst);
            if let Some(acceptor) = self.acceptor.take() {
                acceptor.join().unwrap();
            }
        }
    }

    /// Serves one upstream connection until the peer closes (or 5 s of silence).
    fn upstream_conn(mut stream: TcpStream, answer: Answer, requests: &AtomicUsize) {
        stream.set_nonblocking(false).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut buf = Vec::new();
        while let Ok(Some(request)) = read_msg(&mut stream, &mut buf) {
            requests.fetch_add(1, Ordering::SeqCst);
            let line = request
                .head
                .lines()
                .next()
                .unwrap()
                .trim_end_matches(" HTTP/1.1");
            let reply = format!("reply to {line}: {}", request.text());
            let response = match answer {
                Answer::Length | Answer::LengthThenClose => format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{reply}",
                    reply.len()
                ),
                Answer::Chunked => {
                    let (a, b) = reply.split_at(reply.len() / 2);
                    format!(
                        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
                         {:x};x=y\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\nTrailer: t\r\n\r\n",
                        a.len(),
                        b.len()
                    )
                }
                Answer::UntilClose => {
                    format!("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n{reply}")
                }
            };
            if stream.write_all(response.as_bytes()).is_err()
                || answer != Answer::Length && answer != Answer::Chunked
            {
                return;
            }
        }
    }

    /// A keep-alive HTTP/1.1 client of the proxy.
    struct Client {
        stream: TcpStream,
        buf: Vec<u8>,
    }

    impl Client {
        fn connect(proxy: &Proxy) -> Self {
            let stream = TcpStream::connect(proxy.addr()).unwrap();
            stream.set_read_timeout(Some(CLIENT_TIMEOUT)).unwrap();
            Self {
                stream,
                buf: Vec::new(),
            }
        }

        fn send_raw(&mut self, bytes: &[u8]) {
            self.stream.write_all(bytes).unwrap();
        }

        fn send(&mut self, path: &str, body: &str) {
            let request = format!(
                "POST {path} HTTP/1.1\r\nHost: dynamodb\r\nContent-Type: \
                 application/x-amz-json-1.0\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            self.send_raw(request.as_bytes());
        }

        fn recv(&mut self) -> io::Result<Option<Msg>> {
            read_msg(&mut self.stream, &mut self.buf)
        }

        fn call(&mut self, path: &str, body: &str) -> Msg {
            self.send(path, body);
            self.recv().unwrap().expect("a response")
        }
    }

    /// Waits (at most 2 s) until `ready` holds for the proxy's counters.
    fn wait_for(proxy: &Proxy, ready: impl Fn(&ProxyCounters) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(2);
        while !ready(&proxy.counters()) {
            assert!(Instant::now() < deadline, "{:?}", proxy.counters());
            thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn fault_kinds_are_the_words_of_docs_chaos_md() {
        let docs = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/chaos.md"));
        let hold = Duration::from_millis(1);
        let faults = [
            Fault::Delay(hold),
            Fault::Drop,
            Fault::Reset,
            Fault::Blackhole(hold),
            Fault::LostReply,
            Fault::Throttle,
        ];
        let mut counters = ProxyCounters::default();
        for fault in faults {
            assert!(docs.contains(&format!("`{}`", fault.kind())), "{fault:?}");
            counters.hit(fault);
            assert_eq!(counters.hits(fault.kind()), 1);
        }
        assert_eq!(counters.hits("sigkill"), 0);
    }

    #[test]
    fn passes_requests_through_one_keep_alive_connection() {
        let upstream = Upstream::start(Answer::Length);
        let proxy = Proxy::start(upstream.addr).unwrap();
        assert_eq!(
            proxy.endpoint(),
            format!("http://127.0.0.1:{}", proxy.addr().port())
        );
        let mut client = Client::connect(&proxy);
        for n in 0..5 {
            let response = client.call(&format!("/{n}"), &format!("{{\"n\":{n}}}"));
            assert_eq!(response.status(), 200);
            assert_eq!(
                response.text(),
                format!("reply to POST /{n}: {{\"n\":{n}}}")
            );
        }
        assert_eq!((upstream.requests(), upstream.connections()), (5, 1));
        let counters = proxy.counters();
        assert_eq!(
            (counters.connections, counters.requests, counters.forwarded),
            (1, 5, 5)
        );
    }

    #[test]
    fn relays_chunked_bodies_both_ways() {
        let upstream = Upstream::start(Answer::Chunked);
        let proxy = Proxy::start(upstream.addr).unwrap();
        let mut client = Client::connect(&proxy);
        client.send_raw(
            b"POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n\
              3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\nTrailer: t\r\n\r\n",
        );
        let response = client.recv().unwrap().unwrap();
        assert_eq!(response.text(), "reply to POST /c: abcde");
        for n in 0..3 {
            let response = client.call(&format!("/{n}"), "{}");
            assert_eq!(response.text(), format!("reply to POST /{n}: {{}}"));
        }
        assert_eq!((upstream.requests(), upstream.connections()), (4, 1));
    }

    #[test]
    fn a_body_until_close_is_relayed_then_the_client_connection_closes() {
        let upstream = Upstream::start(Answer::UntilClose);
        let proxy = Proxy::start(upstream.addr).unwrap();
        let mut client = Client::connect(&proxy);
        assert_eq!(client.call("/u", "{}").text(), "reply to POST /u: {}");
        assert!(client.recv().unwrap().is_none());
    }

    #[test]
    fn upstream_closing_an_idle_connection_closes_the_client_connection() {
        let upstream = Upstream::start(Answer::LengthThenClose);
        let proxy = Proxy::start(upstream.addr).unwrap();
        let mut client = Client::connect(&proxy);
        assert_eq!(client.call("/i", "{}").status(), 200);
        assert!(client.recv().unwrap().is_none());
        assert_eq!(proxy.counters().upstream_down, 0);
    }

    #[test]
    fn delay_holds_the_request_for_its_duration() {
        let upstream = Upstream::start(Answer::Length);
        let proxy = Proxy::start(upstream.addr).unwrap();
        let mut client = Client::connect(&proxy);
        proxy.arm(Fault::Delay(Duration::from_millis(300)), 1);
        let sent = Instant::now();
        assert_eq!(client.call("/d", "{}").text(), "reply to POST /d: {}");
        assert!(sent.elapsed() >= Duration::from_millis(300));
        assert_eq!(client.call("/e", "{}").status(), 200);
        let counters = proxy.counters();
        assert_eq!((counters.delay, counters.forwarded), (1, 2));
    }

    #[test]
    fn drop_closes_the_connection_without_forwarding() {
        let upstream = Upstream::start(Answer::Length);
        let proxy = Proxy::start(upstream.addr).unwrap();
        proxy.arm(Fault::Drop, 1);
        let mut client = Client::connect(&proxy);
        client.send("/x", "{}");
        assert!(client.recv().unwrap().is_none(), "EOF, no response");
        assert_eq!(upstream.requests(), 0);
        assert_eq!(Client::connect(&proxy).call("/y", "{}").status(), 200);
        let counters = proxy.counters();
        assert_eq!((counters.drop, counters.forwarded), (1, 1));
    }

    #[test]
    fn reset_gives_the_client_connection_reset() {
        let upstream = Upstream::start(Answer::Length);
        let proxy = Proxy::start(upstream.addr).unwrap();
        proxy.arm(Fault::Reset, 1);
        let mut client = Client::connect(&proxy);
        client.send("/x", "{}");
        let err = client.recv().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionReset);
        assert_eq!((upstream.requests(), proxy.counters().reset), (0, 1));
    }

    #[test]
    fn blackhole_neither_forwards_nor_answers() {
        let upstream = Upstream::start(Answer::Length);
        let proxy = Proxy::start(upstream.addr).unwrap();
        proxy.arm(Fault::Blackhole(Duration::from_secs(5)), 1);
        proxy.arm(Fault::Blackhole(Duration::from_millis(300)), 1);
        let mut client = Client::connect(&proxy);
        client
            .stream
            .set_read_timeout(Some(Duration::from_millis(400)))
            .unwrap();
        client.send("/x", "{}");
        let err = client.recv().unwrap_err();
        assert!(is_timeout(&err), "{err:?}");
        client.send("/retry", "{}"); // swallowed as well
        drop(client);
        // The second one holds 300 ms, then closes without a byte.
        let mut client = Client::connect(&proxy);
        let sent = Instant::now();
        client.send("/y", "{}");
        assert!(client.recv().unwrap().is_none());
        assert!(sent.elapsed() >= Duration::from_millis(300));
        assert_eq!((upstream.requests(), proxy.counters().blackhole), (0, 2));
    }

    #[test]
    fn lost_reply_applies_the_request_once_and_closes_without_answering() {
        let upstream = Upstream::start(Answer::Length);
        let proxy = Proxy::start(upstream.addr).unwrap();
        proxy.arm(Fault::LostReply, 1);
        let mut client = Client::connect(&proxy);
        client.send("/x", "{}");
        assert!(client.recv().unwrap().is_none(), "EOF, no response byte");
        assert_eq!(upstream.requests(), 1);
        let counters = proxy.counters();
        assert_eq!((counters.lost_reply, counters.forwarded), (1, 1));
    }

    #[test]
    fn throttle_answers_a_throttling_exception_without_forwarding() {
        let upstream = Upstream::start(Answer::Length);
        let proxy = Proxy::start(upstream.addr).unwrap();
        proxy.arm(Fault::Throttle, 1);
        let mut client = Client::connect(&proxy);
        let response = client.call("/x", "{}");
        assert_eq!(response.status(), 400);
        assert_eq!(
            response.header("content-type"),
            Some("application/x-amz-json-1.0")
        );
        assert_eq!(response.header("x-amzn-requestid").map(str::len), Some(52));
        assert_eq!(
            response.header("content-length"),
            Some(response.body.len().to_string().as_str())
        );
        assert_eq!(
            response.text(),
            "{\"__type\":\"com.amazonaws.dynamodb.v20120810#ThrottlingException\",\
             \"message\":\"Rate of requests exceeds the allowed throughput.\"}"
        );
        assert_eq!(upstream.requests(), 0);
        // The connection stays usable, as after a real throttle.
        assert_eq!(client.call("/y", "{}").status(), 200);
        assert_eq!((upstream.requests(), upstream.connections()), (1, 1));
    }

    #[test]
    fn upstream_down_closes_the_client_connection() {
        let gone = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let addr = gone.local_addr().unwrap();
        drop(gone);
        let proxy = Proxy::start(addr).unwrap();
        let mut client = Client::connect(&proxy);
        client.send("/x", "{}");
        assert!(client.recv().unwrap().is_none());
        wait_for(&proxy, |c| c.upstream_down == 1);
        assert_eq!(proxy.counters().forwarded, 0);
    }

    #[test]
    fn armed_faults_apply_in_order_exactly_their_count_on_any_connection() {
        let upstream = Upstream::start(Answer::Length);
        let proxy = Proxy::start(upstream.addr).unwrap();
        proxy.arm(Fault::Throttle, 2);
        proxy.arm(Fault::Drop, 0); // nothing
        proxy.arm(Fault::Delay(Duration::from_millis(200)), 1);
        let (mut a, mut b) = (Client::connect(&proxy), Client::connect(&proxy));
        assert_eq!(a.call("/1", "{}").status(), 400);
        assert_eq!(b.call("/2", "{}").status(), 400);
        let sent = Instant::now();
        assert_eq!(a.call("/3", "{}").status(), 200);
        assert!(sent.elapsed() >= Duration::from_millis(200));
        for n in 4..7 {
            assert_eq!(b.call(&format!("/{n}"), "{}").status(), 200);
        }
        let counters = proxy.counters();
        assert_eq!(
            (counters.throttle, counters.delay, counters.drop),
            (2, 1, 0)
        );
        assert_eq!((counters.requests, counters.forwarded), (6, 4));
        assert_eq!(upstream.requests(), 4);
    }

    #[test]
    fn stop_returns_promptly_with_connections_open() {
        let upstream = Upstream::start(Answer::Length);
        let mut proxy = Proxy::start(upstream.addr).unwrap();
        let mut idle = Client::connect(&proxy);
        assert_eq!(idle.call("/x", "{}").status(), 200);
        let mut half = Client::connect(&proxy);
        half.send_raw(b"POST / HTTP/1.1\r\nContent-Le");
        proxy.arm(Fault::Blackhole(Duration::from_secs(30)), 1);
        let mut holed = Client::connect(&proxy);
        holed.send("/b", "{}");
        wait_for(&proxy, |c| c.blackhole == 1);
        proxy.arm(Fault::Delay(Duration::from_secs(30)), 1);
        let mut held = Client::connect(&proxy);
        held.send("/d", "{}");
        wait_for(&proxy, |c| c.delay == 1);
        let stopping = Instant::now();
        proxy.stop();
        assert!(
            stopping.elapsed() < Duration::from_secs(1),
            "{:?}",
            stopping.elapsed()
        );
        for client in [&mut idle, &mut half, &mut holed, &mut held] {
            match client.recv() {
                Ok(None) => {}
                Err(e) => assert_eq!(e.kind(), io::ErrorKind::ConnectionReset),
                Ok(Some(msg)) => panic!("unexpected {msg:?}"),
            }
        }
        assert!(
            TcpStream::connect(proxy.addr()).is_err(),
            "no longer listening"
        );
        assert_eq!(proxy.counters().panicked, 0);
        proxy.stop(); // idempotent
    }

    /// Requests the proxy cannot frame: each one gets a `400` and a closed connection.
    const GARBAGE: &[&[u8]] = &[
        b"GARBAGE\r\n\r\n",
        b"GET / HTTP/2.0\r\n\r\n",
        b"GET  / HTTP/1.1\r\n\r\n",
        b"\xff\xfe / HTTP/1.1\r\n\r\n",
        b"POST / HTTP/1.1\rX: y\r\n\r\n",
        b"POST / HTTP/1.1\r\nBad Header: x\r\n\r\n",
        b"POST / HTTP/1.1\r\nNo colon\r\n\r\n",
        b"POST / HTTP/1.1\r\nA: b\r\n folded\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: 999999999\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nffffffffff\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXY",
    ];

    #[test]
    fn garbage_is_refused_with_400_and_counted() {
        let upstream = Upstream::start(Answer::Length);
        let proxy = Proxy::start(upstream.addr).unwrap();
        for garbage in GARBAGE {
            let mut client = Client::connect(&proxy);
            client.send_raw(garbage);
            let response = client.recv().unwrap().expect("a 400");
            assert_eq!(
                response.status(),
                400,
                "{}",
                String::from_utf8_lossy(garbage)
            );
            assert!(response.text().starts_with("chaos proxy: "));
            assert!(client.recv().unwrap().is_none());
        }
        // A head that never ends: refused once it is too long (400 or reset, as the client
        // may still be writing when the proxy closes).
        let mut client = Client::connect(&proxy);
        let endless = vec![b'a'; MAX_HEAD + 4096];
        let _ignored = client.stream.write_all(&endless);
        if let Ok(Some(response)) = client.recv() {
            assert_eq!(response.status(), 400);
        }
        wait_for(&proxy, |c| c.malformed == GARBAGE.len() as u64 + 1);
        assert_eq!(Client::connect(&proxy).call("/ok", "{}").status(), 200);
        assert_eq!(upstream.requests(), 1);
    }

    #[test]
    fn random_bytes_never_panic_or_hang_the_proxy() {
        let upstream = Upstream::start(Answer::Length);
        let mut proxy = Proxy::start(upstream.addr).unwrap();
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let pieces: [&[u8]; 8] = [
            b"POST / HTTP/1.1\r\n",
            b"Content-Length: 3\r\n",
            b"Transfer-Encoding: chunked\r\n",
            b"\r\n",
            b"\r\n\r\n",
            b"3\r\nabc\r\n",
            b"0\r\n\r\n",
            b":;\t \r\xff",
        ];
        for _ in 0..40 {
            let mut input = Vec::new();
            for _ in 0..next() % 12 {
                input.extend_from_slice(pieces[(next() % 8) as usize]);
            }
            let mut client = Client::connect(&proxy);
            client.send_raw(&input);
            client.stream.shutdown(Shutdown::Write).unwrap();
            let mut sink = Vec::new();
            match client.stream.read_to_end(&mut sink) {
                Ok(_) => {}
                Err(e) => assert_eq!(e.kind(), io::ErrorKind::ConnectionReset, "{input:?}"),
            }
        }
        assert_eq!(Client::connect(&proxy).call("/ok", "{}").status(), 200);
        proxy.stop();
        assert_eq!(proxy.counters().panicked, 0);
    }

    #[test]
    fn chunk_sizes_are_hex_and_bounded() {
        assert_eq!(chunk_size(b"1f"), Some(31));
        assert_eq!(chunk_size(b"A;name=value"), Some(10));
        assert_eq!(chunk_size(b"0"), Some(0));
        for bad in [&b""[..], b"g", b"-1", b"+1", b"1 2", b"ffffffff", b"\xff"] {
            assert_eq!(chunk_size(bad), None, "{bad:?}");
        }
    }
}
