"""The compiled xplane decoder (parse/xplane_jit, built by numba.pycc) against the numpy one (xplane_wire).

The reader must make the same table either way, byte for byte: values, dictionaries (their
order too), chunks and schema metadata; and a damaged file must fail with the same message.
Inputs: the real TPU/GPU/MI300 traces of ../shared/real_traces, the synthetic edge cases of
test_xplane, and damaged copies of the real files (fixed seeds). Every line goes through the
wire decoders (SMALL_LINE_BYTES = 0), in batches of 64 events too, so that nearly every batch
leaves events to upb, as lockstep does.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from tests.conftest import real_trace
from tests.test_xplane import GPU_TF, MI300, TPU, make_space
from tpuscope.parse import xplane, xplane_build, xplane_jit
from tpuscope.parse.xplane import XSpace, read_xspace

pytest.importorskip("numba")
REAL = (TPU, GPU_TF, MI300)
SMALL_LINES = "xplane/tracelens_mi300_jax/jax_conv_minimal_08__tw003.xplane.pb"  # all < 64 KB


def _read(path: Path, compiled: bool, monkeypatch: pytest.MonkeyPatch) -> pa.Table | str:
    monkeypatch.setattr(xplane, "JIT", compiled)
    monkeypatch.setattr(xplane, "JIT_MIN_BYTES", 0)  # these files are all under it
    try:
        return read_xspace(path)
    except xplane.XSpaceDecodeError as exc:
        return str(exc)


def _same(a: pa.Table | str, b: pa.Table | str) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return (
        a.equals(b)
        and a.schema.equals(b.schema, check_metadata=True)
        and [c.num_chunks for c in a.columns] == [c.num_chunks for c in b.columns]
    )


def _count_compiled(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts the batches the compiled decoder decoded (not declined)."""
    counts = {"decoded": 0}
    decode = xplane_jit.decode_batch

    def spy(*args: Any, **kwargs: Any) -> Any:
        result = decode(*args, **kwargs)
        counts["decoded"] += result is not None
        return result

    monkeypatch.setattr(xplane_jit, "decode_batch", spy)
    return counts


