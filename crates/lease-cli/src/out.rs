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
