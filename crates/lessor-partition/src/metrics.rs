//! The fleet's metric names, reported through the [`metrics`](https://docs.rs/metrics) facade
//! with the feature `metrics`: one series per worker, never one per unit (a fleet may have
//! 100,000 units). The store's own series (acquisitions, renewals, ...) come from the backend,
//! named in [`lease_core::metrics`]. `docs/metrics.md` in the repository lists every series with
//! its type, unit, labels and when it moves.
//!
//! ```
//! use lessor_partition::metrics;
//!
//! assert_eq!(metrics::FLEET_UNITS_OWNED, "lease_fleet_units_owned");
//! assert!(metrics::ALL.contains(&metrics::FLEET_IMBALANCE));
//! ```

/// Gauge: units a fleet worker owns, by `worker`.
pub const FLEET_UNITS_OWNED: &str = "lease_fleet_units_owned";
/// Counter: units a fleet worker gained, by `worker`.
pub const FLEET_UNITS_GAINED: &str = "lease_fleet_units_gained_total";
/// Counter: units a fleet worker lost or handed over, by `worker` and `reason`: `handed_over`,
/// `shutdown`, `retired` (the fleet's [`UnitEnd`](crate::UnitEnd)s), or lease-core's
/// [`loss_reason`](lease_core::metrics::loss_reason) label of a [`UnitEnd::Lost`](crate::UnitEnd::Lost).
pub const FLEET_UNITS_LOST: &str = "lease_fleet_units_lost_total";
/// Gauge: units a fleet worker owns minus its share from its last plan, by `worker`: positive
/// above its share, negative below.
pub const FLEET_IMBALANCE: &str = "lease_fleet_imbalance";

/// Every metric name above, in the order `docs/metrics.md` lists them.
pub const ALL: [&str; 4] = [
    FLEET_UNITS_OWNED,
    FLEET_UNITS_GAINED,
    FLEET_UNITS_LOST,
    FLEET_IMBALANCE,
];

/// Label: a fleet worker's id. The reason of a loss is lease-core's
/// [`LABEL_REASON`](lease_core::metrics::LABEL_REASON).
pub const LABEL_WORKER: &str = "worker";
