"""The user's line of each HLO instruction, from the Python stacks torch_xla stores in the module.

With XLA_IR_DEBUG/XLA_HLO_DEBUG, torch_xla puts only the innermost Python frame in an op's
text metadata (`source_file`/`source_line`), which for a torch.nn layer is torch's own
`linear.py:134`; but the serialized module (`--xla_dump_hlo_as_proto`, the `.hlo.pb` next
to each dumped `.txt`) also carries XLA's stack-frame index: every op's `stack_frame_id`
names a chain of frames up to `<module>`. Walking that chain gives the first frame outside
installed libraries (user_files), the standard library and tpuscope: the user's line that called the layer.

No Python class for HloProto ships with torch_xla or jaxlib (only C++ behind jaxlib's
bindings, which do not expose the frame index), so the few fields needed are read with
the wire reader of collect/xplane_proto. Field numbers are XLA's (xla/service/hlo.proto):
HloProto.hlo_module 1; HloModuleProto.computations 3, stack_frame_index 17;
HloComputationProto.instructions 2; HloInstructionProto.name 1, metadata 7;
OpMetadata.stack_frame_id 15; StackFrameIndexProto file_names 1, function_names 2,
file_locations 3 (file_name_id 1, function_name_id 2, line 3), stack_frames 4
(file_location_id 1, parent_frame_id 2); every id is 1-based, 0 meaning none.
"""

from __future__ import annotations

from pathlib import Path

from tpuscope.parse.pt_xla_debug import user_location
from tpuscope.parse.xplane_proto import WireError, fields, varint

MAX_DEPTH = 64


def _subs(buf: bytes, number: int) -> list[bytes]:
    return [buf[s:e] for f, w, _, s, e in fields(buf, 0, len(buf)) if f == number and w == 2]


def _ints(buf: bytes) -> dict[int, int]:
    return {f: varint(buf, s, e)[0] for f, w, _, s, e in fields(buf, 0, len(buf)) if w == 0}


class _Frames:
    """XLA's stack-frame index of one module."""

    def __init__(self, index: bytes) -> None:
        self.files = [b.decode(errors="replace") for b in _subs(index, 1)]
        self.functions = [b.decode(errors="replace") for b in _subs(index, 2)]
        self.locations = [_ints(b) for b in _subs(index, 3)]
        self.frames = [_ints(b) for b in _subs(index, 4)]

    def stack(self, frame_id: int) -> list[str]:
        """'function (file:line)' from the innermost frame outwards."""
        out: list[str] = []
        while 0 < frame_id <= len(self.frames) and len(out) < MAX_DEPTH:
            frame = self.frames[frame_id - 1]
            loc_id = frame.get(1, 0)
            if 0 < loc_id <= len(self.locations):
                loc = self.locations[loc_id - 1]
                file = self._name(self.files, loc.get(1, 0))
                function = self._name(self.functions, loc.get(2, 0))
                out.append(f"{function} ({file}:{loc.get(3, 0)})")
            frame_id = frame.get(2, 0)
        return out

    @staticmethod
    def _name(names: list[str], one_based: int) -> str:
        return names[one_based - 1] if 0 < one_based <= len(names) else "?"


def user_lines(module_proto: bytes) -> dict[str, tuple[str, int]]:
    """instruction name -> (file, line) of the user's frame, for ops whose stack is known."""
    [index] = _subs(module_proto, 17) or [b""]
    if not index:
        return {}
    frames, out = _Frames(index), {}
    for computation in _subs(module_proto, 3):
        for instruction in _subs(computation, 2):
            names, metadata = _subs(instruction, 1), _subs(instruction, 7)
            frame_id = _ints(metadata[0]).get(15, 0) if metadata else 0
            where = user_location(frames.stack(frame_id)) if frame_id and names else None
            if where:
                file, _, line = where.rpartition(":")
                out[names[0].decode(errors="replace")] = (file, int(line))
    return out


def dump_user_lines(text_dump: str | Path) -> dict[str, tuple[str, int]]:
    """The user lines of a dumped module, from the `.hlo.pb` beside its `.txt` ({} if none)."""
    proto = Path(str(text_dump).removesuffix(".txt") + ".hlo.pb")
    try:
        data = proto.read_bytes()
        [module] = _subs(data, 1) or [data]  # an HloProto wraps the module; a bare one is fine too
        return user_lines(module)
    except (OSError, ValueError, WireError):
        return {}
