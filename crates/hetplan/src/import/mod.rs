//! What users run today, read into hetplan's model and plan (issue 11): `hetplan import`
//! compares it with hetplan's own plan. Like the rest of the library this takes texts, never
//! paths. Export then import gives back the plan (replicas of a stage may come in another
//! order: ranks are listed in the engine's order).

pub mod deepspeed;
pub mod megatron;
mod shell;
pub mod torchtitan;
