"""The pod view's shortcuts for rows that come host after host give what pandas' groupby gives.

A pod's tables are read part after part, so each host's rows are one block; analyze/hosts.py
and detect/pod.py then slice instead of grouping, and take the pod's per-step medians from a
host x step matrix. Each shortcut is checked here against the groupby it replaces, on frames
it takes (every host one block of the same steps, odd and even host counts, tied values) and
frames it must hand back to the groupby (interleaved hosts, a host missing a step, two
processes on a host, a missing value).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tpuscope.analyze.hosts import PodMedians, host_blocks, per_host_steps
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


def grouped_per_host_steps(judged: pd.DataFrame) -> pd.DataFrame:
    """per_host_steps as the groupby computes it (the path taken when no shortcut applies)."""
    shuffled = judged.iloc[::-1]  # not one block per host in order: no shortcut
    return per_host_steps(shuffled).iloc[::-1].reset_index(drop=True)


PARTS = ["wall_ns", "compile_ns", "execute_ns", "host_ns", "compiles"]


def assert_medians_are_the_groupby(rows: pd.DataFrame) -> None:
    """PodMedians' every row and some rows picked by position equal the grouped transform."""
    expected = rows.groupby("step", sort=False)[PARTS].transform("median")
    pod = PodMedians(rows, PARTS)
    got = pd.DataFrame({c: pod.column(c) for c in PARTS}, index=rows.index)
    pd.testing.assert_frame_equal(got, expected, check_exact=True)
    picked = np.random.default_rng(1).choice(len(rows), size=min(len(rows), 25), replace=False)
    for c in PARTS:
        np.testing.assert_array_equal(pod.at(c, picked), expected[c].to_numpy()[picked])


@pytest.mark.parametrize("hosts", [2, 3, 64])
def test_the_matrix_medians_are_the_groupby_medians(hosts: int) -> None:
    rows = per_host_steps(steps_frame(hosts, 50, seed=hosts))
    assert host_blocks(rows) is not None  # the shortcut is taken
    assert_medians_are_the_groupby(rows)


def test_frames_the_shortcut_must_not_take_get_the_groupby() -> None:
    rows = per_host_steps(steps_frame(4, 30))
    missing = rows.drop(index=rows.index[5])  # host-0 lost a step
    interleaved = rows.sort_values(["step", "host"], kind="stable")
    gap = rows.astype({"compile_ns": "float64"})
    gap.loc[gap.index[7], "compile_ns"] = np.nan
    for frame in (missing, interleaved, gap):
        assert_medians_are_the_groupby(frame)


@pytest.mark.parametrize("pids", [1, 2])
def test_one_row_per_host_and_step_as_the_groupby_makes_it(pids: int) -> None:
    judged = steps_frame(5, 40, pids_per_host=pids)
    pd.testing.assert_frame_equal(
        per_host_steps(judged), grouped_per_host_steps(judged), check_exact=True
    )


def test_host_slices_are_the_groupby_split() -> None:
    frame = steps_frame(6, 20)
    for shaped in (frame, frame.sample(frac=1, random_state=1), frame.astype({"host": "category"})):
        grouped = {str(h): part for h, part in shaped.groupby("host", sort=False, observed=True)}
        sliced = by_host(shaped)
        assert list(sliced) == list(grouped)
        for host, part in grouped.items():
            pd.testing.assert_frame_equal(sliced[host], part, check_exact=True)
