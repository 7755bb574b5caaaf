//! Checking a plan against a model and a cluster.
