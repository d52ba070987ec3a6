//! The chaos proxy's Redis side: RESP requests framed, so that a [`Fault`] hits one command.
//!
//! A request is one command as a client sends it: an array of bulk strings (`*N\r\n` then N
//! times `$LEN\r\n<bytes>\r\n`), or an inline command up to its newline. It is forwarded whole
//! or hit by the next armed fault, through the PostgreSQL proxy's connection handling
//! (`super::pg_proxy::serve_with`): delay, drop, reset, blackhole and lost-reply act the same.
//! Replies are not framed: the server's bytes are relayed as they come, and a
//! [`Fault::LostReply`] forwards its command and then closes the connection before any byte
//! read from the server after it is relayed (so the command runs, its reply never arrives, and
//! replies still owed for commands pipelined before it are lost too, as they would be when a
//! connection breaks). [`Fault::Throttle`] (a DynamoDB answer) is not armed here; it passes the
//! request on untouched. The proxy itself is [`super::proxy::Proxy::start_redis`].

use std::io::{self, Read as _};
use std::net::TcpStream;
use std::sync::atomic::Ordering;

use super::pg_proxy::{Conn, Ending, inject, send};
#[cfg(doc)]
use super::proxy::Fault;
use super::proxy::Shared;

/// The largest request accepted (the leases' scripts and arguments are a few kilobytes).
const MAX_REQUEST: usize = 64 * 1024 * 1024;
/// The longest header line (`*N` or `$LEN`) or inline command accepted.
const MAX_LINE: usize = 64 * 1024;

/// Serves one client connection (the accept loop of [`super::proxy::Proxy`] runs it on a
/// thread of its own).
pub(super) fn serve(client: TcpStream, shared: &Shared) {
    super::pg_proxy::serve_with(client, shared, forward_requests, relay_replies);
}

/// The client's side: every whole command in what has arrived is forwarded or hit by the next
/// armed fault; then more is read.
fn forward_requests(conn: &Conn, shared: &Shared) -> Result<(), Ending> {
    let mut pending: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        while let Some(len) = request_len(&pending).map_err(|_| Ending::Malformed)? {
            shared.count(|c| c.requests += 1);
            let fault = shared.take_fault();
            inject(conn, shared, &pending[..len], fault)?;
            pending.drain(..len);
        }
        if conn.over(shared) {
            return Err(Ending::Closed);
        }
        match (&conn.client).read(&mut chunk) {
            Ok(0) => return Err(Ending::Closed),
            Ok(n) => pending.extend_from_slice(&chunk[..n]),
            Err(e) if is_tick(&e) => {}
            Err(_) => return Err(Ending::Closed),
        }
    }
}

fn is_tick(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// The length of the first whole command in `buf`: `Ok(None)` while it is incomplete, `Err`
/// for bytes that are no command.
fn request_len(buf: &[u8]) -> Result<Option<usize>, &'static str> {
    let Some(&first) = buf.first() else {
        return Ok(None);
    };
    if first != b'*' {
        // An inline command: up to its newline.
        return match buf.iter().position(|&b| b == b'\n') {
            Some(end) => Ok(Some(end + 1)),
            None if buf.len() > MAX_LINE => Err("inline command too long"),
            None => Ok(None),
        };
    }
    let Some((count, mut at)) = header(buf, 0, b'*')? else {
        return Ok(None);
    };
    for _ in 0..count {
        let Some((len, body)) = header(buf, at, b'$')? else {
            return Ok(None);
        };
        at = body + len + 2;
        if at > MAX_REQUEST {
            return Err("request too large");
        }
        if buf.len() < at {
            return Ok(None);
        }
        if &buf[at - 2..at] != b"\r\n" {
            return Err("bulk string without its CRLF");
        }
    }
    Ok(Some(at))
}

/// The number of a `<kind><digits>\r\n` line at `at`, and where the line ends: `Ok(None)`
/// while the line is incomplete.
fn header(buf: &[u8], at: usize, kind: u8) -> Result<Option<(usize, usize)>, &'static str> {
    let rest = &buf[at.min(buf.len())..];
    let Some(&first) = rest.first() else {
        return Ok(None);
    };
    if first != kind {
        return Err("unexpected type in a request");
    }
    let Some(end) = rest.windows(2).position(|w| w == b"\r\n") else {
        return if rest.len() > 32 {
            Err("header line too long")
        } else {
            Ok(None)
        };
    };
    let number = std::str::from_utf8(&rest[1..end])
        .ok()
        .and_then(|text| text.parse::<usize>().ok())
        .filter(|&n| n <= MAX_REQUEST)
        .ok_or("bad length in a request")?;
    Ok(Some((number, at + end + 2)))
}

