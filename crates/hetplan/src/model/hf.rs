//! HuggingFace `config.json` import.
