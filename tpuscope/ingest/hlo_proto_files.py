"""Importer for HloProto files (`*.hlo_proto.pb`): the modules a profiler writes next to its
xplane (TensorBoard's profile plugin, JAX's profiler), one file per module, or a folder of them.

Each file is a serialized HloProto; its `hlo_module` is printed as HLO text by XLA's own
classes (jaxlib, as for the modules a trace's metadata plane carries: parse/hlo_proto.py)
and parsed like an optimized `--xla_dump_to` module. A file that does not parse is refused by
name while the others are imported.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tpuscope.ingest.registry import Imported, Importer, register
from tpuscope.parse import hlo_proto, hlo_rows
from tpuscope.parse.hlo import HloParseError, parse_modules

SUFFIX = ".hlo_proto.pb"
STAGE = "after_optimizations"  # what a profiler keeps: the compiled (optimized) module


def proto_files(path: Path) -> list[Path]:
    return [path] if path.is_file() else sorted(p for p in path.rglob(f"*{SUFFIX}") if p.is_file())


def _modules(path: Path) -> list[Any]:
    from jaxlib import _hlo

    module = hlo_proto._hlo_module_field(path.read_bytes())
    if not module:
        raise ValueError("no HLO module in it (not a serialized HloProto)")
    try:
        text = _hlo.HloModule.from_serialized_hlo_module_proto(module).to_string()
    except (RuntimeError, ValueError) as exc:
        raise ValueError(f"not an HLO module: {str(exc)[:200]}") from None
    return parse_modules(text, source=str(path), stage=STAGE)


def load(path: Path) -> Imported:
    if not hlo_proto.available():
        raise ValueError("reading HloProto files needs jaxlib (pip install jax)")
    modules, refused = [], []
    for file in proto_files(path):
        try:
            modules += _modules(file)
        except (OSError, ValueError, HloParseError) as exc:
            refused.append({"path": str(file), "reason": str(exc)})
    if not modules:
        raise ValueError("; ".join(r["reason"] for r in refused) or "no HLO module in it")
    evidence = Imported(meta={"backend": "hlo"})
    for table, rows in hlo_rows.rows(modules).items():
        evidence.add(table, rows)
    evidence.refused = refused if path.is_dir() else []
    dots = sum(r["dots"] + r["convolutions"] for r in evidence.rows["hlo_modules"])
    evidence.summary = f"HloProto: {len(modules)} module(s), {dots} dot/convolution(s)"
    evidence.read = proto_files(path)
    return evidence


def sniff(path: Path, head: bytes) -> bool:
    """A *.hlo_proto.pb file, or a folder of them without an xplane (a trace's folder: the
    trace's own metadata plane carries its modules, and the protos beside it are named skipped)."""
    if path.is_file():
        return path.name.endswith(SUFFIX)
    return (
        path.is_dir()
        and next(iter(path.rglob(f"*{SUFFIX}")), None) is not None
        and next(iter(path.rglob("*.xplane.pb")), None) is None
    )


IMPORTER = register(
    Importer(
        name="hlo_proto",
        description="HloProto files (*.hlo_proto.pb a profiler keeps beside its trace, or a folder of them)",
        sniff=sniff,
        load=load,
    )
)