/// The server's side: its bytes relayed as they come, until a [`Fault::LostReply`] was
/// armed on the connection: then whatever arrives is thrown away and the connection closed.
fn relay_replies(conn: &Conn, shared: &Shared) {
    let mut chunk = [0u8; 16 * 1024];
    while !conn.over(shared) {
        match (&conn.server).read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                if conn.lose_reply.load(Ordering::SeqCst) {
                    break;
                }
                if send(&conn.client, &chunk[..n]).is_err() {
                    break;
                }
            }
            Err(e) if is_tick(&e) => {}
            Err(_) => break,
        }
    }
    conn.close(false);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chaos::proxy::{Fault, Proxy};
    use std::io::Write as _;
    use std::time::{Duration, Instant};

    #[test]
    fn commands_are_framed_whole() {
        let set = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\nv1\r\n";
        assert_eq!(request_len(set), Ok(Some(set.len())));
        for cut in 0..set.len() {
            assert_eq!(request_len(&set[..cut]), Ok(None), "cut at {cut}");
        }
        let mut two = set.to_vec();
        two.extend_from_slice(b"PING\r\n");
        assert_eq!(request_len(&two), Ok(Some(set.len())));
        assert_eq!(request_len(b"PING\r\n"), Ok(Some(6)));
        assert!(request_len(b"*1\r\n:3\r\n").is_err());
        assert!(request_len(b"*1\r\n$1\r\nab\r\n").is_err());
    }

    /// A client of a real throwaway redis-server through the proxy: one command and its reply.
    fn command(stream: &mut TcpStream, args: &[&str]) -> Vec<u8> {
        let mut bytes = format!("*{}\r\n", args.len()).into_bytes();
        for arg in args {
            bytes.extend_from_slice(format!("${}\r\n{arg}\r\n", arg.len()).as_bytes());
        }
        if stream.write_all(&bytes).is_err() {
            return Vec::new();
        }
        let mut answer = [0u8; 64];
        match stream.read(&mut answer) {
            Ok(n) => answer[..n].to_vec(),
            Err(_) => Vec::new(),
        }
    }

    fn connect(proxy: &Proxy) -> TcpStream {
        let stream = TcpStream::connect(proxy.addr()).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        stream
    }

    #[test]
    fn faults_hit_one_command_of_a_real_server() {
        let Ok(server) = lease_testservers::RedisServer::start() else {
            eprintln!("skipped: no redis-server");
            return;
        };
        let upstream = std::net::SocketAddr::from(([127, 0, 0, 1], server.port()));
        let proxy = Proxy::start_redis(upstream).expect("proxy");
        let mut client = connect(&proxy);
        assert_eq!(command(&mut client, &["SET", "k", "1"]), b"+OK\r\n");

        // Lost reply: applied, no answer, the connection closed.
        proxy.arm(Fault::LostReply, 1);
        assert!(command(&mut client, &["INCR", "k"]).is_empty());
        let mut client = connect(&proxy);
        assert_eq!(command(&mut client, &["GET", "k"]), b"$1\r\n2\r\n");

        // Drop: not applied, closed.
        proxy.arm(Fault::Drop, 1);
        assert!(command(&mut client, &["INCR", "k"]).is_empty());
        let mut client = connect(&proxy);
        assert_eq!(command(&mut client, &["GET", "k"]), b"$1\r\n2\r\n");

        // Delay: applied, answered, later.
        proxy.arm(Fault::Delay(Duration::from_millis(300)), 1);
        let started = Instant::now();
        assert_eq!(command(&mut client, &["INCR", "k"]), b":3\r\n");
        assert!(started.elapsed() >= Duration::from_millis(300));

        let counters = proxy.counters();
        assert_eq!(
            (counters.lost_reply, counters.drop, counters.delay),
            (1, 1, 1)
        );
        assert_eq!((counters.requests, counters.forwarded), (6, 5));
        assert_eq!((counters.malformed, counters.panicked), (0, 0));
    }
}
