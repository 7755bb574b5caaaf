"""The profiler on the CPU with a tiny model: the database it writes has hetplan's structure
and units, grows with the micro-batch, and hetplan reads it back and estimates with it."""

import json

import pytest

import hetplan

torch = pytest.importorskip("torch")
from hetplan import profile as prof  # noqa: E402

TINY = {
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 172,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 256,
    "max_position_embeddings": 128,
}


@pytest.fixture(scope="module")
def tiny():
    return hetplan.model(TINY, name="tiny-llama")


@pytest.fixture(scope="module")
def db(tiny):
    return prof.profile(
        tiny, "a100-sxm4-80gb", seq_len=64, mbs=(1, 8), precision="fp32", device="cpu",
        warmup=1, repeats=3,
    )


def test_the_database_has_hetplans_structure_and_units(tiny, db):
    (p,) = db["profiles"]
    assert db["format_version"] == 1
    assert (p["gpu"], p["model"], p["seq_len"], p["precision"]) == ("a100-sxm4-80gb", "tiny-llama", 64, "fp32")
    assert "cpu" in p["source"] and "medians of 3 runs" in p["source"]
    keys = {(s["layer"], s["mbs"]) for s in p["layers"]}
    assert keys == {(0, 1), ("transformer", 1), (tiny.layers - 1, 1), (0, 8), ("transformer", 8), (tiny.layers - 1, 8)}
    for s in p["layers"]:
        assert s["tp"] == 1
        # Seconds: positive and far below a second for this model on any CPU.
        for k in ("forward", "backward", "optimizer"):
            assert 0 < s[k] < 5, (k, s)


def test_times_grow_with_the_micro_batch(db):
    t = {(s["layer"], s["mbs"]): s for s in db["profiles"][0]["layers"]}
    # Eight times the tokens: at least twice the time in the block and the head.
    for layer in ("transformer", max(k for k, _ in t if isinstance(k, int))):
        assert t[(layer, 8)]["forward"] > 2 * t[(layer, 1)]["forward"]
        assert t[(layer, 8)]["backward"] > 2 * t[(layer, 1)]["backward"]


def test_hetplan_reads_the_database_back(tiny, db, tmp_path):
    cluster = hetplan.cluster("1x2xa100-80gb")
    # The profile was measured in FP32: the plan trains in FP32 too (a profile is per precision).
    plan = hetplan.load_plan(tiny, cluster, "dp=2,mbs=8,gbs=32,precision=fp32", seq_len=64)
    measured = plan.estimate(profile=db)
    analytic = plan.estimate()
    assert measured.stages[0].compute_source in ("measured", "interpolated")
    assert analytic.stages[0].compute_source == "analytic"
    assert measured.iteration_time_s != analytic.iteration_time_s
    path = tmp_path / "db.json"
    path.write_text(json.dumps(db))
    assert plan.estimate(profile=path).iteration_time_s == measured.iteration_time_s
    # The command line writes the same format.
    out, config = tmp_path / "cli.json", tmp_path / "config.json"
    config.write_text(json.dumps(TINY))
    args = ["--model", str(config), "--gpu", "a100-sxm4-80gb", "--seq-len", "32", "--mbs", "1"]
    args += ["--precision", "fp32", "--device", "cpu", "--warmup", "0", "--repeats", "1"]
    assert prof.main(args + ["--out", str(out)]) == 0
    assert json.loads(out.read_text())["profiles"][0]["seq_len"] == 32


def test_bad_requests_are_errors(tiny):
    with pytest.raises(hetplan.HetplanError):
        prof.profile(tiny, "a100-sxm4-80gb", seq_len=32, mbs=(0,), device="cpu")
    moe = hetplan.model("mixtral-8x7b")
    with pytest.raises(hetplan.HetplanError, match="mixture-of-experts"):
        prof.profile(moe, "a100-sxm4-80gb", seq_len=32, mbs=(1,), device="cpu")
    assert prof.main(["--model", "no-such-model", "--gpu", "a100-sxm4-80gb"]) == 2


def test_collectives_on_two_cpu_processes(tiny, db):
    # 4 KiB and 16 MiB: 4096 times the bytes, so the ordering survives a loaded CI machine.
    sizes = (1 << 12, 1 << 24)
    samples, skipped = prof.collectives(2, "gloo", sizes=sizes, warmup=3, repeats=5)
    ops = {s["op"] for s in samples}
    assert {"all-reduce", "all-gather", "p2p"} <= ops, (ops, skipped)
    assert ops | set(skipped) == set(prof.COLLECTIVES)
    for s in samples:
        assert s["group_size"] == 2 and s["link"] == "intra-node" and s["bandwidth"] > 0
    # The larger message takes longer (time = message / bandwidth) for every op.
    for op in ops:
        small, large = sorted((s for s in samples if s["op"] == op), key=lambda s: s["message"])
        assert large["message"] / large["bandwidth"] > small["message"] / small["bandwidth"], op
    # hetplan reads them back in the database.
    full = json.loads(json.dumps(db))
    full["profiles"][0]["collectives"] = samples
    cluster = hetplan.cluster("1x2xa100-80gb")
    plan = hetplan.load_plan(tiny, cluster, "dp=2,mbs=8,gbs=32,precision=fp32", seq_len=64)
    assert plan.estimate(profile=full).fits
    with pytest.raises(hetplan.HetplanError):
        prof.collectives(1)
