//! Layer-list files (TOML or JSON) for any model.
