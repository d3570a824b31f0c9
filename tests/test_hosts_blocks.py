"""Rows that come host after host are sliced, not grouped (detect/pod.by_host), and a host's
time of a step is its slowest process's (the pod view of a run in memory, by hand).

A pod's tables are read part after part, so each host's rows are one block; detect/pod.py then
slices instead of grouping. The slices are checked against the groupby they replace, on frames
they take and frames they must hand back to the groupby (shuffled rows).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tpuscope.analyze.hosts import host_blocks
from tpuscope.detect.pod import by_host


def steps_frame(hosts: int, steps: int, seed: int = 0, pids_per_host: int = 1) -> pd.DataFrame:
    """Step rows host after host, as the store reads a pod: random walls with ties."""
    rng = np.random.default_rng(seed)
    rows = []
    for k in range(hosts):
        for pid in range(pids_per_host):
            n = steps
            rows.append(
                pd.DataFrame(
                    {
                        "host": f"host-{k}",
                        "pid": 100 * k + pid,
                        "step": np.arange(n),
                        "wall_ns": rng.integers(10, 20, n) * 1_000_000,  # few values: many ties
                        "compile_ns": rng.integers(0, 3, n) * 1_000_000,
                        "execute_ns": rng.integers(5, 9, n) * 1_000_000,
                        "compiles": rng.integers(0, 2, n),
                        "fallback_ops": np.zeros(n, np.int64),
                        "transfers_from_device": rng.integers(0, 2, n),
                    }
                )
            )
    return pd.concat(rows, ignore_index=True)


def view_of(frame: pd.DataFrame) -> dict:
    """The pod view of these rows as a run in memory gets it (RunTables.pod_view), warm-up 0."""
    from tpuscope.detect.tables import RunTables

    empty = pd.DataFrame()
    return RunTables(
        meta={"warmup": 0}, steps=frame, compiles=empty, fallbacks=empty, metrics=empty
    ).pod_view


@pytest.mark.parametrize(("pids", "host_dtype"), [(1, "str"), (2, "str"), (2, "category")])
def test_a_hosts_step_is_its_slowest_process(pids: int, host_dtype: str) -> None:
    """Each host's median step and excess, by hand: a host's time of a step is the slowest of
    its processes' (two processes per host: the grouped path), the pod's the median over hosts;
    a categorical host (an ENUM to DuckDB) is found as its text."""
    frame = steps_frame(5, 40, pids_per_host=pids).astype({"host": host_dtype})
    per_step = frame.groupby(["host", "step"], observed=True)["wall_ns"].max().unstack()
    pod = per_step.median(axis=0)
    view = view_of(frame.sample(frac=1, random_state=2))  # any row order
    for got in view["hosts"]:
        mine = per_step.loc[got["host"]]
        assert got["steps"] == 40
        assert got["p50_ms"] == mine.median() / 1e6
        assert got["excess_ms"] == (mine - pod).median() / 1e6


def test_host_slices_are_the_groupby_split() -> None:
    frame = steps_frame(6, 20)
    for shaped in (frame, frame.sample(frac=1, random_state=1), frame.astype({"host": "category"})):
        grouped = {str(h): part for h, part in shaped.groupby("host", sort=False, observed=True)}
        sliced = by_host(shaped)
        assert list(sliced) == list(grouped)
        for host, part in grouped.items():
            pd.testing.assert_frame_equal(sliced[host], part, check_exact=True)


def test_host_blocks_only_for_one_block_per_host() -> None:
    frame = steps_frame(3, 5)
    starts, labels = host_blocks(frame)
    assert list(starts) == [0, 5, 10] and labels == ["host-0", "host-1", "host-2"]
    assert host_blocks(frame.sort_values(["step", "host"], kind="stable")) is None
