//! The fleet's metrics (feature `metrics`): names from [`crate::metrics`], one series per worker
//! and never one per unit. Without the feature these functions are empty.

use super::types::UnitEnd;
#[cfg(feature = "metrics")]
use crate::metrics::{
    FLEET_IMBALANCE, FLEET_UNITS_GAINED, FLEET_UNITS_LOST, FLEET_UNITS_OWNED, LABEL_WORKER,
};
#[cfg(feature = "metrics")]
use lease_core::metrics::{LABEL_REASON, loss_reason};

/// The worker's units owned, and how far that is from its share (`target`, once planned).
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn owned(worker: &str, owned: usize, target: Option<usize>) {
    #[cfg(feature = "metrics")]
    {
        let owned = owned as f64;
        ::metrics::gauge!(FLEET_UNITS_OWNED, LABEL_WORKER => worker.to_owned()).set(owned);
        if let Some(target) = target {
            ::metrics::gauge!(FLEET_IMBALANCE, LABEL_WORKER => worker.to_owned())
                .set(owned - target as f64);
        }
    }
}

/// A unit gained.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn gained(worker: &str) {
    #[cfg(feature = "metrics")]
    ::metrics::counter!(FLEET_UNITS_GAINED, LABEL_WORKER => worker.to_owned()).increment(1);
}

/// A unit lost or handed over.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn lost(worker: &str, reason: &UnitEnd) {
    #[cfg(feature = "metrics")]
    ::metrics::counter!(
        FLEET_UNITS_LOST,
        LABEL_WORKER => worker.to_owned(),
        LABEL_REASON => reason_label(reason)
    )
    .increment(1);
}

/// The bounded label value naming why a unit ended.
#[cfg(feature = "metrics")]
fn reason_label(reason: &UnitEnd) -> &'static str {
    match reason {
        UnitEnd::HandedOver => "handed_over",
        UnitEnd::Shutdown => "shutdown",
        UnitEnd::Retired => "retired",
        UnitEnd::Lost(reason) => loss_reason(reason),
    }
}
