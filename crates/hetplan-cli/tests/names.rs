//! GPU names on the command line: nvidia-smi's names resolve, ambiguous short names resolve
//! with a note on stderr saying which card was taken, `hetplan gpus` lists the aliases.

use std::process::Command;

fn hetplan(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_hetplan"))
        .args(args)
        .env("NO_COLOR", "1")
        .env_remove("COLUMNS")
        .output()
        .expect("the hetplan binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

const PLAN: &str = "dp=8,mbs=1,gbs=8";

#[test]
fn an_ambiguous_short_name_says_which_card_it_means() {
    let (code, _, err) = hetplan(&[
        "estimate",
        "--model",
        "gpt3-125m",
        "--cluster",
        "1x8xA100",
        "--plan",
        PLAN,
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains(
            "note: `a100` means a100-sxm4-40gb; write `a100-80gb` for the 80 GB card, \
             `a100-pcie` for the PCIe one"
        ),
        "{err}"
    );
}

#[test]
fn full_and_nvidia_smi_names_resolve_without_a_note() {
    for gpu in ["a100-sxm4-80gb", "h100-sxm-80gb", "rtx4090"] {
        let cluster = format!("1x8x{gpu}");
        let (code, _, err) = hetplan(&[
            "estimate",
            "--model",
            "gpt3-125m",
            "--cluster",
            &cluster,
            "--plan",
            PLAN,
        ]);
        assert_eq!(code, 0, "{gpu}: {err}");
        assert!(!err.contains("note:"), "{gpu}: {err}");
    }
}

#[test]
fn unknown_names_keep_the_nearest_name() {
    let (code, _, err) = hetplan(&[
        "estimate",
        "--model",
        "gpt3-125m",
        "--cluster",
        "1x8xh100-sxm5-80g",
        "--plan",
        PLAN,
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("did you mean `h100-sxm5-80gb`"), "{err}");
}

#[test]
fn gpus_lists_the_aliases() {
    let (code, out, _) = hetplan(&["gpus"]);
    assert_eq!(code, 0);
    assert!(out.contains("aliases"), "{out}");
    assert!(out.contains("a100*"), "{out}");
    assert!(out.contains("h100-sxm-80gb"), "{out}");
}

#[test]
fn a_mixed_cluster_on_the_command_line() {
    let (code, out, err) = hetplan(&[
        "estimate",
        "--model",
        "gpt3-125m",
        "--cluster",
        "1x4xa100-80gb+1x4xv100-32gb@100Gbps",
        "--plan",
        PLAN,
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("1x4xa100-sxm4-80gb+1x4xv100-sxm2-32gb@100Gbps"),
        "{out}"
    );
    let (code, _, err) = hetplan(&[
        "estimate",
        "--model",
        "gpt3-125m",
        "--cluster",
        "1x4xa100-80gb@100Gbps+1x4xv100-32gb",
        "--plan",
        PLAN,
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("has no network bandwidth"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}
