"""Put on PYTHONPATH by `tpuscope run`: starts collection in every Python process of the run.

Being a sitecustomize means spawned workers (torch_xla.launch, multiprocessing
'spawn') are profiled too, with no change to the program. A sitecustomize of the
user's own, later on sys.path, is still run.
"""

import importlib.machinery
import importlib.util
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))


def _use_launchers_tpuscope() -> None:
    """Collect with the launcher's own tpuscope, not another copy the program's interpreter
    may have installed: the run is written in the launcher's format. Only the package itself
    is taken from there (putting its folder on sys.path could shadow the program's modules)."""
    source = os.environ.get("TPUSCOPE_SRC")
    if not source or "tpuscope" in sys.modules:
        return
    spec = importlib.machinery.PathFinder.find_spec("tpuscope", [source])
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["tpuscope"] = module
    try:
        spec.loader.exec_module(module)
    except Exception:
        del sys.modules["tpuscope"]
        raise


def _start() -> None:
    try:
        _use_launchers_tpuscope()
        from tpuscope.collect.autostart import start_from_env
    except ImportError:  # the program's interpreter lacks tpuscope's dependencies
        print(
            "tpuscope: profiling disabled in this process: tpuscope cannot be imported here",
            file=sys.stderr,
        )
        return
    try:
        start_from_env()
    except Exception as exc:  # never stop the user's program because profiling failed
        print(f"tpuscope: profiling disabled in this process: {exc}", file=sys.stderr)


def _chain_user_sitecustomize() -> None:
    others = [p for p in sys.path if os.path.abspath(p or ".") != _here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


if os.environ.get("TPUSCOPE_RUN_DIR"):
    _start()
_chain_user_sitecustomize()
