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

/// `text` that came from the store or another user (a holder's description, a Go lock file's
/// owner, a key name, a record's reason), made safe to print for people: control characters
/// (escape sequences that retitle, clear or recolour a terminal, carriage returns that overwrite
/// a line, C1 controls) and the invisible characters that reorder or hide text (bidirectional
/// overrides and isolates such as U+202E, zero-width characters) are shown escaped, as
/// `\u{1b}`. Everything else, non-ASCII letters included, is shown as it is. `--json` output is
/// not passed through it: it stays exact.
pub(crate) fn safe(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(hidden) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if hidden(c) {
            shown.extend(c.escape_unicode());
        } else {
            shown.push(c);
        }
    }
    std::borrow::Cow::Owned(shown)
}

/// Whether `c` acts on the terminal or on the order or visibility of text instead of showing.
fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'
                | '\u{200b}'..='\u{200f}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2060}'..='\u{2069}'
                | '\u{feff}'
                | '\u{fff9}'..='\u{fffb}'
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_bidi_overrides_are_shown_escaped() {
        assert_eq!(safe("pid 7 on host h"), "pid 7 on host h");
        assert_eq!(safe("héllo 世界"), "héllo 世界");
        assert_eq!(
            safe("a\u{1b}]0;x\u{7}b\u{202e}c\r\n"),
            "a\\u{1b}]0;x\\u{7}b\\u{202e}c\\u{d}\\u{a}"
        );
        assert_eq!(safe("\u{9b}31m"), "\\u{9b}31m");
    }
}
