"""hetplan's Python API end to end, on small problems (no GPU needed)."""

import json
import threading

import pytest

import hetplan


@pytest.fixture(scope="module")
def llama():
    return hetplan.model("llama3-8b")


@pytest.fixture(scope="module")
def mixed():
    return hetplan.cluster("1x8xh100-sxm5-80gb@400Gbps+1x8xa100-sxm4-80gb@200Gbps")


def test_models_and_clusters_from_every_source(tmp_path):
    m = hetplan.model("gpt3-1.3b")
    assert m.layers == 26 and 1.2e9 < m.parameters < 1.5e9
    config = {
        "model_type": "llama",
        "hidden_size": 512,
        "intermediate_size": 1376,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 8,
        "vocab_size": 32000,
        "max_position_embeddings": 2048,
    }
    from_dict = hetplan.model(config, name="tiny-llama")
    (tmp_path / "config.json").write_text(json.dumps(config))
    from_dir = hetplan.model(tmp_path)
    assert from_dict.parameters == from_dir.parameters
    assert from_dict.layers == 6  # embedding, 4 blocks, head
    c = hetplan.cluster("2x8xa100-80gb")
    assert c.gpus == 16
    toml = '[[node_group]]\ngpu = "a100-sxm4-80gb"\ngpus_per_node = 4\nnodes = 2\ninter_node_bandwidth = "100 Gbps"\n'
    (tmp_path / "c.toml").write_text("name = \"t\"\n" + toml)
    assert hetplan.cluster(tmp_path / "c.toml").gpus == 8
    cats = hetplan.catalogs()
    assert "llama3-8b" in cats["models"] and "hetplan" in cats["planners"]


def test_errors_carry_their_location_and_a_hint(llama, mixed, tmp_path):
    with pytest.raises(hetplan.HetplanError) as e:
        hetplan.model("llama-3-8b-typo")
    assert e.value.hint and "llama" in e.value.hint
    (tmp_path / "bad.json").write_text('{"model_type": "llama",\n "hidden_size": "big"}')
    with pytest.raises(hetplan.HetplanError) as e:
        hetplan.model(tmp_path / "bad.json")
    assert e.value.line == 2 and e.value.column is not None
    with pytest.raises(hetplan.HetplanError) as e:
        hetplan.load_plan(llama, mixed, "tp=3,gbs=16")
    assert "tp" in e.value.message
    # A plan file that breaks a rule: its JSON path and the hint.
    p = hetplan.load_plan(llama, mixed, "tp=1,pp=2,dp=4,cp=2,mbs=1,gbs=16").to_dict()
    p["stages"][1]["cp"] = 1
    with pytest.raises(hetplan.HetplanError) as e:
        hetplan.load_plan(llama, mixed, json.dumps(p))
    assert e.value.field == "stages[1].cp" and "cp to 2" in e.value.hint
    assert isinstance(e.value, ValueError)
    with pytest.raises(hetplan.HetplanError):
        hetplan.plan(llama, mixed, gbs=16, engine="jax")


def test_a_plan_estimates_simulates_and_exports(llama, mixed, tmp_path):
    plan = hetplan.load_plan(llama, mixed, "tp=2,pp=2,mbs=1,gbs=32,zero=1,sp=on", seq_len=4096)
    est = plan.estimate()
    assert est.fits and est.iteration_time_s > 0 and 0 < est.mfu < 1
    assert est.stages[0].tp == 2 and len(est.per_gpu) == 16
    sim = plan.simulate()
    assert abs(sim.iteration_time_s / est.iteration_time_s - 1) < 0.05
    assert sim._repr_svg_().startswith("<svg")
    assert "<table>" in plan._repr_html_() and "<table>" in est._repr_html_()
    files = plan.export("megatron", tmp_path / "job")
    assert "megatron_args.json" in files
    args = json.loads((tmp_path / "job" / "megatron_args.json").read_text())
    assert args[args.index("--tensor-model-parallel-size") + 1] == "2"
    assert (tmp_path / "job" / "launch.sh").stat().st_mode & 0o111
    with pytest.raises(hetplan.HetplanError) as e:
        plan.export("jax")
    assert "megatron" in e.value.hint


