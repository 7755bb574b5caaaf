//! Baselines the seed papers compare against.
