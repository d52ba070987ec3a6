//! Test support for fork safety: [`fork`], a `fork(2)` without `exec`, and [`wait`].
//!
//! A process that holds a lease and forks hands its child a copy of everything: the lease
//! handles, their open descriptors (and so the kernel lock, which lives on the shared open file
//! description), their state in memory. lease-file promises that nothing the child does with
//! that copy (dropping it, returning from `main`, unwinding, exiting, an explicit release)
//! frees the parent's lease. Testing that needs a real fork without `exec`, which is `unsafe`;
//! this unpublished crate holds the workspace's only `unsafe` block so that every published
//! crate keeps `unsafe_code = "forbid"`.
//!
//! ```no_run
//! match lease_forktest::fork()? {
//!     lease_forktest::Forked::Child => std::process::exit(0),
//!     lease_forktest::Forked::Parent(child) => assert_eq!(lease_forktest::wait(child)?, 0),
//! }
//! # Ok::<(), nix::Error>(())
//! ```
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

/// The README's example, compiled as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid};

/// Which side of a [`fork`] this process is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forked {
    /// The new process: a copy of the caller with only the calling thread.
    Child,
    /// The caller, with the child's pid.
    Parent(Pid),
}

/// `fork(2)`: the calling process continues as the parent, a copy of it as the child.
///
/// Only the calling thread exists in the child. Locks that other threads held at the moment of
/// the fork stay locked there, so a child that touches them hangs (a test sees a timeout, never
/// a false pass); the scenarios here fork from the main thread and touch only the lease handles
/// they fork with, whose locks no other thread holds at that moment.
///
/// # Errors
/// `fork` failed (no memory, the process limit).
pub fn fork() -> nix::Result<Forked> {
    // SAFETY: `fork` is unsafe because a child of a multi-threaded process may only call
    // async-signal-safe functions until it execs, or it may find a lock held forever by a thread
    // that does not exist in it. The callers are test scenarios that accept that hazard as a
    // hang (a failing test), never as undefined behaviour in the parent, which is unaffected.
    #[allow(unsafe_code)]
    let forked = unsafe { nix::unistd::fork() }?;
    Ok(match forked {
        ForkResult::Child => Forked::Child,
        ForkResult::Parent { child } => Forked::Parent(child),
    })
}

/// Waits for `child` to end: its exit code, or 128 + N when signal N killed it.
///
/// # Errors
/// `waitpid` failed (not our child).
pub fn wait(child: Pid) -> nix::Result<i32> {
    loop {
        match waitpid(child, None)? {
            WaitStatus::Exited(_, code) => return Ok(code),
            WaitStatus::Signaled(_, signal, _) => return Ok(128 + signal as i32),
            _ => {}
        }
    }
}
