//! pullgate: a containerd proxy snapshotter that gates cached private images on registry
//! re-authentication (Kubernetes KEP-2535 inside the runtime). See docs/how-it-decides.md.
//!
//! The crate is a library with a thin binary on top (`src/main.rs`): the binary parses the
//! command line ([`cli`]) and calls into the parts below.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::unwrap_used)]

pub mod api;
#[doc(hidden)]
pub mod benchkit;
pub mod chainindex;
pub mod cli;
pub mod config;
pub mod containerd_config;
pub mod credential;
pub mod cri;
pub mod crashpoint;
pub mod daemon;
pub mod defence;
pub mod diffid;
pub mod dockerconfig;
pub mod document;
pub mod doctor;
pub mod gate;
pub mod ledger;
pub mod metrics;
pub mod progress;
pub mod pull;
mod metastore;
pub mod reference;
pub mod registry;
pub mod snapshotter;

pub use config::{Config, ConfigError};
pub use snapshotter::{Driver, Kind, Snapshotter, SnapshotterError};
