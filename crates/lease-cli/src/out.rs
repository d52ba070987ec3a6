//! Standard output that never panics: `lease status ... | head -1` or `| true` closes the pipe
//! early, and the rest of the output is then dropped quietly (`println!` would panic, exit 101).

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once stdout is found closed: nothing more is written.
static CLOSED: AtomicBool = AtomicBool::new(false);

/// Writes `text` to stdout and flushes it. A closed pipe ends the output for the rest of the
/// process without an error (the reader has seen what it wanted); any other write error is
/// reported on stderr once, and ends the output too.
pub(crate) fn text(text: &str) {
    if CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut stdout = std::io::stdout().lock();
    if let Err(error) = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        CLOSED.store(true, Ordering::Relaxed);
        if error.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("lease: cannot write to standard output: {error}");
        }
    }
}

/// Whether standard output was found closed: nothing more is written.
pub(crate) fn closed() -> bool {
    CLOSED.load(Ordering::Relaxed)
}

/// `println!` through [`text`].
macro_rules! outln {
    () => {
        $crate::out::text("\n")
    };
    ($($arg:tt)*) => {
        $crate::out::text(&format!("{}\n", format_args!($($arg)*)))
    };
}
pub(crate) use outln;

/// Resolves once standard output is closed by its reader (a pipe whose reader exited: `lease
/// watch ... | head -1`), without writing to it: one thread blocked in `poll` on it, asking for
/// no event, so that it wakes only on an error or a hang-up (a regular file or `/dev/null`
/// never wakes it). A command that prints only on changes learns so that its reader is gone
/// while nothing changes.
pub(crate) async fn reader_gone() {
    use std::os::fd::AsFd;
    let (gone, wait) = tokio::sync::oneshot::channel::<()>();
    let started = std::thread::Builder::new()
        .name("stdout-watch".to_owned())
        .spawn(move || {
            let stdout = std::io::stdout();
            loop {
                let mut fds = [nix::poll::PollFd::new(
                    stdout.as_fd(),
                    nix::poll::PollFlags::empty(),
                )];
                match nix::poll::poll(&mut fds, nix::poll::PollTimeout::NONE) {
                    Ok(n) if n > 0 => break,
                    Err(nix::errno::Errno::EINTR) | Ok(_) => {}
                    Err(error) => {
                        tracing::debug!(%error, "cannot watch standard output");
                        return;
                    }
                }
            }
            CLOSED.store(true, Ordering::Relaxed);
            let _ = gone.send(());
        });
    if let Err(error) = started {
        tracing::debug!(%error, "cannot start the standard output watch");
        std::future::pending::<()>().await;
    }
    // A watch that could not poll never resolves: the output is then found closed at a write.
    if wait.await.is_err() {
        std::future::pending::<()>().await;
    }
}
