//! The cluster TOML format and its resolution into a `Cluster`.
