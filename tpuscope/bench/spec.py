"""What one benchmark process is asked to do, and the names every bench module agrees on.

The harness and the worker run in different processes; a WorkerSpec crosses the
boundary as JSON on the worker's command line, so it holds only plain values.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

BACKENDS = ("torch_xla", "torch_tpu", "jax")
MODES = ("strict", "fused", "debug", "compiled", "dynamo")
BASELINE_MODE = "strict"


@dataclass
class WorkerSpec:
    """One (backend, mode, model, repeat) measurement: run in a fresh process."""

    backend: str
    mode: str
    model: str
    size: str = "small"
    steps: int = 20
    warmup: int = 3
    repeat: int = 0
    seed: int = 0
    store: str = "./tpuscope-runs"
    group: str = ""
    script: str | None = None  # "path/to/file.py:factory" for the user's own model
    extra_meta: dict[str, Any] = field(default_factory=dict)

    @property
    def run_name(self) -> str:
        return f"bench-{self.model}-{self.backend}-{self.mode}"

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> WorkerSpec:
        data = json.loads(text)
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})
