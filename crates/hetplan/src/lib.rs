//! hetplan: find and cost the ways to train a large model on a heterogeneous GPU cluster.
//!
//! The library never prints, never reads the clock and never touches files: parsers and
//! importers take file contents, the CLI reads the files. See `ARCHITECTURE.md` for the code map
//! and the invariants.

pub mod calibration;
pub mod cluster;
pub mod cost;
pub mod error;
pub mod export;
pub mod gpu;
pub mod import;
pub mod model;
pub mod names;
pub mod parse;
pub mod plan;
pub mod planners;
pub mod profile;
pub mod scenario;
pub mod sim;
pub mod units;

pub use cluster::{Cluster, GpuId};
pub use error::InputError;
pub use model::Model;
pub use plan::Plan;
pub use units::{Bytes, BytesPerSec, Flop, FlopPerSec, Seconds};
