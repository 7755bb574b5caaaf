//! Chrome trace event format (opens in Perfetto): one track per GPU and per link.
