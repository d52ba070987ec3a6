//! `cargo xtask chaos`: the project's surfaces under aimed faults, checked from their history
//! (see `docs/chaos.md`).
#![allow(dead_code)] // the orchestrator that uses these modules is still being written

pub(crate) mod check;
pub(crate) mod history;
pub(crate) mod proxy;
