//! Built-in models.
