"""Importer for profiler traces: `*.xplane.pb` files and TensorBoard/xprof log folders.

A log folder (`LOGDIR/plugins/profile/<session>/<host>.xplane.pb`, one file per host)
is imported whole: every host's file is read on its own, so a corrupt one is refused
by name (and `tpuscope import` exits non-zero) while the others still become the
run's trace_events, device_steps and xprof tables. The files are kept in the run
folder under `trace/`, laid out as xprof and TensorBoard expect.
"""

from __future__ import annotations

from pathlib import Path

from tpuscope.ingest import traces as trace_ingest
from tpuscope.ingest.registry import Imported, Importer, register
from tpuscope.store import layout


def _kept_as(path: Path) -> str:
    """Where a trace file is kept in the run: trace/imported/plugins/profile/<session>/<file>."""
    session = (
        path.parent.name
        if path.parent.parent.name == "profile"
        else path.name.removesuffix(".xplane.pb")
    )
    return f"trace/imported/plugins/profile/{session}/{path.name}"


def load(path: Path) -> Imported:
    files = layout.xplane_files(path)
    if not files:
        raise ValueError("no *.xplane.pb file in it")
    traces = trace_ingest.load_traces(files)
    if not traces.files:
        raise ValueError(
            "; ".join(
                f"{r['path']}: {r['reason']}" if path.is_dir() else r["reason"]
                for r in traces.refused
            )
        )
    evidence = Imported(meta={"backend": "trace", **traces.meta})
    for name, tables in traces.tables.items():
        evidence.tables[name] = tables
    evidence.refused = list(traces.refused)
    evidence.files = {_kept_as(Path(f)): Path(f) for f in traces.files}
    evidence.read = list(files)
    evidence.summary = "; ".join(traces.summary)
    return evidence


def sniff(path: Path, head: bytes) -> bool:
    if path.is_file():
        return path.name.endswith(".xplane.pb")
    return path.is_dir() and next(iter(path.rglob("*.xplane.pb")), None) is not None


IMPORTER = register(
    Importer(
        name="xplane",
        description="profiler trace (*.xplane.pb from jax, torch_xla, TorchTPU or TensorFlow; "
        "or a TensorBoard/xprof log folder of them)",
        sniff=sniff,
        load=load,
    )
)
