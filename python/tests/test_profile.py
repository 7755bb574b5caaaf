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
        tiny, "a100-sxm4-80gb", seq_len=64, mbs=(1, 32), precision="fp32", device="cpu",
        warmup=1, repeats=3,
    )


def test_the_database_has_hetplans_structure_and_units(tiny, db):
    (p,) = db["profiles"]
    assert db["format_version"] == 1
    assert (p["gpu"], p["model"], p["seq_len"], p["precision"]) == ("a100-sxm4-80gb", "tiny-llama", 64, "fp32")
    assert "cpu" in p["source"] and "medians of 3 runs" in p["source"]
    keys = {(s["layer"], s["mbs"]) for s in p["layers"]}
    assert keys == {(0, 1), ("transformer", 1), (tiny.layers - 1, 1), (0, 32), ("transformer", 32), (tiny.layers - 1, 32)}
    for s in p["layers"]:
        assert s["tp"] == 1
        # Seconds: positive and far below a second for this model on any CPU.
        for k in ("forward", "backward", "optimizer"):
            assert 0 < s[k] < 5, (k, s)


def test_activation_memory_is_what_autograd_keeps_and_scales_with_the_micro_batch(db):
    t = {(s["layer"], s["mbs"]): s for s in db["profiles"][0]["layers"]}
    for (layer, mbs), s in t.items():
        assert s["activation_memory"] > 0, s
        # No peak on the CPU: only a GPU's allocator reports one.
        assert "peak_memory" not in s
    # Every saved tensor has the micro-batch as a dimension: 32 times the samples, 32 times
    # the bytes.
    for layer in {k for k, _ in t}:
        ratio = t[(layer, 32)]["activation_memory"] / t[(layer, 1)]["activation_memory"]
        assert abs(ratio - 32) < 0.01, (layer, ratio)
    # The block keeps at least its input, its attention output and its MLP input and
    # activation (64 wide, 172 wide twice): hidden · 4 + ffn · 3 floats per token, FP32.
    per_token = t[("transformer", 1)]["activation_memory"] / 64
    assert per_token >= 4 * (4 * 64 + 3 * 172), per_token


def test_times_grow_with_the_micro_batch(db):
    t = {(s["layer"], s["mbs"]): s for s in db["profiles"][0]["layers"]}
    # 32 times the tokens: at least twice the time in the block and the head. (With 8 times,
    # this model's 64-wide kernels on a loaded 2-core CI machine measured 1.998 times: the
    # launch overhead, not the work, set the time of the small micro-batch.)
    for layer in ("transformer", max(k for k, _ in t if isinstance(k, int))):
        assert t[(layer, 32)]["forward"] > 2 * t[(layer, 1)]["forward"]
        assert t[(layer, 32)]["backward"] > 2 * t[(layer, 1)]["backward"]


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
    with pytest.raises(hetplan.HetplanError, match="without mixture-of-experts"):
        prof.profile(tiny, "a100-sxm4-80gb", seq_len=32, mbs=(1,), device="cpu", ep=(2,))
    moe = hetplan.model("mixtral-8x7b")
    with pytest.raises(hetplan.HetplanError, match="EP degree 3 does not divide"):
        prof.profile(moe, "a100-sxm4-80gb", seq_len=32, mbs=(1,), device="cpu", ep=(3,))
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


@pytest.fixture(scope="module")
def db_tp(tiny):
    # Two sequence lengths, TP 1 and 2 (two processes on gloo).
    return prof.profile(
        tiny, "a100-sxm4-80gb", seq_len=[32, 64], mbs=(2,), precision="fp32", device="cpu",
        warmup=1, repeats=2, tp=(1, 2),
    )


def test_tensor_parallel_degrees_and_sequence_lengths(tiny, db_tp):
    assert [p["seq_len"] for p in db_tp["profiles"]] == [32, 64]
    for p in db_tp["profiles"]:
        assert "TP 1,2 (gloo" in p["source"]
        t = {(s["layer"], s["tp"]): s for s in p["layers"]}
        assert {tp for _, tp in t} == {1, 2}
        for s in p["layers"]:
            assert s["forward"] > 0 and s["backward"] > 0 and s["activation_memory"] > 0
        # Half the heads and half the MLP on each rank: less kept for backward, though the
        # input and the norms stay whole.
        one, two = t[("transformer", 1)], t[("transformer", 2)]
        assert 0.4 * one["activation_memory"] < two["activation_memory"] < 0.9 * one["activation_memory"]
        # Half the parameters in the optimizer step's state... and the same model's layers.
        assert {k for k, _ in t} == {0, "transformer", tiny.layers - 1}
    # Twice the sequence, twice the tokens kept (attention's scores, quadratic, on the CPU's
    # math kernel make it more).
    a32 = {(s["layer"], s["tp"]): s["activation_memory"] for s in db_tp["profiles"][0]["layers"]}
    a64 = {(s["layer"], s["tp"]): s["activation_memory"] for s in db_tp["profiles"][1]["layers"]}
    assert a64[("transformer", 1)] >= 2 * a32[("transformer", 1)]
    # hetplan takes the TP 2 samples for a TP 2 plan at the profile's sequence length.
    cluster = hetplan.cluster("1x2xa100-80gb")
    plan = hetplan.load_plan(tiny, cluster, "tp=2,mbs=2,gbs=8,precision=fp32", seq_len=64)
    assert plan.estimate(profile=db_tp).stages[0].compute_source in ("measured", "interpolated")
    other = hetplan.load_plan(tiny, cluster, "tp=2,mbs=2,gbs=8,precision=fp32", seq_len=128)
    assert other.estimate(profile=db_tp).stages[0].compute_source == "analytic"


