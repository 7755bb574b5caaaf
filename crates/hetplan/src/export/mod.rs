//! From a plan to a job an engine starts (issue 11): the engine's configuration, one launch
//! command per node that puts every stage on the GPUs the plan gave it, and a README.
//!
//! One module per engine behind [`export`]; the rank layout the engines share
//! ([`ranks::stage_major`]) is written once. Like the rest of the library this module writes no
//! files: an [`Export`] is a list of file names and contents, which the CLI writes. A plan the
//! engine cannot run gives no files but [`ExportError::Unsupported`] with every reason.

pub mod megatron;
pub mod ranks;

use crate::cluster::Cluster;
use crate::model::Model;
use crate::plan::ValidPlan;
use serde::Serialize;

/// An engine hetplan writes jobs for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Target {
    /// Megatron-LM's `pretrain_gpt.py` (Megatron-Core 0.13 or later: the pipeline layout).
    Megatron,
}

impl Target {
    pub const ALL: [Target; 1] = [Target::Megatron];

    pub fn name(self) -> &'static str {
        match self {
            Target::Megatron => "megatron",
        }
    }

    /// The mainstream engine whose rules (`plan::runtime`) decide what it runs, if any.
    pub fn runtime(self) -> Option<crate::plan::runtime::Runtime> {
        match self {
            Target::Megatron => Some(crate::plan::runtime::Runtime::Megatron),
        }
    }
}

/// What an export is made from.
#[derive(Clone, Copy)]
pub struct Job<'a> {
    pub model: &'a Model,
    pub cluster: &'a Cluster,
    pub plan: &'a ValidPlan,
    pub seq_len: u64,
}

/// One file of an export, by its name inside the export directory.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ExportFile {
    pub path: String,
    pub contents: String,
    /// Whether the file is a script to run (mode 755).
    pub executable: bool,
}

/// The files of one export, and where every rank runs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Export {
    pub target: Target,
    pub files: Vec<ExportFile>,
    pub layout: ranks::RankLayout,
}

/// Why a plan gives no files.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ExportError {
    /// The engine cannot run the plan (or the model): every reason.
    #[error("{} cannot run this plan: {}", target.name(), reasons.join("; "))]
    Unsupported {
        target: Target,
        reasons: Vec<String>,
    },
}

/// The files that start `job` on `target`.
pub fn export(target: Target, job: Job<'_>) -> Result<Export, ExportError> {
    match target {
        Target::Megatron => megatron::export(job),
    }
}

/// `word` quoted for a POSIX shell when it needs it (`t*4|t*4L` would glob).
pub fn shell_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_quoting() {
        assert_eq!(shell_quote("--bf16"), "--bf16");
        assert_eq!(shell_quote("Et*4|t*4L"), "'Et*4|t*4L'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}
