"""Steps of loops whose iteration is one call of a library function that runs a device loop itself.

transformers' `generate()` runs the model once per new token and reads values on the host to
decide when to stop, and never passes `torch_xla.sync` (truth: MarkStep 0 in every request,
tests/corpus/corpus_hf_generate.py, corpus_hf_generate_static.py). A loop over requests had no
step boundary at all and was one step, so recurrence between requests and per-request rates
were invisible. No cheap Python hook fires inside such a call (measured: not one torch_xla
Python function runs during a `generate()` on the XLA device; its reads and executions happen
in C++), so the iteration is seen where it is made: the user's loop calls the library
function once per iteration, and the return of the outermost such call is a step boundary
candidate, as a `torch.compile`'d call's is (collect/xla/dynamo.py); the program's first
boundary after it (a sync after the call, which runs the outputs' pending graph) gives way, so
a call is one step whether or not the program syncs after it. The step rule still
decides (collect/xla/steps.py): a call that launched nothing ends no step, and a call a
library makes inside a framework's training iteration (generation in a trainer's eval) ends
none while the optimizer has not stepped since the last step.

The functions are patched when their module is imported (a post-import hook on
`sys.meta_path` that answers only for the modules named here), or at once if it already
was; the wrapper only counts its depth and, at the outermost return, calls the collector.
Uninstalled with the collector; a call running then still returns through the original.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec, SourceFileLoader
from types import ModuleType
from typing import Any

# module -> (class, method): a call of it runs a whole loop of device work (one user iteration)
ENTRY_POINTS: dict[str, tuple[str, str]] = {
    "transformers.generation.utils": ("GenerationMixin", "generate"),
}


class _PostImport(MetaPathFinder):
    """Finds nothing itself: for a wanted module, lets the other finders find it and patches the
    module once its loader ran it."""

    def __init__(self, on_import: Callable[[str, ModuleType], None]) -> None:
        self._on_import = on_import

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> ModuleSpec | None:
        if fullname not in ENTRY_POINTS:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if not isinstance(
            loader, SourceFileLoader
        ):  # only a loader made for this one spec is wrapped
            return spec
        run, on_import = loader.exec_module, self._on_import

        def exec_module(module: ModuleType) -> None:
            run(module)
            on_import(fullname, module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


class LibraryLoops:
    """Calls `on_return()` when an outermost call of an ENTRY_POINTS function returns."""

    def __init__(self, on_return: Callable[[], None]) -> None:
        self._on_return = on_return
        self._depth = 0
        self._patched: list[tuple[type, str, Any]] = []
        self._finder: _PostImport | None = None
        self.active = False

    def install(self) -> LibraryLoops:
        self.active = True
        for name in ENTRY_POINTS:
            module = sys.modules.get(name)
            if module is not None:
                self._patch(name, module)
        self._finder = _PostImport(self._patch)
        sys.meta_path.insert(0, self._finder)
        return self

    def _patch(self, name: str, module: ModuleType) -> None:
        class_name, attr = ENTRY_POINTS[name]
        owner = getattr(module, class_name, None)
        original = owner.__dict__.get(attr) if isinstance(owner, type) else None
        if not self.active or owner is None or not callable(original):
            return
        loops = self

        @functools.wraps(original)
        def call(*args: Any, **kwargs: Any) -> Any:
            loops._depth += 1
            try:
                return original(*args, **kwargs)
            finally:
                loops._depth -= 1
                if loops._depth == 0 and loops.active:
                    with contextlib.suppress(
                        Exception
                    ):  # tpuscope must never break the user's call
                        loops._on_return()

        setattr(owner, attr, call)
        self._patched.append((owner, attr, original))

    def uninstall(self) -> None:
        self.active = False
        if self._finder is not None:
            with contextlib.suppress(ValueError):
                sys.meta_path.remove(self._finder)
            self._finder = None
        for owner, attr, original in reversed(self._patched):
            setattr(owner, attr, original)
        self._patched.clear()