def test_a_tensor_parallel_degree_must_divide_the_heads(tiny):
    with pytest.raises(hetplan.HetplanError, match="TP degree 3 does not divide"):
        prof.profile(tiny, "a100-sxm4-80gb", seq_len=32, mbs=(1,), device="cpu", tp=(1, 3))


TINY_MOE = {
    "model_type": "qwen2_moe",
    "hidden_size": 64,
    "intermediate_size": 128,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 64,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 256,
    "max_position_embeddings": 128,
    "mlp_only_layers": [0],
}


def test_mixture_of_experts_blocks_at_each_expert_parallel_degree():
    moe = hetplan.model(TINY_MOE, name="tiny-moe")
    db = prof.profile(
        moe, "a100-sxm4-80gb", seq_len=32, mbs=(2,), precision="fp32", device="cpu",
        warmup=1, repeats=2, ep=(1, 4),
    )
    (p,) = db["profiles"]
    assert "EP 1,4" in p["source"]
    keys = sorted((str(s["layer"]), s.get("ep", 1)) for s in p["layers"])
    # Block 0 (layer 1) keeps a dense MLP: keyed by its index; the two MoE blocks by kind, at
    # EP 1 and 4; the embedding and head once.
    assert keys == [("0", 1), ("1", 1), ("4", 1), ("transformer", 1), ("transformer", 4)], keys
    t = {(str(s["layer"]), s.get("ep", 1)): s for s in p["layers"]}
    # The same tokens go through a quarter of the experts: as many FLOPs, kept activations
    # alike (the routed tokens' inputs and outputs), and the router's probabilities over all.
    for k in ("forward", "backward", "activation_memory"):
        assert t[("transformer", 4)][k] > 0
    assert t[("transformer", 4)]["activation_memory"] == t[("transformer", 1)]["activation_memory"]
    # hetplan reads the MoE block at the plan's EP degree, and knows none was measured at 2.
    cluster = hetplan.cluster("1x4xa100-80gb")
    at4 = hetplan.load_plan(moe, cluster, "dp=4,ep=4,mbs=2,gbs=8,precision=fp32", seq_len=32)
    at2 = hetplan.load_plan(moe, cluster, "dp=4,ep=2,mbs=2,gbs=8,precision=fp32", seq_len=32)
    slow = json.loads(json.dumps(db))
    for s in slow["profiles"][0]["layers"]:
        if s.get("ep") == 4:
            s["forward"] *= 100
            s["backward"] *= 100
    assert at4.estimate(profile=slow).iteration_time_s > 10 * at4.estimate(profile=db).iteration_time_s
    assert at2.estimate(profile=slow).iteration_time_s == at2.estimate(profile=db).iteration_time_s


def test_a_measured_training_step_beside_the_estimate(tiny, db, tmp_path):
    from hetplan import step

    r = step.compare(tiny, "a100-sxm4-80gb", seq_len=64, mbs=2, accumulation=2,
                     precision="fp32", device="cpu", warmup=1, repeats=2, profile=db)
    m = r["measured"]
    assert m["device"] == "cpu" and 0 < m["step_s"] < 5 and m["spread"] >= 1
    # Every parameter of the model is built: hetplan's count, exactly.
    assert m["parameters"] == tiny.parameters
    assert r["analytic"]["compute_source"] == "analytic"
    assert r["profiled"]["compute_source"] in ("measured", "interpolated")
    for k in ("analytic", "profiled"):
        est = r[k]
        assert est["fits"] and est["step_s"] > 0
        assert abs(est["error"] - (est["step_s"] / m["step_s"] - 1)) < 1e-12
    # The command line prints the same object.
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY))
    assert step.main(["--model", str(config), "--gpu", "no-such-gpu", "--device", "cpu"]) == 2


def test_tf32_profiles_are_labelled_and_restore_pytorchs_switch(tiny):
    # TF32 is FP32 tensors with the products in TF32 where the GPU has it (none on a CPU):
    # the database says `tf32`, so that it prices plans in `precision=tf32`, and PyTorch's
    # switch is back where it was afterwards.
    before = torch.backends.cuda.matmul.allow_tf32
    db32 = prof.profile(tiny, "a100-sxm4-80gb", seq_len=32, mbs=(1,), precision="tf32",
                        device="cpu", warmup=0, repeats=1)
    assert torch.backends.cuda.matmul.allow_tf32 == before
    assert {p["precision"] for p in db32["profiles"]} == {"tf32"}
    cluster = hetplan.cluster("1x2xa100-80gb")
    plan = hetplan.load_plan(tiny, cluster, "dp=2,mbs=1,gbs=2,precision=tf32", seq_len=32)
    assert plan.estimate(profile=db32).stages[0].compute_source in ("measured", "interpolated")
    # On an A100 the analytic model prices TF32 products faster than FP32 ones.
    fp32 = hetplan.load_plan(tiny, cluster, "dp=2,mbs=1,gbs=2,precision=fp32", seq_len=32)
    assert plan.estimate().iteration_time_s < fp32.estimate().iteration_time_s
    with prof.tf32_products(torch, True):
        assert torch.backends.cuda.matmul.allow_tf32
    assert torch.backends.cuda.matmul.allow_tf32 == before
