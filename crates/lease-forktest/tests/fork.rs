//! A real `fork`: a child that drops, returns from `main` with, unwinds with, exits with, or
//! explicitly releases its copy of a held lease leaves its parent holding, for a `FileLock` and
//! a `DirectoryStore` lease, in kernel-lock and heartbeat-only mode (issue 22, item 4).
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
}
