"""The XSpace reader and trace import: real TPU/GPU/CPU xplanes, a real corrupt file, edge cases.

Real inputs come from ../shared/real_traces (skipped when absent, failing in CI) and are never
written to: xprof runs on private copies. Synthetic XSpaces (built with the reader's
own message classes) cover what no sample file has: uint64 program ids, doubles as
flops, invalid UTF-8, unknown metadata ids, negative offsets, aggregated events,
epoch timestamps, non-canonical field order, and lines big enough for the numpy path.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from tests.conftest import real_trace, run_tpuscope
from tpuscope.ingest import traces as trace_ingest
from tpuscope.parse import xplane, xplane_wire, xprof_tools
from tpuscope.parse.xplane import XSpace, XSpaceDecodeError, read_xspace, space_info
from tpuscope.report.device import device_view
from tpuscope.report.perfetto import write_chrome_trace
from tpuscope.store import Run, read_table

TPU = "xplane/tpu_inference_2.xplane.pb"
CORRUPT = "xplane/tpu_inference_2.CORRUPTED_utf8_replacement_chars.xplane.pb"
GPU_TF = "xplane/34.83.195.179_6003.xplane.pb"
MI300 = "xplane/tracelens_mi300_jax/jax08_gemm__tw003.xplane.pb"


def plain(table: pa.Table) -> pa.Table:
    """Dictionary columns decoded, so tables from both engines compare value by value."""
    return pa.table(
        {
            c: table[c].cast(table[c].type.value_type)
            if pa.types.is_dictionary(table[c].type)
            else table[c]
            for c in table.column_names
        }
    )


def test_tpu_trace_columns_and_stats() -> None:
    table = read_xspace(real_trace(TPU))
    assert table.num_rows == 26_723
    rows = table.filter(pa.compute.equal(table["line"].cast(pa.string()), "XLA Ops")).to_pylist()
    broadcast = next(r for r in rows if r["hlo_op"] == "broadcast.2")
    assert broadcast["name"].startswith(
        "%broadcast.2 = f32[5,1024,1024,256]"
    )  # full HLO text as the name
    assert (
        broadcast["program_id"] == 11287434908481120160
    )  # a uint64 above 2**63, from the metadata
    assert broadcast["hlo_module"] == "jit_broadcast_in_dim"  # from program_id via /host:metadata
    assert broadcast["bytes_accessed"] == 5_368_709_120 and broadcast["hlo_category"] == "broadcast"
    info = space_info(table)
    assert info["planes"]["/device:TPU:0"]["device_type_string"] == "TPU v6 Lite"
    assert info["planes"]["/device:TPU:0"]["peak_teraflops_per_second"] == 918.0
    assert info["planes"]["Task Environment"]["profile_start_time"] == 1_741_722_099_081_044_120


def test_matches_jax_profiledata_event_by_event() -> None:
    from jax.profiler import ProfileData

    path = real_trace(TPU)
    table = read_xspace(path)
    ours = list(
        zip(
            table["plane"].to_pylist(),
            table["line"].to_pylist(),
            table["name"].to_pylist(),
            table["start_ns"].to_pylist(),
            strict=True,
        )
    )
    theirs = [
        (p.name, ln.name, e.name, int(np.floor(e.start_ns)))
        for p in ProfileData.from_file(str(path)).planes
        for ln in p.lines
        for e in ln.events
    ]
    assert ours == theirs


@pytest.mark.parametrize("relative", [TPU, GPU_TF, MI300])
def test_wire_and_upb_engines_agree(relative: str) -> None:
    path = real_trace(relative)
    assert plain(read_xspace(path)).equals(plain(read_xspace(path, engine="upb")))


def make_space(n_events: int) -> bytes:
    space = XSpace()
    plane = space.planes.add(id=1, name=b"/device:TPU:0")
    for sid, name in [
        (1, "program_id"),
        (2, "flops"),
        (3, "bytes_accessed"),
        (4, "hlo_op"),
        (5, "hlo_module"),
        (7, "junk"),
        (8, "hlo_category"),
        (9, "graph_hash"),
    ]:
        plane.stat_metadata[sid].id = sid
        plane.stat_metadata[sid].name = name.encode()
    meta = plane.event_metadata[10]
    meta.id, meta.name, meta.display_name = 10, b"%fusion.1 = f32[8] fusion(...)", b"fusion.1"
    meta.stats.add(metadata_id=1, uint64_value=(1 << 64) - 5)  # program_id above int64 max
    meta.stats.add(metadata_id=2, double_value=1.5e9)  # flops as a double
    meta.stats.add(metadata_id=3, int64_value=4096)
    meta.stats.add(metadata_id=8, str_value=b"convolution")
    module = plane.event_metadata[11]
    module.id, module.name = 11, b"jit_f(18446744073709551611)"
    ops = plane.lines.add(id=1, name=b"XLA Ops", timestamp_ns=1_700_000_000_000_000_000)
    for i in range(n_events):
        event = ops.events.add(metadata_id=10, offset_ps=i * 1_000_500 + 999, duration_ps=2_500)
        if i % 3 == 0:
            event.stats.add(metadata_id=7, str_value=b"x" * (i % 200))  # unwanted, variable length
        if i % 5 == 0:
            event.stats.add(
                metadata_id=2, int64_value=i
            )  # the event's own stat wins over its metadata's
        if i % 7 == 0:
            event.stats.add(metadata_id=9, uint64_value=i * 11)
    modules = plane.lines.add(id=2, name=b"XLA Modules", timestamp_ns=5)
    modules.events.add(metadata_id=11, offset_ps=0, duration_ps=10_000_000)
    modules.events.add(
        metadata_id=999, offset_ps=-1500, duration_ps=1
    )  # unknown metadata, negative offset
    modules.events.add(metadata_id=11, num_occurrences=3, duration_ps=7)  # aggregated: no offset
    host = space.planes.add(id=2, name=b"/host:CPU")
    for sid, name in [(1, b"hlo_op"), (2, b"hlo_module"), (3, b"program_id"), (4, b"copy.1")]:
        host.stat_metadata[sid].name = name
    host.event_metadata[1].name = b"ThunkExecute \xff\xfe invalid utf8"
    thread = host.lines.add(id=7, name=b"worker/7", timestamp_ns=0)
    for i in range(n_events):
        event = thread.events.add(metadata_id=1, offset_ps=i, duration_ps=i)
        event.stats.add(metadata_id=1, ref_value=4)  # a ref to a stat_metadata name
        event.stats.add(metadata_id=2, str_value=b"jit_f")
        event.stats.add(metadata_id=3, int64_value=-5)  # a negative int64 id -> its uint64 bits
    return space.SerializeToString()


@pytest.mark.parametrize("n_events, numpy_path", [(10, False), (6_000, True)])
def test_edge_cases_both_engines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, n_events: int, numpy_path: bool
) -> None:
    if numpy_path:  # every line through the numpy decoder, framing across many small windows
        monkeypatch.setattr(xplane, "SMALL_LINE_BYTES", 0)
        monkeypatch.setattr(xplane_wire, "EVENT_WINDOW", 4096)
    path = tmp_path / "edge.xplane.pb"
    path.write_bytes(make_space(n_events))
    table = read_xspace(path)
    assert plain(table).equals(plain(read_xspace(path, engine="upb")))
    rows = table.to_pylist()
    ops = [r for r in rows if r["line"] == "XLA Ops"]
    assert len(ops) == n_events
    assert ops[0]["start_ns"] == 1_700_000_000_000_000_000 and ops[0]["dur_ns"] == 2
    assert (
        ops[1]["start_ns"] == 1_700_000_000_000_000_000 + 1001
    )  # (1_000_500 + 999) // 1000, exact
    assert ops[0]["program_id"] == (1 << 64) - 5 and ops[0]["hlo_module"] == "jit_f"
    assert ops[0]["hlo_op"] == "fusion.1" and ops[0]["hlo_category"] == "convolution"
    assert [ops[i]["flops"] for i in (0, 1, 5)] == [0, 1_500_000_000, 5]
    assert ops[7]["graph_hash"] == "77" and ops[1]["graph_hash"] is None
    modules = [r for r in rows if r["line"] == "XLA Modules"]
    assert (
        modules[1]["name"] == "" and modules[1]["start_ns"] == 5 - 1
    )  # -1500 ps truncates toward zero
    assert modules[2]["start_ns"] == 5
    host = [r for r in rows if r["plane"] == "/host:CPU"]
    assert host[0]["hlo_op"] == "copy.1" and host[0]["program_id"] == (1 << 64) - 5
    assert host[0]["name"] == "ThunkExecute \ufffd\ufffd invalid utf8"


def _varint(x: int) -> bytes:
    x &= (1 << 64) - 1
    out = b""
    while True:
        byte, x = x & 0x7F, x >> 7
        if not x:
            return out + bytes([byte])
        out += bytes([byte | 0x80])


def _field(number: int, wire_type: int, payload: bytes) -> bytes:
    return _varint(number << 3 | wire_type) + (
        _varint(len(payload)) + payload if wire_type == 2 else payload
    )


def test_non_canonical_field_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(xplane, "SMALL_LINE_BYTES", 0)
    stat = _field(4, 0, _varint(1234)) + _field(1, 0, _varint(2))  # value before metadata_id
    event = (
        _field(4, 2, stat)
        + _field(3, 0, _varint(7000))
        + _field(2, 0, _varint(9000))
        + _field(1, 0, _varint(1))
    )
    line = (
        _field(11, 2, b"disp")
        + _field(4, 2, event) * 3
        + _field(2, 2, b"L")
        + _field(3, 0, _varint(100))
        + _field(4, 2, event)
    )
    plane = (
        _field(3, 2, line)
        + _field(2, 2, b"P")
        + _field(
            4,
            2,
            _field(1, 0, _varint(1)) + _field(2, 2, _field(1, 0, _varint(1)) + _field(2, 2, b"ev")),
        )
        + _field(
            5,
            2,
            _field(1, 0, _varint(2))
            + _field(2, 2, _field(1, 0, _varint(2)) + _field(2, 2, b"flops")),
        )
    )
    path = tmp_path / "order.xplane.pb"
    path.write_bytes(_field(1, 2, plane))
    table = read_xspace(path)
    assert plain(table).equals(plain(read_xspace(path, engine="upb")))
    assert table["start_ns"].to_pylist() == [109] * 4 and table["flops"].to_pylist() == [1234] * 4
    assert table["name"].to_pylist() == ["ev"] * 4 and table["line"].to_pylist() == ["L"] * 4


@pytest.mark.parametrize(
    "data, words",
    [
        (b"", "empty"),
        (b"\x1f\x8b\x08\x00junk", "gzip"),
        (b"\x0a\xff\xff\xff\xff\x0f", "not a valid XSpace"),
        (b"hello world", "not a valid XSpace"),
    ],
)
@pytest.mark.parametrize("engine", ["wire", "upb"])
def test_bad_files_name_the_file(tmp_path: Path, data: bytes, words: str, engine: str) -> None:
    path = tmp_path / "bad.xplane.pb"
    path.write_bytes(data)
    with pytest.raises(XSpaceDecodeError, match=words) as info:
        read_xspace(path, engine=engine)
    assert str(info.value).startswith(str(path))


def test_real_corrupt_file_is_refused_by_name() -> None:
    path = real_trace(CORRUPT)
    for engine in ("wire", "upb"):
        with pytest.raises(XSpaceDecodeError) as info:
            read_xspace(path, engine=engine)
        assert str(path) in str(info.value)


def test_tpu_device_time_matches_xprof_duty_cycle() -> None:
    traces = trace_ingest.load_traces([real_trace(TPU)], xprof=xprof_tools.available())
    busy = pa.concat_tables(traces.tables["device_steps"]).to_pandas()
    assert sorted(busy["device"]) == [f"/device:TPU:{i}" for i in range(4)]
    assert set(busy["window"]) == {"whole trace"} and set(busy["step"]) == {-1}
    duty = 100 * busy["busy_ns"].sum() / (busy["busy_ns"] + busy["idle_ns"]).sum()
    assert duty == pytest.approx(86.5, abs=1.0)  # xprof's device_duty_cycle_percent for this file
    events = pa.concat_tables(traces.tables["trace_events"])
    assert pa.compute.min(events["start_ns"]).as_py() > 1_741_722_099_081_044_120  # epoch ns
    if xprof_tools.available():
        assert traces.meta["device_duty_cycle_percent"] == 86.5
        assert traces.meta["mxu_utilization_percent"] == 0.0


def test_import_logdir_of_hosts_refuses_corrupt_one_and_goes_on(tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    tpu, gpu = (
        logdir / "plugins" / "profile" / "tpu_session",
        logdir / "plugins" / "profile" / "gpu_session",
    )
    for session in (tpu, gpu):
        session.mkdir(parents=True)
    shutil.copy(real_trace(TPU), tpu / "host-a.xplane.pb")
    shutil.copy(real_trace(CORRUPT), tpu / "host-c.xplane.pb")
    shutil.copy(real_trace(MI300), gpu / "host-b.xplane.pb")
    store = tmp_path / "store"
    proc = run_tpuscope(
        "import", "--store", str(store), "--quiet", str(logdir), str(real_trace(GPU_TF))
    )
    assert proc.returncode == 2, proc.stderr
    assert "host-c.xplane.pb" in proc.stderr and "not a valid XSpace protobuf" in proc.stderr
    run_dir = next(store.iterdir())
    view = device_view(Run(run_dir))
    assert view["trace_events"] == 26_723 + 3_782 + 23_128
    devices = {d["device"] for d in view["devices"]}
    assert {"/device:TPU:0", "/device:GPU:0", "/device:GPU:4"} <= devices
    cost = view["cost_model"]  # the TPU model prices the TPU planes only, not the GPU ones
    assert cost["target"] == "v6e" and cost["share_within_2x"] == pytest.approx(0.9954, abs=0.001)
    if xprof_tools.available():
        tpu_figures = next(f for f in view["xprof"] if f["host"] == "host-a")
        assert (
            tpu_figures["device_type"] == "TPU v6 Lite"
            and tpu_figures["mxu_utilization_percent"] == 0.0
        )
    assert (
        len(list((run_dir / "trace" / "imported" / "plugins" / "profile").rglob("*.xplane.pb")))
        == 3
    )
    written = write_chrome_trace(
        read_table(run_dir, "trace_events"), tmp_path / "run.trace.json.gz"
    )
    with gzip.open(tmp_path / "run.trace.json.gz", "rt") as handle:
        chrome = json.load(handle)
    assert sum(e["ph"] == "X" for e in chrome["traceEvents"]) == written == view["trace_events"]
    lanes = {e["args"]["name"] for e in chrome["traceEvents"] if e["name"] == "process_name"}
    assert "host-a: /device:TPU:0" in lanes