def test_plan_searches_like_the_command_line(llama, mixed):
    # A node limit keeps the answer deterministic on any machine.
    r = hetplan.plan(llama, mixed, gbs=64, seq_len=4096, max_nodes=20_000, time_limit=None)
    assert r.estimate.fits and r.plan.estimate().iteration_time_s == pytest.approx(
        r.estimate.iteration_time_s
    )
    assert r.stop_reason and r.explored > 0 and r.notes
    assert {e.engine for e in r.per_engine} == {"megatron", "deepspeed", "torchtitan", "fsdp"}
    again = hetplan.plan(llama, mixed, gbs=64, seq_len=4096, max_nodes=20_000, time_limit=None)
    assert again.plan.to_json() == r.plan.to_json()
    m = hetplan.plan(llama, mixed, gbs=64, seq_len=4096, algo="megatron", engine="megatron", time_limit=5)
    assert m.plan.to_dict()["engine"] == "megatron"
    assert "<table>" in r._repr_html_()


def test_plan_takes_how_much_pytorch_code_runs_compiled(llama, mixed):
    kw = dict(gbs=64, seq_len=4096, algo="dp", engine="fsdp", time_limit=5)
    on = hetplan.plan(llama, mixed, **kw)
    off = hetplan.plan(llama, mixed, compile="off", **kw)
    assert "compile" not in on.plan.to_dict() and off.plan.to_dict()["compile"] == "off"
    assert off.estimate.iteration_time_s > on.estimate.iteration_time_s
    rows = hetplan.compare(llama, mixed, gbs=64, seq_len=4096, algos=["dp"], engine="fsdp",
                           time_limit=5, compile="off")
    assert rows[0].to_dict()["estimate_s"] == pytest.approx(off.estimate.iteration_time_s)
    with pytest.raises(hetplan.HetplanError) as e:
        hetplan.plan(llama, mixed, gbs=64, engine="megatron", compile="off")
    assert "torchtitan" in e.value.hint
    with pytest.raises(hetplan.HetplanError) as e:
        hetplan.plan(llama, mixed, gbs=64, engine="fsdp", compile="maybe")
    assert "blocks" in e.value.hint


def test_the_search_releases_the_gil(llama, mixed):
    # Two searches on two threads finish; a Python thread keeps running beside them.
    ticks = []
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(1)
            stop.wait(0.001)

    t = threading.Thread(target=tick)
    t.start()
    results = []
    workers = [
        threading.Thread(
            target=lambda: results.append(
                hetplan.plan(llama, mixed, gbs=64, seq_len=4096, max_nodes=5_000, time_limit=None)
            )
        )
        for _ in range(2)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    stop.set()
    t.join()
    assert len(results) == 2 and len(ticks) > 10


def test_compare_ranks_the_planners_against_the_bound():
    m = hetplan.model("gpt3-1.3b")
    c = hetplan.cluster("1x4xa100-80gb+1x4xv100-32gb@100Gbps")
    rows = hetplan.compare(m, c, gbs=64, algos=["megatron", "dp", "metis", "nosuch"], time_limit=5)
    assert [r.algo for r in rows][-1] == "nosuch" and rows[-1].error
    answered = [r for r in rows if r.error is None]
    assert len(answered) >= 2
    sims = [r.simulate_s for r in answered]
    assert sims == sorted(sims)
    for r in answered:
        assert r.estimate_s >= rows.bound_s * (1 - 1e-9) and 0 <= r.gap < 1
        assert r.plan.estimate().iteration_time_s == pytest.approx(r.estimate_s)
    assert "<table>" in rows._repr_html_() and "lower bound" in rows._repr_html_()


def test_records_copy_and_pickle(llama, mixed):
    import copy
    import pickle

    est = hetplan.load_plan(llama, mixed, "tp=2,pp=2,mbs=1,gbs=32,sp=on", seq_len=4096).estimate()
    assert copy.deepcopy(est).iteration_time_s == est.iteration_time_s
    assert pickle.loads(pickle.dumps(est)).to_dict() == est.to_dict()
    with pytest.raises(AttributeError, match="no field"):
        est.no_such_field
