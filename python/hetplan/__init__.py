"""hetplan: plans, estimates and simulates LLM training on heterogeneous GPU clusters.

The API reads like the command line::

    import hetplan
    model = hetplan.model("llama3-8b")            # catalog name, config.json path, or a dict
    cluster = hetplan.cluster("2x8xa100-80gb+2x8xv100-32gb@100Gbps")
    result = hetplan.plan(model, cluster, gbs=256, time_limit=10)
    result.plan.estimate().iteration_time_s
    result.plan.simulate()                        # a Gantt chart in Jupyter
    result.plan.export("megatron", "job/")

Results are `Record`s: the CLI's JSON, with attribute access. Bad input raises
`HetplanError` (a `ValueError`) with `line`, `column`, `field` and `hint` where known.
"""

from __future__ import annotations

import html
import json
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

from . import _hetplan
from ._hetplan import HetplanError

__all__ = [
    "HetplanError",
    "Model",
    "Cluster",
    "Plan",
    "Record",
    "PlanResult",
    "Simulation",
    "model",
    "cluster",
    "load_plan",
    "plan",
    "compare",
    "Comparison",
    "catalogs",
]


class Record:
    """A result: the fields of the CLI's JSON as attributes (`record.iteration_time_s`), nested
    objects as records, lists as lists. `to_dict()` gives the JSON value back."""

    def __init__(self, data: Dict[str, Any]):
        self._data = data

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # not a field (and `_data` before it is set: copy, pickle)
            raise AttributeError(name)
        try:
            return _wrap(self._data[name])
        except KeyError:
            raise AttributeError(
                f"no field {name!r}; fields: {', '.join(sorted(self._data))}"
            ) from None

    def __getitem__(self, name: str) -> Any:
        return _wrap(self._data[name])

    def __contains__(self, name: str) -> bool:
        return name in self._data

    def __dir__(self) -> List[str]:
        return sorted(set(self._data) | set(super().__dir__()))

    def keys(self):
        return self._data.keys()

    def to_dict(self) -> Dict[str, Any]:
        return self._data

    def to_json(self) -> str:
        return json.dumps(self._data)

    def __repr__(self) -> str:
        keys = ", ".join(list(self._data)[:8])
        more = ", ..." if len(self._data) > 8 else ""
        return f"Record({keys}{more})"

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><th style='text-align:left'>{html.escape(k)}</th>"
            f"<td style='text-align:left'>{html.escape(_short(v))}</td></tr>"
            for k, v in self._data.items()
            if not isinstance(v, (list, dict))
        )
        return f"<table>{rows}</table>"


def _wrap(v: Any) -> Any:
    if isinstance(v, dict):
        return Record(v)
    if isinstance(v, list):
        return [_wrap(x) for x in v]
    return v


