"""The HLO modules a profiler trace carries: `/host:metadata` plane -> hlo_modules / hlo_ops rows.

JAX and TPU runtimes put each executed module's HloProto (optimized, scheduled, with TPU
layouts and backend configs) on the metadata plane, one event metadata per module named
"jit_f(12190760917235803885)" with a bytes stat "Hlo Proto". XLA's own classes read it:
jaxlib's `HloModule.from_serialized_hlo_module_proto(...).to_string()` prints the module
as HLO text, which `collect.hlo` parses like a `--xla_dump_to` file, so an imported TPU
trace is analysed like a `--deep` CPU run (stage `tpu_trace`). Only the metadata plane is
decoded (the planes are framed on the wire and skipped by length, events never parsed).
Without jaxlib (a torch_xla-only install) the protos are left unread and the caller says so.
"""

from __future__ import annotations

import mmap
from pathlib import Path

from tpuscope.parse.hlo import HloModule, HloParseError, parse_modules
from tpuscope.parse.xplane_meta import METADATA_PLANE
from tpuscope.parse.xplane_proto import WireError, XPlane, fields, text

STAGE = "tpu_trace"
_PROTO_STAT = "Hlo Proto"


def available() -> bool:
    try:
        from jaxlib import _hlo  # noqa: F401
    except Exception:
        return False
    return True


def metadata_plane(data: bytes | mmap.mmap) -> bytes | None:
    """The serialized `/host:metadata` XPlane of an XSpace, found by its name field."""
    for field_no, wire, _, start, end in fields(data, 0, len(data)):
        if field_no != 1 or wire != 2:
            continue
        for sub_no, sub_wire, _, s, e in fields(data, start, end):
            if sub_no == 2 and sub_wire == 2:
                if data[s:e].decode("utf-8", "replace") == METADATA_PLANE:
                    return data[start:end]
                break
    return None


def module_protos(plane_bytes: bytes) -> list[tuple[str, bytes]]:
    """(event metadata name, serialized HloModuleProto) per module on the metadata plane."""
    plane = XPlane()
    plane.ParseFromString(plane_bytes)
    names = {k: text(v.name) for k, v in plane.stat_metadata.items()}
    found = []
    for meta in plane.event_metadata.values():
        for stat in meta.stats:
            if names.get(stat.metadata_id) == _PROTO_STAT and stat.bytes_value:
                module = _hlo_module_field(stat.bytes_value)
                if module:
                    found.append((text(meta.name), module))
    return found


def _hlo_module_field(hlo_proto: bytes) -> bytes | None:
    """HloProto.hlo_module (field 1) of a serialized HloProto."""
    for field_no, wire, _, start, end in fields(hlo_proto, 0, len(hlo_proto)):
        if field_no == 1 and wire == 2:
            return hlo_proto[start:end]
    return None


def trace_modules(path: str | Path, stage: str = STAGE) -> tuple[list[HloModule], list[str]]:
    """(the parsed modules, problems worth a summary line) of one xplane file."""
    try:  # mapped, not read: the import path stays under 3x the file size (docs/device_view.md)
        with (
            open(path, "rb") as handle,
            mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data,
        ):
            plane = metadata_plane(data)
    except (OSError, ValueError, WireError) as exc:
        return [], [f"HLO protos not read: {exc}"]
    if plane is None:
        return [], []
    protos = module_protos(plane)
    if protos and not available():
        return [], [
            f"{len(protos)} HLO proto(s) in the trace not read: jaxlib is not installed (pip install jax)"
        ]
    from jaxlib import _hlo

    modules, problems = [], []
    for name, proto in protos:
        try:
            hlo_text = _hlo.HloModule.from_serialized_hlo_module_proto(proto).to_string()
            modules += parse_modules(hlo_text, source=f"{path}:{name}", stage=stage)
        except (HloParseError, RuntimeError, ValueError) as exc:
            problems.append(f"HLO proto {name} not read: {str(exc)[:200]}")
    return modules, problems
