"""Type stubs of hetplan's Rust extension; the public API is in `hetplan/__init__.py`."""

from typing import Dict, List, Optional, Tuple

class HetplanError(ValueError):
    message: str
    line: Optional[int]
    column: Optional[int]
    field: Optional[str]
    hint: Optional[str]

class ModelHandle:
    @property
    def name(self) -> str: ...
    @property
    def parameters(self) -> float: ...
    @property
    def layers(self) -> int: ...
    @property
    def default_seq_len(self) -> int: ...
    @property
    def transformer(self) -> Optional[str]: ...
    @property
    def layer_kinds(self) -> List[str]: ...

class ClusterHandle:
    @property
    def name(self) -> str: ...
    @property
    def gpus(self) -> int: ...

def load_model(spec: str, text: Optional[str] = None) -> ModelHandle: ...
def load_cluster(spec: str, text: Optional[str] = None) -> ClusterHandle: ...
def check_plan(model: ModelHandle, cluster: ClusterHandle, plan: str) -> str: ...
def estimate_plan(
    model: ModelHandle, cluster: ClusterHandle, plan: str, seq_len: int, profile: Optional[str] = None
) -> str: ...
def simulate_plan(
    model: ModelHandle, cluster: ClusterHandle, plan: str, seq_len: int
) -> Tuple[str, str]: ...
def search_plan(
    model: ModelHandle,
    cluster: ClusterHandle,
    gbs: int,
    seq_len: int,
    algo: str,
    engine: str,
    time_limit: Optional[float] = None,
    max_nodes: Optional[int] = None,
    precision: str = "bf16",
    compile: str = "on",
) -> str: ...
def export_plan(
    model: ModelHandle, cluster: ClusterHandle, plan: str, seq_len: int, target: str
) -> List[Tuple[str, str, bool]]: ...
def catalogs() -> Dict[str, List[str]]: ...
def lower_bound(
    model: ModelHandle,
    cluster: ClusterHandle,
    gbs: int,
    seq_len: int,
    engine: str = "any",
    precision: str = "bf16",
) -> float: ...
