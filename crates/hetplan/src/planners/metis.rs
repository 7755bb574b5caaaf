//! Metis (Um et al., USENIX ATC 2024): see the module docs once implemented.
