"""`--script file.py:factory`: benchmark the user's own model.

The contract (docs/benchmarks.md):

    def make_step(device):
        model = MyModel().to(device)
        opt = torch.optim.AdamW(model.parameters())
        def step(x, y):                     # one training (or inference) step
            opt.zero_grad(); loss = loss_fn(model(x), y); loss.backward(); opt.step()
            return loss                     # keep it on the device: no .item()
        x, y = ...on device...
        return step, (x, y)                 # or step, inputs, {"samples": 32, "tokens": 4096}

`inputs` is one tuple of positional args used at every step, a list of such
tuples (cycled), or a callable `i -> tuple` for step i. The optional dict gives
samples and tokens per step for throughput. The factory is called once, after the
mode is set, with the backend's device (a torch.device, or a jax.Device for JAX).

The harness checks the reference without importing the file (the parent process
must not import torch); the worker imports it.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tpuscope.bench.models import Workload


class ScriptError(Exception):
    """A --script reference that cannot be used; the message names the file and factory."""


def parse_ref(ref: str) -> tuple[Path, str]:
    """'path/to/file.py:factory' -> (path, factory), checked against the file's source."""
    path_text, sep, factory = ref.rpartition(":")
    if not sep or not path_text or not factory:
        raise ScriptError(f"--script must look like file.py:factory, not {ref!r}")
    path = Path(path_text)
    if not path.is_file():
        raise ScriptError(f"--script file not found: {path}")
    if not factory.isidentifier():
        raise ScriptError(f"--script factory {factory!r} is not a Python name")
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except (SyntaxError, UnicodeDecodeError, OSError) as exc:
        raise ScriptError(f"--script file {path} cannot be parsed: {exc}") from exc
    if factory not in _top_level_names(tree):
        raise ScriptError(f"--script file {path} defines no top-level {factory!r}")
    return path.resolve(), factory


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def load_factory(ref: str) -> Callable[..., Any]:
    """Import the user's file (as module `__tpuscope_bench_script__`) and return the factory."""
    path, factory = parse_ref(ref)
    spec = importlib.util.spec_from_file_location("__tpuscope_bench_script__", path)
    if spec is None or spec.loader is None:
        raise ScriptError(f"--script file {path} cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    fn = getattr(module, factory, None)
    if not callable(fn):
        raise ScriptError(f"--script {path}:{factory} is not callable")
    return fn


def workload_from_factory(ref: str, device: Any) -> Workload:
    """Call the factory and check what it returned against the contract."""
    result = load_factory(ref)(device)
    if not isinstance(result, tuple) or len(result) not in (2, 3):
        raise ScriptError(
            f"--script {ref} must return (step, inputs) or (step, inputs, info), "
            f"not {type(result).__name__}"
        )
    step, inputs, info = (*result, {}) if len(result) == 2 else result
    if not callable(step):
        raise ScriptError(f"--script {ref}: the step it returned is not callable")
    if not isinstance(info, dict):
        raise ScriptError(
            f"--script {ref}: the third value must be a dict such as {{'samples': 32}}"
        )
    samples, tokens = info.get("samples"), info.get("tokens")
    return Workload(
        step=step,
        inputs=_inputs_of(ref, inputs),
        samples=lambda i: int(samples or 0),
        tokens=(lambda i: int(tokens)) if tokens else None,
        info={k: v for k, v in info.items() if isinstance(v, (int, float, str, bool))},
    )


def _inputs_of(ref: str, inputs: Any) -> Callable[[int], tuple[Any, ...]]:
    if callable(inputs):
        return lambda i: tuple(inputs(i))
    if isinstance(inputs, tuple):
        return lambda i: inputs
    if isinstance(inputs, list) and inputs and all(isinstance(x, tuple) for x in inputs):
        return lambda i: inputs[i % len(inputs)]
    raise ScriptError(
        f"--script {ref}: inputs must be a tuple of args, a list of tuples "
        f"or a callable i -> tuple, not {type(inputs).__name__}"
    )
