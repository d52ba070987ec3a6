//! Placeholder until the metrics test lands.
