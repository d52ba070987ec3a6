//! The fleet: many workers sharing many units, each unit with exactly one trusted owner.
//!
//! See [`crate::protocol`] for the protocol and why it is safe.

mod assigner;
mod builder;
mod checkpoint;
mod counted;
mod join;
mod meter;
pub(crate) mod plan;
mod session;
mod shared;
mod takes;
mod types;
mod units;
mod view;
mod worker;

pub use builder::WorkerBuilder;
pub use shared::{UnitTask, WorkerHandle};
pub use types::{Assignment, Checkpoint, FleetEvent, TickReport, UnitEnd, WorkerStats};
pub use worker::Worker;
