//! A real `fork`: a child that drops, returns from `main` with, unwinds with, exits with, or
//! explicitly releases its copy of a held lease leaves its parent holding, for a `FileLock` and
//! a `DirectoryStore` lease, in kernel-lock and heartbeat-only mode (issue 22, item 4).
//!
//! The `delete` and `renew` cases (issue 37, item 2) have the child end or change its parent's
//! lease through the inherited store with the lease's own tokens: refused. The `cached` cases
//! (issue 37, item 1) acquire and release first, so that the face keeps the lock directory open
//! across the fork, then parent and child both try to acquire: never both.
//!
//! The `check` cases have the child ask its copy of the guard whether it holds: never (before,
//! a copy said yes until the deadline known at the fork, and a lease-core guard's copy released
//! through the child's copy of an in-memory store). The `inherit` cases have the child acquire
//! through its copy of the `FileLock` or store after the parent's tenure started its heartbeat
//! thread or keeper, and hold for three lease lengths (before, the child's `FileLock` tenure had
//! no heartbeat thread: the parent's does not exist in the child, and none was started).
//!
//! The `busy` cases fork while another thread of the parent holds the handle's lock (the state a
//! heartbeat or keeper thread locks too): the child's drop of its copy must not wait for a lock
//! no thread of the child will ever release. Before the fix, children hung in their drop.
//!
//! Each case runs the `lease-forktest` scenario binary, which acquires, forks and checks in the
//! parent that a contender is refused and the parent's fencing token keeps checking.

use std::process::Command;

fn scenario(face: &str, mode: &str, how: &str) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let output = Command::new(env!("CARGO_BIN_EXE_lease-forktest"))
        .args([face, mode, how])
        .arg(dir.path())
        .output()
        .unwrap_or_else(|e| panic!("run lease-forktest: {e}"));
    assert!(
        output.status.success(),
        "{face} {mode} {how}: the parent lost its lease to its child's copy: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

macro_rules! cases {
    ($($name:ident: $face:literal $mode:literal $how:literal;)*) => {
        $(
            #[test]
            fn $name() {
                scenario($face, $mode, $how);
            }
        )*
    };
}

cases! {
    lock_kernel_child_drops: "lock" "kernel" "drop";
    lock_kernel_child_returns_from_main: "lock" "kernel" "return";
    lock_kernel_child_unwinds: "lock" "kernel" "unwind";
    lock_kernel_child_exits: "lock" "kernel" "exit";
    lock_kernel_child_release_is_refused: "lock" "kernel" "release";
    lock_heartbeat_child_drops: "lock" "heartbeat" "drop";
    lock_heartbeat_child_returns_from_main: "lock" "heartbeat" "return";
    lock_heartbeat_child_unwinds: "lock" "heartbeat" "unwind";
    lock_heartbeat_child_release_is_refused: "lock" "heartbeat" "release";
    store_kernel_child_drops: "store" "kernel" "drop";
    store_kernel_child_returns_from_main: "store" "kernel" "return";
    store_kernel_child_unwinds: "store" "kernel" "unwind";
    store_kernel_child_exits: "store" "kernel" "exit";
    store_kernel_child_release_is_refused: "store" "kernel" "release";
    store_heartbeat_child_drops: "store" "heartbeat" "drop";
    store_heartbeat_child_returns_from_main: "store" "heartbeat" "return";
    store_heartbeat_child_unwinds: "store" "heartbeat" "unwind";
    store_heartbeat_child_release_is_refused: "store" "heartbeat" "release";
    store_kernel_child_delete_is_refused: "store" "kernel" "delete";
    store_heartbeat_child_delete_is_refused: "store" "heartbeat" "delete";
    store_kernel_child_renew_is_refused: "store" "kernel" "renew";
    store_heartbeat_child_renew_is_refused: "store" "heartbeat" "renew";
    lock_kernel_cached_directory_is_never_shared_with_a_child: "lock" "kernel" "cached";
    lock_heartbeat_cached_directory_is_never_shared_with_a_child: "lock" "heartbeat" "cached";
    store_kernel_cached_directory_is_never_shared_with_a_child: "store" "kernel" "cached";
    store_heartbeat_cached_directory_is_never_shared_with_a_child: "store" "heartbeat" "cached";
    lock_kernel_childs_copy_is_never_trusted: "lock" "kernel" "check";
    lock_heartbeat_childs_copy_is_never_trusted: "lock" "heartbeat" "check";
    store_kernel_childs_copy_is_never_trusted: "store" "kernel" "check";
    store_heartbeat_childs_copy_is_never_trusted: "store" "heartbeat" "check";
    lock_kernel_child_holds_what_it_acquires_through_its_copy: "lock" "kernel" "inherit";
    lock_heartbeat_child_holds_what_it_acquires_through_its_copy: "lock" "heartbeat" "inherit";
    store_kernel_child_holds_what_it_acquires_through_its_copy: "store" "kernel" "inherit";
    store_heartbeat_child_holds_what_it_acquires_through_its_copy: "store" "heartbeat" "inherit";
    lock_kernel_child_drops_while_a_thread_holds_the_locks_state: "lock" "kernel" "busy";
    lock_heartbeat_child_drops_while_a_thread_holds_the_locks_state: "lock" "heartbeat" "busy";
    store_kernel_child_drops_while_a_thread_holds_the_guards_state: "store" "kernel" "busy";
    store_heartbeat_child_drops_while_a_thread_holds_the_guards_state: "store" "heartbeat" "busy";
}
