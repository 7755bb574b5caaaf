//! Profile database: measured per-layer times.
