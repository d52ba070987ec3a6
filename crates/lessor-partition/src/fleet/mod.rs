//! The fleet: many workers sharing many units, each unit with exactly one trusted owner.
//!
//! See the crate documentation for the protocol and why it is safe.

mod checkpoint;
pub(crate) mod plan;
mod worker;

pub use checkpoint::{CheckpointStore, MemoryCheckpoints, StoreCheckpoints};
pub use worker::{
    Assignment, EventHandler, FleetEvent, LossCause, TickReport, Worker, WorkerBuilder,
    WorkerHandle, WorkerStats,
};