@pytest.mark.parametrize("batch", [64, xplane.BATCH_EVENTS])
@pytest.mark.parametrize("relative", REAL)
def test_real_traces_same_table(relative: str, batch: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(xplane, "SMALL_LINE_BYTES", 0)
    monkeypatch.setattr(xplane, "BATCH_EVENTS", batch)
    path = real_trace(relative)
    counts = _count_compiled(monkeypatch)
    compiled = _read(path, True, monkeypatch)
    assert counts["decoded"] > 0
    assert _same(_read(path, False, monkeypatch), compiled)


def test_edge_cases_same_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """uint64 ids, doubles, refs, negative offsets, unwanted and duplicated stats."""
    monkeypatch.setattr(xplane, "SMALL_LINE_BYTES", 0)
    monkeypatch.setattr(xplane, "BATCH_EVENTS", 1000)
    path = tmp_path / "edge.xplane.pb"
    path.write_bytes(make_space(6_000))
    compiled = _read(path, True, monkeypatch)
    assert not isinstance(compiled, str) and compiled.num_rows == 12_003
    assert _same(_read(path, False, monkeypatch), compiled)


def test_many_stats_per_event_grow_the_stats(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """9 wanted stats per event, more than the decoder's first room (4 per event): it grows
    them mid-batch and resumes; duplicates of one stat (the first wins) among them."""
    monkeypatch.setattr(xplane, "SMALL_LINE_BYTES", 0)
    space = XSpace()
    plane = space.planes.add(id=1, name=b"/host:CPU")
    for sid, name in enumerate(("hlo_op", "hlo_module", "flops", "program_id", "tf_op"), 1):
        plane.stat_metadata[sid].name = name.encode()
    plane.event_metadata[1].name = b"op"
    line = plane.lines.add(id=1, name=b"worker")
    for i in range(3_000):
        event = line.events.add(metadata_id=1, offset_ps=i, duration_ps=1)
        for j in range(9):
            sid = 1 + (i + j) % 5
            event.stats.add(metadata_id=sid, str_value=f"s{(i * j) % 17}".encode())
            if sid in (3, 4):
                event.stats[-1].int64_value = i * 10 + j
    path = tmp_path / "many.xplane.pb"
    path.write_bytes(space.SerializeToString())
    counts = _count_compiled(monkeypatch)
    compiled = _read(path, True, monkeypatch)
    assert counts["decoded"] > 0
    assert not isinstance(compiled, str) and compiled["flops"].null_count == 0
    assert _same(_read(path, False, monkeypatch), compiled)


def test_wanted_id_too_big_for_a_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stat id above the lookup-table limit: the compiled decoder declines, numpy decodes."""
    monkeypatch.setattr(xplane, "SMALL_LINE_BYTES", 0)
    space = XSpace()
    plane = space.planes.add(id=1, name=b"/device:TPU:0")
    big = (1 << 23) + 5
    plane.stat_metadata[big].name = b"flops"
    plane.event_metadata[1].name = b"op"
    line = plane.lines.add(id=1, name=b"XLA Ops")
    for i in range(100):
        line.events.add(metadata_id=1, offset_ps=i, duration_ps=1).stats.add(
            metadata_id=big, int64_value=i
        )
    path = tmp_path / "big.xplane.pb"
    path.write_bytes(space.SerializeToString())
    assert xplane_jit.want_table(np.array([big])) is None
    counts = _count_compiled(monkeypatch)
    table = _read(path, True, monkeypatch)
    assert counts["decoded"] == 0
    assert not isinstance(table, str) and table["flops"].to_pylist() == list(range(100))


def test_want_table_keeps_what_member_keeps() -> None:
    assert len(xplane_jit.want_table(np.array([], np.int64))) == 0  # no stat kept
    none = xplane_jit.want_table(np.array([-3], np.int64))  # canonical ones dropped, others kept
    assert none is not None and none.tolist() == [False]
    table = xplane_jit.want_table(np.array([2, 5], np.int64))
    assert table is not None and np.flatnonzero(table).tolist() == [2, 5]


@pytest.mark.parametrize("seed", range(4))
def test_damaged_copies_same_table_or_same_error(
    seed: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Random bytes overwritten (tags, lengths, continuation bits) or the file cut short."""
    monkeypatch.setattr(xplane, "SMALL_LINE_BYTES", 0)
    monkeypatch.setattr(xplane, "BATCH_EVENTS", 64)
    rng = random.Random(seed)
    errors = 0
    for trial in range(15):
        data = bytearray(real_trace(REAL[trial % len(REAL)]).read_bytes())
        for _ in range(rng.choice([1, 3, 10])):
            data[rng.randrange(len(data))] = rng.choice([rng.randrange(256), 0x22, 0x08, 0x80, 0])
        if trial % 5 == 4:
            data = data[: rng.randrange(len(data))]
        path = tmp_path / f"damaged-{trial}.xplane.pb"
        path.write_bytes(bytes(data))
        numpy_result = _read(path, False, monkeypatch)
        errors += isinstance(numpy_result, str)
        assert _same(numpy_result, _read(path, True, monkeypatch)), trial
    assert errors > 0  # the damage did reach the decoders


def _python(code: str, **env: str) -> str:
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def test_switched_off_reads_with_numpy() -> None:
    """TPUSCOPE_XPLANE_JIT=0: the numpy decoder reads, no compiled module is loaded."""
    code = (
        "import sys; from tpuscope.parse import xplane, xplane_jit;"
        f"t = xplane.read_xspace({str(real_trace(GPU_TF))!r});"
        "print(xplane.JIT, xplane_jit._compiled is None, t.num_rows)"
    )
    assert _python(code, TPUSCOPE_XPLANE_JIT="0") == "False True 23128"


def test_reader_loads_the_built_module_and_never_numba() -> None:
    """The module built ahead of time (setup.sh) is what reads big lines, in a file of any
    size; a file of small lines does not load it; numba is never imported by a reader."""
    code = (
        "import sys; from tpuscope.parse import xplane, xplane_jit;"
        f"xplane.read_xspace({str(real_trace(SMALL_LINES))!r});"
        "a = xplane_jit._compiled is not None;"
        f"xplane.read_xspace({str(real_trace(GPU_TF))!r});"
        "print(a, xplane_jit._compiled is not None, 'numba' in sys.modules)"
    )
    assert xplane_build.module_path() is not None and xplane_build.module_path().exists(), (
        "the compiled decoder is not built: run `python -m tpuscope.parse.xplane_build`"
    )
    assert _python(code, TPUSCOPE_XPLANE_JIT="1") == "False True False"


def test_a_build_that_fails_is_said_once_and_numpy_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """No module and a build that fails (here a numba that cannot be imported in the child):
    one warning with the reason, a marker so no later reader tries again, the numpy table."""
    fake = tmp_path / "fake" / "numba"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('no numba in this test')\n")
    monkeypatch.setenv("PYTHONPATH", str(fake.parent))
    monkeypatch.setattr(xplane_build, "folders", lambda: [tmp_path / "cache"])
    monkeypatch.setattr(xplane_jit, "_compiled", None)
    monkeypatch.setattr(xplane, "JIT_MIN_BYTES", 0)  # build for this small file
    path = real_trace(GPU_TF)
    with caplog.at_level("WARNING"):
        table = read_xspace(path)
        assert xplane_jit._compiled is None
        read_xspace(path)  # the marker: no second build
    said = [r.getMessage() for r in caplog.records if "could not be compiled" in r.getMessage()]
    assert said == [
        "tpuscope: the trace decoder could not be compiled "
        "(ImportError: no numba in this test); numpy reads "
        "(`python -m tpuscope.parse.xplane_build` tries again)"
    ]
    assert [f.suffix for f in (tmp_path / "cache").iterdir()] == [".failed"]
    monkeypatch.setattr(xplane, "JIT", False)
    assert _same(read_xspace(path), table)


def test_a_length_past_its_event_is_declined_and_arrays_are_checked() -> None:
    """An event whose last field's length runs on past the event, to the end of the bytes:
    the compiled decoder declines it (xplane_wire decides) and reads nothing past the bytes.
    Arrays of the wrong shape are refused before they reach the compiled code, which would
    read them as raw memory."""
    assert xplane_build.load(build=False)
    buf = np.frombuffer(bytes([0x22, 0x01, 0x22, 0x05]), np.uint8)
    spans = xplane_jit.event_spans(buf, 0, 4)
    assert spans is not None and spans[0].tolist() == [2] and spans[1].tolist() == [3]
    assert xplane_jit.decode_batch(buf, spans[0], spans[1], np.ones(8, np.bool_)) is None
    with pytest.raises(ValueError, match="2-d array"):
        xplane_jit.decode_batch(buf, spans[0].reshape(1, 1), spans[1], np.ones(8, np.bool_))
    with pytest.raises(ValueError, match="outside the 4 bytes"):
        xplane_jit.event_spans(buf, 0, 5)
