"""The XSpace protobuf schema, declared here, and scalar protobuf wire-format helpers.

No installable package ships `xplane_pb2` without dragging in TensorFlow (or a
tuning library and its dependencies), so the seven messages are declared from
`tsl/profiler/protobuf/xplane.proto` with descriptor_pb2 and registered in a
*private* DescriptorPool: they can never collide with another copy of xplane.proto
(TensorFlow's, tune_jax's) in protobuf's default pool. String fields are declared
as `bytes`, so a name with invalid UTF-8 does not make upb reject the whole file
(jax's ProfileData does); names are decoded with errors="replace".
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto
_OPT, _REP = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
_I64, _U64, _DBL, _BYT, _MSG = (
    _F.TYPE_INT64,
    _F.TYPE_UINT64,
    _F.TYPE_DOUBLE,
    _F.TYPE_BYTES,
    _F.TYPE_MESSAGE,
)
_P = ".tensorflow.profiler."
U64_MASK = (1 << 64) - 1


class WireError(Exception):
    """Malformed protobuf bytes; the message gives the byte offset."""


def _message(
    fdp: Any,
    name: str,
    fields: list[tuple[str, int, int, int, str | None]],
    nested: tuple[Any, ...] = (),
) -> Any:
    msg = fdp.message_type.add(name=name)
    for sub in nested:
        msg.nested_type.add().CopyFrom(sub)
    for fname, number, ftype, label, type_name in fields:
        field = msg.field.add(name=fname, number=number, type=ftype, label=label)
        if type_name:
            field.type_name = type_name
    return msg


def _map_entry(name: str, value_type: str) -> Any:
    entry = descriptor_pb2.DescriptorProto(name=name)
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=_I64, label=_OPT)
    entry.field.add(name="value", number=2, type=_MSG, label=_OPT, type_name=_P + value_type)
    return entry


def _build_schema() -> tuple[Any, ...]:
    fdp = descriptor_pb2.FileDescriptorProto(
        name="tpuscope/xplane.proto", package="tensorflow.profiler", syntax="proto3"
    )
    _message(
        fdp,
        "XSpace",
        [
            ("planes", 1, _MSG, _REP, _P + "XPlane"),
            ("errors", 2, _BYT, _REP, None),
            ("warnings", 3, _BYT, _REP, None),
            ("hostnames", 4, _BYT, _REP, None),
        ],
    )
    _message(
        fdp,
        "XPlane",
        [
            ("id", 1, _I64, _OPT, None),
            ("name", 2, _BYT, _OPT, None),
            ("lines", 3, _MSG, _REP, _P + "XLine"),
            ("event_metadata", 4, _MSG, _REP, _P + "XPlane.EventMetadataEntry"),
            ("stat_metadata", 5, _MSG, _REP, _P + "XPlane.StatMetadataEntry"),
            ("stats", 6, _MSG, _REP, _P + "XStat"),
        ],
        nested=(
            _map_entry("EventMetadataEntry", "XEventMetadata"),
            _map_entry("StatMetadataEntry", "XStatMetadata"),
        ),
    )
    _message(
        fdp,
        "XLine",
        [
            ("id", 1, _I64, _OPT, None),
            ("display_id", 10, _I64, _OPT, None),
            ("name", 2, _BYT, _OPT, None),
            ("display_name", 11, _BYT, _OPT, None),
            ("timestamp_ns", 3, _I64, _OPT, None),
            ("duration_ps", 9, _I64, _OPT, None),
            ("events", 4, _MSG, _REP, _P + "XEvent"),
        ],
    )
    event = _message(
        fdp,
        "XEvent",
        [
            ("metadata_id", 1, _I64, _OPT, None),
            ("offset_ps", 2, _I64, _OPT, None),
            ("num_occurrences", 5, _I64, _OPT, None),
            ("duration_ps", 3, _I64, _OPT, None),
            ("stats", 4, _MSG, _REP, _P + "XStat"),
        ],
    )
    event.oneof_decl.add(name="data")
    event.field[1].oneof_index = event.field[2].oneof_index = 0
    stat = _message(
        fdp,
        "XStat",
        [
            ("metadata_id", 1, _I64, _OPT, None),
            ("double_value", 2, _DBL, _OPT, None),
            ("uint64_value", 3, _U64, _OPT, None),
            ("int64_value", 4, _I64, _OPT, None),
            ("str_value", 5, _BYT, _OPT, None),
            ("bytes_value", 6, _BYT, _OPT, None),
            ("ref_value", 7, _U64, _OPT, None),
        ],
    )
    stat.oneof_decl.add(name="value")
    for field in stat.field[1:]:
        field.oneof_index = 0
    _message(
        fdp,
        "XEventMetadata",
        [
            ("id", 1, _I64, _OPT, None),
            ("name", 2, _BYT, _OPT, None),
            ("display_name", 4, _BYT, _OPT, None),
            ("metadata", 3, _BYT, _OPT, None),
            ("stats", 5, _MSG, _REP, _P + "XStat"),
            ("child_id", 6, _I64, _REP, None),
        ],
    )
    _message(
        fdp,
        "XStatMetadata",
        [
            ("id", 1, _I64, _OPT, None),
            ("name", 2, _BYT, _OPT, None),
            ("description", 3, _BYT, _OPT, None),
        ],
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return tuple(
        message_factory.GetMessageClass(pool.FindMessageTypeByName(f"tensorflow.profiler.{name}"))
        for name in ("XSpace", "XPlane", "XLine", "XEvent", "XStat")
    )


XSpace, XPlane, XLine, XEvent, XStat = _build_schema()


def text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def stat_value(stat: Any, stat_names: dict[int, str]) -> tuple[str | None, Any]:
    """(kind, value) of an upb XStat: kind 'num' or 'str'; a ref_value resolves to its name."""
    kind = stat.WhichOneof("value")
    if kind is None:
        return None, None
    if kind == "ref_value":
        return "str", stat_names.get(stat.ref_value, "")
    if kind in ("str_value", "bytes_value"):
        return "str", text(getattr(stat, kind))
    return "num", getattr(stat, kind)


# a message's bytes, read whole or mapped (hlo_proto finds a trace's metadata plane in an mmap)
WireBytes = bytes | mmap.mmap


def varint(buf: WireBytes, pos: int, end: int) -> tuple[int, int]:
    """(value, next position) of the varint at pos."""
    result = shift = 0
    while True:
        if pos >= end:
            raise WireError(f"truncated varint at byte {pos}")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise WireError(f"varint too long at byte {pos}")


def skip_field(
    buf: WireBytes, pos: int, end: int, wire_type: int, field_no: int
) -> tuple[int, int]:
    """Position after the value of a field whose tag ended at pos, and its length (LEN fields)."""
    if wire_type == 0:
        return varint(buf, pos, end)[1], 0
    if wire_type == 2:
        length, pos = varint(buf, pos, end)
        if pos + length > end:
            raise WireError(
                f"length-delimited field {field_no} of {length} bytes at byte {pos} "
                f"runs past the end ({end})"
            )
        return pos + length, length
    size = {1: 8, 5: 4}.get(wire_type)
    if size is None:
        raise WireError(f"invalid wire type {wire_type} (field {field_no}) at byte {pos}")
    if pos + size > end:
        raise WireError(f"truncated fixed{size * 8} at byte {pos}")
    return pos + size, 0


def read_tag(buf: WireBytes, pos: int, end: int) -> tuple[int, int, int]:
    """(field number, wire type, next position) of the tag at pos."""
    tag, after = varint(buf, pos, end)
    field_no = tag >> 3
    if field_no == 0 or field_no > 0x1FFFFFFF:
        raise WireError(f"invalid field number {field_no} at byte {pos}")
    return field_no, tag & 7, after


def fields(buf: WireBytes, pos: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """(field number, wire type, field start, value start, value end) of one message level.

    For LEN fields the value span is the payload; for varints the value is decoded by
    the caller with `varint(buf, value_start, end)`.
    """
    while pos < end:
        start = pos
        field_no, wire_type, pos = read_tag(buf, pos, end)
        after, length = skip_field(buf, pos, end, wire_type, field_no)
        value_start = after - length if wire_type == 2 else pos
        yield field_no, wire_type, start, value_start, after
        pos = after
