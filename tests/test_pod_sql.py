"""The step figures (analyze/pod_sql.py, analyze/pod_view.py: one implementation, DuckDB and
numpy) against figures computed here by hand, and the pod read over its parts (detect/pod_tables.py,
one host's rows at a time, the rules only where their inputs are) against the same pod read
whole into memory (RunTables.from_run, every rule on every host).

A synthetic pod written as `tpuscope run --run-id` lays one out (benchmarks/pod_scale.make_pod:
real Parquet parts with the store's schemas, host-3 slower, host-1 compiling a graph of its
own); the real five-host pod (a lost host, hosts with other step counts) is in tests/test_pod.py.
The numpy shortcuts are checked against pandas' medians on their own.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tpuscope.analyze.judge import phases
from tpuscope.analyze.pod_matrix import nan_median
from tpuscope.detect import RunTables, detect
from tpuscope.detect.pod_tables import PodTables, run_tables
from tpuscope.detect.run_analysis import _summary
from tpuscope.store import Run

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "pod_scale.py"


def _make_pod():
    spec = importlib.util.spec_from_file_location("_pod_scale", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make_pod


def both_ways(run: Run) -> tuple[tuple[list, dict], tuple[list, dict]]:
    """(findings, summary) over the parts and with every table in memory, as JSON-ready dicts."""
    parts = run_tables(run)
    assert isinstance(parts, PodTables)
    memory = RunTables.from_run(run)
    out = []
    for tables in (parts, memory):
        findings = detect(tables)
        out.append(([f.to_dict() for f in findings], _summary(tables, findings)))
    return out[0], out[1]


def same(a: object, b: object) -> bool:
    """Equal as JSON text: every float to its last digit."""
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def hand_figures(steps: pd.DataFrame, warmup: int, first_loop: dict[str, int]) -> dict:
    """The summary's step figures and the pod view of a pod of one process per host, computed
    here from the rules' words (analyze/judge.py, analyze/hosts.py) with plain numpy: judged are
    a host's steps from its loop's first step + warmup; a host's step time is its row's; the
    pod's step time the median over hosts; the noise the median over hosts of 1.4826 x each
    host's MAD; the threshold max(2 x noise, 5% of the pod's median step, 1 ms); a host with
    fewer than 5 judged steps not judged."""
    judged = steps[steps["step"] >= steps["host"].map(first_loop) + warmup]
    loop = steps[steps["step"] >= steps["host"].map(first_loop)]
    wall = judged.pivot(index="host", columns="step", values="wall_ns").astype(np.float64)
    hosts = sorted(wall.index, key=lambda h: int(h.split("-")[1]))
    wall = wall.loc[hosts].to_numpy()
    p50 = np.nanmedian(wall, axis=1)
    excess = wall - np.nanmedian(wall, axis=0)
    pod_p50 = float(np.median(p50))
    noise = float(
        np.median([1.4826 * np.nanmedian(np.abs(r - m)) for r, m in zip(wall, p50, strict=True)])
    )
    threshold = max(2 * noise, 0.05 * pod_p50, 1e6)
    view = {
        h: {
            "p50_ms": p50[i] / 1e6,
            "excess_ms": float(np.nanmedian(excess[i])) / 1e6,
            "straggler": bool(
                np.nanmedian(excess[i]) > threshold and (~np.isnan(wall[i])).sum() >= 5
            ),
            "slow": int((excess[i] > threshold).sum()),
        }
        for i, h in enumerate(hosts)
    }
    walls = judged["wall_ns"].to_numpy()
    return {
        "steps": len(loop),
        "steps_judged": len(judged),
        "p50_ms": float(np.quantile(walls, 0.5)) / 1e6,
        "p90_ms": float(np.quantile(walls, 0.9)) / 1e6,
        "wall_s_judged": int(walls.sum()) / 1e9,
        "run_wall_s": int(steps["wall_ns"].sum()) / 1e9,
        "view": view,
        "pod_p50_ms": pod_p50 / 1e6,
        "threshold_ms": threshold / 1e6,
    }


def assert_hand_figures(summary: dict, view: dict, want: dict) -> None:
    close = {"rel": 1e-12}
    assert summary["steps"] == want["steps"]
    assert summary["steps_judged"] == want["steps_judged"]
    assert summary["step_time_p50_ms"] == pytest.approx(want["p50_ms"], **close)
    assert summary["step_time_p90_ms"] == pytest.approx(want["p90_ms"], **close)
    assert summary["wall_s_judged"] == pytest.approx(want["wall_s_judged"], **close)
    assert summary["run_wall_s"] == pytest.approx(want["run_wall_s"], **close)
    assert view["pod_p50_ms"] == pytest.approx(want["pod_p50_ms"], **close)
    assert view["threshold_ms"] == pytest.approx(want["threshold_ms"], **close)
    for got in view["hosts"]:
        mine = want["view"][got["host"]]
        assert got["p50_ms"] == pytest.approx(mine["p50_ms"], **close), got["host"]
        assert got["excess_ms"] == pytest.approx(mine["excess_ms"], abs=1e-9), got["host"]
        assert got["straggler"] == mine["straggler"], got["host"]
        assert len(got["slow_steps"]) == mine["slow"], got["host"]
    hosts = {h["host"]: h for h in summary["hosts"]}
    assert {h: hosts[h]["p50_ms"] for h in hosts} == pytest.approx(
        {h: v["p50_ms"] for h, v in want["view"].items()}, **close
    )


def test_synthetic_pod_figures_are_the_hand_computed_ones(tmp_path):
    run = Run(_make_pod()(tmp_path, 4, 301))  # an even host count: medians of the middle two
    (found, summary), (found_mem, summary_mem) = both_ways(run)
    # host-3, host-1; and each host's first compiles (12 s of a 24 s run; host-1's own graph
    # makes its 21 s) are a compile_time card
    assert {f["rule"] for f in found} == {"straggler", "rank_divergence", "compile_time"}
    assert [f["evidence"]["host"] for f in found if f["rule"] == "straggler"] == ["host-3"]
    want = hand_figures(run.steps, 2, {f"host-{k}": 0 for k in range(4)})
    assert want["view"]["host-3"]["straggler"] and want["view"]["host-3"]["slow"] > 150
    assert_hand_figures(summary, run_tables(run).pod_view, want)
    assert summary["host_steps"]["width"] == 2  # 299 judged steps in bins of 2
    record = summary["host_steps"]
    judged = run.steps[run.steps["step"] >= 2]
    bins = 2 + (judged["step"] - 2) // 2 * 2
    ms = (judged["wall_ns"] / 1e6).groupby([judged["host"].astype(str), bins]).median()
    for h, row in zip(record["hosts"], record["ms"], strict=True):
        assert row == [round(float(ms[(h, b)]), 6) for b in record["steps"]], h
    assert same(found, found_mem)  # read over the parts or whole: the same analysis
    assert same(summary, summary_mem)


def test_nan_median_is_pandas_median():
    rng = np.random.default_rng(1)
    for shape in [(5, 7), (4, 10), (64, 300), (3, 20000)]:
        matrix = rng.integers(0, 20, shape) * 0.5 + rng.random(shape) * (shape[0] % 2)
        matrix[rng.random(shape) < 0.1] = np.nan
        long = pd.DataFrame(matrix).stack().reset_index()
        long.columns = ["row", "col", "v"]
        for axis, key in ((0, "col"), (1, "row")):
            want = long.groupby(key)["v"].median().reindex(range(shape[1 - axis])).to_numpy()
            assert np.array_equal(nan_median(matrix, axis), want, equal_nan=True), (shape, axis)
    whole = np.arange(12.0).reshape(3, 4)  # no NaN: the partition path
    assert np.array_equal(nan_median(whole, 0), pd.DataFrame(whole).median(axis=0).to_numpy())


@pytest.mark.parametrize(
    ("boundaries", "warmup", "want"),
    [
        ("s s s s s", 2, "w w j j j"),
        ("s s s s e", 2, "w w j j a"),  # the after-the-loop step is never judged
        ("s s e", 2, "w j a"),  # fewer steps than the warm-up: the last loop step is judged
        ("e", 2, "j"),  # no step boundary at all: the whole program is one judged step
        ("s e", 5, "j a"),
        ("b s s s s", 2, "u w w j j"),  # a setup sync at a kind the loop never passes again
        ("b s s", 1, "u w j"),
        ("b s", 1, "w j"),  # a setup step needs two loop steps after it
        ("b c s s s", 1, "u u w j j"),  # two setup kinds, each once
        ("s b s s s", 1, "w j j j j"),  # setup only leads the loop
        ("s s s s", 0, "j j j j"),
    ],
)
def test_phases_by_hand(boundaries, warmup, want):
    """judge.phases (PodSteps' SQL over a frame) on one process's rows, out of order, and on a
    second process whose rows are another case's: each process labelled on its own."""
    kinds = {"s": "sync", "e": "end", "b": "xm.broadcast_master_param", "c": "mark_step"}
    names = {"w": "warmup", "j": "judged", "a": "after", "u": "setup"}
    rows = [kinds[b] for b in boundaries.split()]
    one = pd.DataFrame({"host": "h", "pid": 7, "step": np.arange(len(rows)), "boundary": rows})
    other = pd.DataFrame({"host": "h", "pid": 8, "step": np.arange(5), "boundary": "sync"})
    frame = pd.concat([one, other], ignore_index=True).sample(frac=1, random_state=3)
    got = phases(frame, warmup)
    assert got.index.equals(frame.index)
    assert list(got[frame["pid"] == 7].sort_index()) == [names[w] for w in want.split()]
    expected_other = ["warmup"] * min(warmup, 4) + ["judged"] * (5 - min(warmup, 4))
    assert list(got[frame["pid"] == 8].sort_index()) == expected_other


def test_setup_steps_over_the_parts_are_the_in_memory_ones(tmp_path):
    """A host whose first step ends at a boundary its loop never passes again (a setup sync,
    analyze/judge.phases) has it labelled setup both ways: same steps, same figures."""
    import pyarrow.parquet as pq

    root = _make_pod()(tmp_path, 3, 40)
    part = sorted((root / "steps").glob("part-host-0-*.parquet"))[0]
    table = pq.read_table(part).to_pandas()
    table["boundary"] = table["boundary"].astype(str)
    table.loc[table["step"] == 0, "boundary"] = "xm.broadcast_master_param"
    pq.write_table(
        pq.read_table(part).from_pandas(table, preserve_index=False, schema=pq.read_schema(part)),
        part,
    )
    (found, summary), (found_mem, summary_mem) = both_ways(Run(root))
    assert same(found, found_mem)
    assert same(summary, summary_mem)
    assert summary["steps"] == summary_mem["steps"] == 3 * 40 - 1  # host-0's setup is no step
    run = Run(root)
    want = hand_figures(run.steps, 2, {"host-0": 1, "host-1": 0, "host-2": 0})
    assert_hand_figures(summary, run_tables(run).pod_view, want)


def _rewrite_steps(root: Path, host: str, edit) -> None:
    """Edit one host's steps part in place (pandas), keeping the store's schema."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    part = sorted((root / "steps").glob(f"part-{host}-*.parquet"))[0]
    schema = pq.read_schema(part)
    frame = edit(pq.read_table(part).to_pandas())
    pq.write_table(pa.Table.from_pandas(frame, schema=schema, preserve_index=False), part)


def test_the_gate_runs_a_rule_only_where_its_inputs_are_and_finds_the_same(tmp_path):
    """detect/pod_gate.py: host-2 reads from the device every step (host_sync runs there and
    fires), the quiet hosts are never read; the findings are the in-memory path's, which runs
    every rule on every host."""
    from tpuscope.detect import DETECTORS
    from tpuscope.detect.host_sync import detect_host_sync

    root = _make_pod()(tmp_path, 4, 60)

    def reads(frame: pd.DataFrame) -> pd.DataFrame:
        frame["transfers_from_device"] = 1
        return frame

    _rewrite_steps(root, "host-2", reads)
    run = Run(root)
    parts = run_tables(run)
    todo = parts.plan(parts.hosts, DETECTORS)
    assert list(todo) == ["host-2"] and detect_host_sync in todo["host-2"]
    (found, summary), (found_mem, summary_mem) = both_ways(run)
    assert [f["evidence"]["hosts"] for f in found if f["rule"] == "host_sync"] == [["host-2"]]
    assert same(found, found_mem)
    assert same(summary, summary_mem)


def test_a_step_written_twice_on_a_host_never_read_is_grouped_as_pandas_groups_it(tmp_path):
    """A quiet host is not read by the rules, so its step written twice is found by SQL
    (PodSteps.steps_once): the pod's figures take each (host, step) as pandas does."""
    root = _make_pod()(tmp_path, 3, 40)

    def twice(frame: pd.DataFrame) -> pd.DataFrame:
        extra = frame[frame["step"] == 20].assign(wall_ns=lambda f: f["wall_ns"] * 3)
        return pd.concat([frame, extra], ignore_index=True)

    _rewrite_steps(root, "host-0", twice)
    parts = run_tables(Run(root))
    assert not parts.pod.steps_once()
    (found, summary), (found_mem, summary_mem) = both_ways(Run(root))
    assert same(found, found_mem)
    assert same(summary, summary_mem)


def test_the_slow_steps_parts_not_0_are_the_in_memory_causes(tmp_path):
    """The straggler's slow steps read from the device, fall back and compile where the other
    hosts do not (analyze/pod_view.py takes those parts from their cells not 0, as rows): its
    cause names what it had more of, as the pandas rules find it."""
    root = _make_pod()(tmp_path, 5, 120)

    def busy(frame: pd.DataFrame) -> pd.DataFrame:
        step = frame["step"].to_numpy()
        frame["transfers_from_device"] = (step % 3 == 0).astype(np.int64)
        frame["fallback_ops"] = np.where(step % 7 == 0, 2, 0)
        frame["compile_ns"] = np.where(step % 11 == 0, 5_000_000, 0)
        return frame

    def some(frame: pd.DataFrame) -> pd.DataFrame:
        frame["fallback_ops"] = np.where(frame["step"].to_numpy() % 14 == 0, 4, 0)
        return frame

    _rewrite_steps(root, "host-3", busy)
    _rewrite_steps(root, "host-0", some)
    (found, summary), (found_mem, summary_mem) = both_ways(Run(root))
    slow = [h for h in summary["hosts"] if h["host"] == "host-3"]
    assert slow and slow[0]["straggler"]
    causes = [f["evidence"].get("cause") for f in found if f["rule"] == "straggler"]
    assert causes and causes[0]["more_than_pod"]  # the counts it had more of than the pod
    assert same(found, found_mem)
    assert same(summary, summary_mem)


def test_sparse_medians_are_the_matrix_medians():
    """A step's median over its hosts from its values not 0 (the others 0) is nan_median's."""
    from tpuscope.analyze.pod_view import sparse_medians

    rng = np.random.default_rng(3)
    for hosts, steps in [(4, 30), (5, 50), (64, 200)]:
        matrix = np.where(rng.random((hosts, steps)) < 0.3, rng.integers(-3, 9, (hosts, steps)), 0)
        matrix = matrix.astype(np.float64)
        matrix[rng.random((hosts, steps)) < 0.1] = np.nan  # a host without that step
        seen = ~np.isnan(matrix)
        host, step = np.nonzero(seen & (np.nan_to_num(matrix) != 0))
        got = sparse_medians(seen.sum(axis=0), step, matrix[host, step])
        want = nan_median(matrix, 0)
        assert np.array_equal(got[seen.any(axis=0)], want[seen.any(axis=0)]), (hosts, steps)


def test_a_host_with_too_few_judged_steps_is_never_a_straggler(tmp_path):
    """A host lost after 3 judged steps (host-3 of the synthetic pod, 20 ms slower a step and
    cut short) is slower than the pod by more than the threshold, but 3 steps' median is as
    often a burst of the OS's scheduling (a loaded CI machine made a lost host 3 ms slow on 2
    steps): no straggler card, by hand and by pod_view alike. With 5 judged steps it is one."""
    run = Run(_make_pod()(tmp_path, 4, 40))
    slow = run.steps.copy()
    is_host3 = slow["host"] == "host-3"
    for column in ("wall_ns", "end_ns", "host_ns"):
        if column in slow:
            slow.loc[is_host3, column] += 20_000_000
    for kept, flagged in ((5, False), (7, True)):  # steps 2.. judged: 3, then 5 of them
        steps = slow[~is_host3 | (slow["step"] < kept)]
        whole = RunTables.from_run(run)
        tables = RunTables(
            whole.meta, steps, whole.compiles, whole.fallbacks, whole.metrics, whole.extra
        )
        (host3,) = [h for h in tables.pod_view["hosts"] if h["host"] == "host-3"]
        want = hand_figures(steps, 2, {f"host-{k}": 0 for k in range(4)})
        assert host3["steps"] == kept - 2
        assert host3["excess_ms"] > tables.pod_view["threshold_ms"]
        assert host3["straggler"] is flagged and want["view"]["host-3"]["straggler"] is flagged
        assert any(f.rule == "straggler" for f in detect(tables)) is flagged
