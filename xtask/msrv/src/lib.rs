//! Empty: this crate exists to build lease-core, with every feature, on lease-core's stated
//! rust-version (see `Cargo.toml`).
