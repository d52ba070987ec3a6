//! Watches on a key's lock directory: the kernel reports every change of the directory (a state
//! rename, a description written, the directory created, removed or replaced) through inotify,
//! and a thread per watch turns the reports into wake-ups.

use std::ffi::OsStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use lease_core::RecordWatch;
use lease_core::backend::Changes;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};

use crate::fsio::Base;

/// A watch on the lock directory `name` of the store `base`, or `None` when the kernel offers
/// none (no inotify, no `/proc`, out of watches): then only polling can tell.
///
/// The directories are named through `/proc/self/fd/<store descriptor>`, so the store directory
/// watched is the one the store opened, whatever its path now names; the lock directory is not
/// followed if it is a link. A watch is only a hint to read again: readers read through the
/// store's own checks, and poll as well.
pub(crate) fn watch(base: &Arc<Base>, name: &OsStr) -> Option<Box<dyn RecordWatch>> {
    use std::os::fd::AsRawFd;
    let inotify = Arc::new(Inotify::init(InitFlags::IN_CLOEXEC).ok()?);
    let store = std::path::PathBuf::from(format!("/proc/self/fd/{}", base.fd().as_raw_fd()));
    let entries = AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_ONLYDIR;
    let store_wd = inotify.add_watch(&store, entries).ok()?;
    let dir = Dir {
        inotify: inotify.clone(),
        path: store.join(name),
    };
    let changes = Changes::new();
    let stopped = Arc::new(AtomicBool::new(false));
    // Armed before the thread starts: a change from here on is reported.
    dir.add();
    let watch = changes.watch();
    let thread = {
        let (changes, stopped, name) = (changes.clone(), stopped.clone(), name.to_owned());
        std::thread::Builder::new()
            .name("lease-file-watch".into())
            .spawn(move || {
                while !stopped.load(Ordering::Acquire) {
                    let Ok(events) = dir.inotify.read_events() else {
                        // Interrupted, or the queue is unreadable: wake the reader to read
                        // again, and do not spin.
                        changes.notify();
                        std::thread::sleep(std::time::Duration::from_millis(10));
                        continue;
                    };
                    let mut changed = false;
                    for event in events {
                        if event.wd == store_wd {
                            // The lock directory was created, removed or replaced: watch the
                            // one now at its name.
                            if event.name.as_deref() == Some(name.as_os_str()) {
                                dir.add();
                                changed = true;
                            }
                        } else {
                            changed = true;
                        }
                    }
                    if changed {
                        changes.notify();
                    }
                }
            })
    };
    if thread.is_err() {
        return None;
    }
    Some(Box::new(FileWatch {
        watch,
        inotify,
        store_wd,
        stopped,
    }))
}

/// The lock directory to watch.
struct Dir {
    inotify: Arc<Inotify>,
    path: std::path::PathBuf,
}

impl Dir {
    /// Watches the lock directory at its name now, if there is one (not a link). The kernel
    /// gives the same directory the same watch, and reports a removed one's end by itself.
    fn add(&self) {
        let flags = AddWatchFlags::IN_CREATE
            | AddWatchFlags::IN_DELETE
            | AddWatchFlags::IN_MOVED_FROM
            | AddWatchFlags::IN_MOVED_TO
            | AddWatchFlags::IN_MODIFY
            | AddWatchFlags::IN_DELETE_SELF
            | AddWatchFlags::IN_MOVE_SELF
            | AddWatchFlags::IN_ONLYDIR
            | AddWatchFlags::IN_DONT_FOLLOW;
        let _ = self.inotify.add_watch(&self.path, flags);
    }
}

/// Wakes its reader on every change the watch thread reports; stops the thread when dropped.
struct FileWatch {
    watch: Box<dyn RecordWatch>,
    inotify: Arc<Inotify>,
    store_wd: WatchDescriptor,
    stopped: Arc<AtomicBool>,
}

impl std::fmt::Debug for FileWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileWatch").finish_non_exhaustive()
    }
}

impl RecordWatch for FileWatch {
    fn next_change(&mut self) -> lease_core::BoxFuture<'_, ()> {
        self.watch.next_change()
    }
}

impl Drop for FileWatch {
    fn drop(&mut self) {
        self.stopped.store(true, Ordering::Release);
        // Removing a watch queues an event (`IN_IGNORED`), which ends the thread's read.
        let _ = self.inotify.rm_watch(self.store_wd);
    }
}