def _short(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


class Model:
    """A model hetplan can plan: see `hetplan.model`."""

    def __init__(self, handle: "_hetplan.ModelHandle"):
        self._h = handle

    @property
    def name(self) -> str:
        return self._h.name

    @property
    def parameters(self) -> float:
        return self._h.parameters

    @property
    def layers(self) -> int:
        return self._h.layers

    @property
    def default_seq_len(self) -> int:
        return self._h.default_seq_len

    def __repr__(self) -> str:
        return (
            f"Model({self.name!r}: {self.parameters / 1e9:.2f}B parameters, "
            f"{self.layers} layers, seq {self.default_seq_len})"
        )


class Cluster:
    """A cluster: see `hetplan.cluster`."""

    def __init__(self, handle: "_hetplan.ClusterHandle"):
        self._h = handle

    @property
    def name(self) -> str:
        return self._h.name

    @property
    def gpus(self) -> int:
        return self._h.gpus

    def __repr__(self) -> str:
        return f"Cluster({self.name!r}: {self.gpus} GPUs)"


def model(spec: Union[str, os.PathLike, Dict[str, Any]], name: Optional[str] = None) -> Model:
    """A model from the catalog (`"llama3-8b"`), a HuggingFace `config.json` (a path, a model
    directory, or the config as a dict), or a layer list file (TOML, or JSON with `layer`)."""
    if isinstance(spec, dict):
        text = json.dumps(spec)
        return Model(_hetplan.load_model(name or spec.get("model_type", "model"), text))
    path = Path(spec)
    if isinstance(spec, os.PathLike) or path.exists():
        if path.is_dir():
            path = path / "config.json"
        return Model(_hetplan.load_model(name or path.stem, path.read_text()))
    return Model(_hetplan.load_model(str(spec)))


def cluster(spec: Union[str, os.PathLike]) -> Cluster:
    """A built-in cluster (`"dgx-a100-80gb"`), node groups (`"2x8xa100-80gb+4x8xv100-32gb@100Gbps"`),
    cluster TOML text, or a path to a cluster TOML file."""
    if isinstance(spec, os.PathLike) or (isinstance(spec, str) and spec.endswith(".toml")):
        return Cluster(_hetplan.load_cluster("file", Path(spec).read_text()))
    if "\n" in spec or "[[" in spec:
        return Cluster(_hetplan.load_cluster("text", spec))
    return Cluster(_hetplan.load_cluster(spec))


class Simulation(Record):
    """A simulated iteration; in Jupyter it draws itself as a Gantt chart (`svg`)."""

    def __init__(self, data: Dict[str, Any], svg: str):
        super().__init__(data)
        self.svg = svg

    def _repr_svg_(self) -> str:
        return self.svg


class Plan:
    """A training plan for a model on a cluster: stages, devices, parallelism, batches and
    memory options. `estimate()`, `simulate()`, `to_json()`, `export(engine, out)`."""

    def __init__(self, model: Model, cluster: Cluster, plan_json: str, seq_len: Optional[int] = None):
        self.model = model
        self.cluster = cluster
        self._json = plan_json
        self.seq_len = seq_len or model.default_seq_len

    def to_json(self) -> str:
        return self._json

    def to_dict(self) -> Dict[str, Any]:
        return json.loads(self._json)

    @property
    def stages(self) -> List[Record]:
        return _wrap(self.to_dict()["stages"])

    def estimate(self, profile: Union[None, str, os.PathLike, Dict[str, Any]] = None) -> Record:
        """Iteration time, throughput, MFU and per-GPU memory by hetplan's cost model; with a
        profile database (a dict such as `hetplan.profile.profile` returns, its JSON text, or
        a path), its measured layer times where it has them."""
        text = None
        if isinstance(profile, dict):
            text = json.dumps(profile)
        elif isinstance(profile, os.PathLike) or (isinstance(profile, str) and not profile.lstrip().startswith("{")):
            text = Path(profile).read_text()
        elif profile is not None:
            text = profile
        return Record(
            json.loads(_hetplan.estimate_plan(self.model._h, self.cluster._h, self._json, self.seq_len, text))
        )

    def simulate(self) -> Simulation:
        """The iteration executed event by event (compute, every transfer over its links)."""
        data, svg = _hetplan.simulate_plan(self.model._h, self.cluster._h, self._json, self.seq_len)
        return Simulation(json.loads(data), svg)

    def export(self, engine: str, out: Optional[Union[str, os.PathLike]] = None) -> Dict[str, str]:
        """The files that run the plan on `engine` (megatron, deepspeed, torchtitan, sailor,
        mist, flashflex), written under `out` when given; returns {path: contents}."""
        files = _hetplan.export_plan(self.model._h, self.cluster._h, self._json, self.seq_len, engine)
        if out is not None:
            root = Path(out)
            for path, contents, executable in files:
                p = root / path
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_text(contents)
                if executable:
                    p.chmod(0o755)
        return {path: contents for path, contents, _ in files}

    def __repr__(self) -> str:
        d = self.to_dict()
        return (
            f"Plan({len(d['stages'])} stages, global batch {d['global_batch']}, "
            f"{d['micro_batches']} micro-batches)"
        )

    def _repr_html_(self) -> str:
        d = self.to_dict()
        head = "".join(
            f"<th>{h}</th>"
            for h in ["stage", "layers", "GPUs", "dp", "tp", "micro-batches", "ZeRO", "recompute"]
        )
        rows = []
        for i, s in enumerate(d["stages"]):
            devs = s["devices"]
            gpus = f"n{devs[0]['node']}g{devs[0]['local']}..n{devs[-1]['node']}g{devs[-1]['local']}"
            cells = [
                i,
                f"{s['layers']['start']}-{s['layers']['end'] - 1}",
                gpus,
                s["dp"],
                s["tp"],
                ",".join(str(b) for b in s["micro_batch_sizes"]),
                s.get("zero", 0),
                s.get("recompute", "none"),
            ]
            rows.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
        return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


class PlanResult(Record):
    """What a planner found: `plan` (a `Plan`), `estimate`, `notes`, `stop_reason`,
    `explored`, `ranked` (next best plans) and, for hetplan's planner, `per_engine`."""

    def __init__(self, data: Dict[str, Any], model: Model, cluster: Cluster, seq_len: int):
        super().__init__(data)
        self._plan = Plan(model, cluster, json.dumps(data["plan"]), seq_len)

    @property
    def plan(self) -> Plan:
        return self._plan

    def _repr_html_(self) -> str:
        est = self._data["estimate"]
        notes = "".join(f"<li>{html.escape(n)}</li>" for n in self._data.get("notes", []))
        return (
            f"<p>{est['iteration_time_s']:.3f} s per iteration, MFU {100 * est['mfu']:.1f}%, "
            f"{'fits' if est['fits'] else 'does not fit'}; search stopped: "
            f"{html.escape(str(self._data['stop_reason']))}</p>"
            + self._plan._repr_html_()
            + (f"<ul>{notes}</ul>" if notes else "")
        )


def load_plan(model: Model, cluster: Cluster, plan: Union[str, os.PathLike], seq_len: Optional[int] = None) -> Plan:
    """A plan from the inline form (`"tp=2,pp=2,mbs=1,gbs=64"`), plan JSON text, or a path to a
    plan file, checked against the model and the cluster."""
    text = str(plan)
    if isinstance(plan, os.PathLike) or (not text.lstrip().startswith("{") and "=" not in text):
        text = Path(plan).read_text()
    checked = _hetplan.check_plan(model._h, cluster._h, text)
    return Plan(model, cluster, checked, seq_len)


def plan(
    model: Model,
    cluster: Cluster,
    gbs: int,
    *,
    seq_len: Optional[int] = None,
    algo: str = "hetplan",
    engine: str = "any",
    time_limit: Optional[float] = 30.0,
    max_nodes: Optional[int] = None,
    precision: str = "bf16",
    compile: str = "on",
) -> PlanResult:
    """Finds a plan, as `hetplan plan` does: `algo` one of `catalogs()["planners"]`, `engine`
    any/megatron/deepspeed/torchtitan/fsdp, `time_limit` in seconds (None: none, then at most
    10⁷ candidates unless `max_nodes` says otherwise), `compile` how much of PyTorch's model
    code torchtitan or fsdp run under torch.compile (on, blocks: the loss eager, off). The
    search runs without the GIL."""
    seq = seq_len or model.default_seq_len
    out = _hetplan.search_plan(
        model._h, cluster._h, gbs, seq, algo, engine, time_limit, max_nodes, precision, compile
    )
    return PlanResult(json.loads(out), model, cluster, seq)


class Comparison(list):
    """`compare`'s rows, best first: each a `Record` with `algo`, `plan` (a `Plan`, or None),
    `estimate_s`, `simulate_s`, `gap` (above the certified lower bound), `fits`,
    `stop_reason`, `search_s` and `error`; an HTML table in Jupyter."""

    def __init__(self, rows: List[Record], bound_s: float):
        super().__init__(rows)
        self.bound_s = bound_s

    def _repr_html_(self) -> str:
        head = "".join(
            f"<th>{h}</th>"
            for h in ["planner", "estimate (s)", "simulate (s)", "gap", "fits", "search (s)", "stopped / why not"]
        )
        rows = []
        for r in self:
            d = r.to_dict()
            fmt = lambda v, f="{:.3f}": "" if v is None else f.format(v)  # noqa: E731
            cells = [
                d["algo"],
                fmt(d["estimate_s"]),
                fmt(d["simulate_s"]),
                fmt(d["gap"], "{:.1%}"),
                "" if d["fits"] is None else ("yes" if d["fits"] else "no"),
                fmt(d["search_s"], "{:.2f}"),
                d["stop_reason"] or d["error"] or "",
            ]
            rows.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
        return (
            f"<p>lower bound {self.bound_s:.3f} s (compute alone, every GPU busy)</p>"
            f"<table><tr>{head}</tr>{''.join(rows)}</table>"
        )


def compare(
    model: Model,
    cluster: Cluster,
    gbs: int,
    *,
    seq_len: Optional[int] = None,
    algos: Optional[List[str]] = None,
    engine: str = "any",
    time_limit: Optional[float] = 10.0,
    max_nodes: Optional[int] = None,
    precision: str = "bf16",
    compile: str = "on",
) -> Comparison:
    """Every planner (or `algos`) on one problem, as `hetplan compare`: each answer estimated,
    simulated and set against the certified lower bound; planners without an answer say why.
    `compile` as `plan`'s."""
    import time as _time

    seq = seq_len or model.default_seq_len
    bound = _hetplan.lower_bound(model._h, cluster._h, gbs, seq, engine, precision)
    rows = []
    for algo in algos or catalogs()["planners"]:
        t0 = _time.perf_counter()
        try:
            r = plan(
                model, cluster, gbs, seq_len=seq, algo=algo, engine=engine,
                time_limit=time_limit, max_nodes=max_nodes, precision=precision,
                compile=compile,
            )
        except HetplanError as e:
            rows.append(Record({
                "algo": algo, "plan": None, "estimate_s": None, "simulate_s": None, "gap": None,
                "fits": None, "stop_reason": None, "search_s": _time.perf_counter() - t0,
                "error": e.message,
            }))
            continue
        secs = _time.perf_counter() - t0
        est = r.estimate.iteration_time_s
        try:
            simulated = r.plan.simulate().iteration_time_s
        except HetplanError:  # a plan too large to simulate keeps its estimate
            simulated = None
        rows.append(_PlanRow({
            "algo": algo, "estimate_s": est, "simulate_s": simulated,
            "gap": max(0.0, (est - bound) / est) if est > 0 else 0.0, "fits": r.estimate.fits,
            "stop_reason": r.stop_reason, "search_s": secs, "error": None,
        }, r.plan))
    # Best first by the simulation (the judge), the estimate where there is none; no answer last.
    key = lambda r: (r["estimate_s"] is None, r["simulate_s"] or r["estimate_s"] or 0.0)  # noqa: E731
    return Comparison(sorted(rows, key=key), bound)


class _PlanRow(Record):
    def __init__(self, data: Dict[str, Any], plan_: "Plan"):
        super().__init__({**data, "plan": json.loads(plan_.to_json())})
        self._plan = plan_

    @property
    def plan(self) -> "Plan":
        return self._plan


def catalogs() -> Dict[str, List[str]]:
    """The built-in model and cluster names and the planners."""
    return dict(_hetplan.catalogs())
