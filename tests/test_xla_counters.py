"""Splitting a metric's samples over the steps between two full reads (collect/xla/counters.py).

The end-to-end check on a real torch_xla run is in test_run.py
(test_metrics_are_split_over_steps_by_sample_time); these pin the edges a short run
does not reach: a sample buffer that overflowed between reads, samples after the last
step's end, steps that got nothing.
"""

from __future__ import annotations

import pytest

from tpuscope.collect.xla.counters import is_core_counter, split_by_step
from tpuscope.ingest.metrics_report import evidence_from_report, parse_metrics_report
from tpuscope.parse.xla_counter_names import is_fallback_counter

S = 1_000_000_000  # ns per second; torch_xla stamps samples in seconds


def test_samples_go_to_the_first_step_that_ended_after_them() -> None:
    metric = (4, 10.0, ((1.5, 1.0), (2.5, 2.0), (2.6, 3.0), (9.0, 4.0)))
    split = split_by_step({"M": metric}, {}, [0, 1, 2, 3], [2 * S, 3 * S, 4 * S, 5 * S])
    assert split == {
        0: {"M": (1, 1.0)},
        1: {"M": (2, 5.0)},
        3: {"M": (1, 4.0)},
    }  # 9.0 s: after the last end


def test_only_samples_since_the_previous_read_count() -> None:
    metric = (4, 10.0, ((1.5, 1.0), (2.5, 2.0), (2.6, 3.0), (9.0, 4.0)))
    split = split_by_step(
        {"M": metric, "Still": (2, 5.0, ((1.0, 5.0),))},
        {"M": (2, 3.0, ()), "Still": (2, 5.0, ())},
        [7, 8],
        [2 * S, 3 * S],
    )
    assert split == {8: {"M": (2, 7.0)}}


def test_samples_the_buffer_dropped_go_to_the_first_step_and_totals_stay_exact() -> None:
    metric = (1030, 2000.0, tuple((10.0 + i / 1000, 1.0) for i in range(1024)))
    split = split_by_step({"M": metric}, {}, [0, 1], [5 * S, 20 * S])
    assert split == {0: {"M": (6, pytest.approx(976.0))}, 1: {"M": (1024, 1024.0)}}
    assert sum(c for growth in split.values() for c, _ in growth.values()) == 1030


def test_dropped_samples_are_spread_over_the_steps_before_the_oldest_held_one() -> None:
    metric = (1031, 1031.0, tuple((10.0 + i / 1000, 1.0) for i in range(1024)))
    split = split_by_step({"M": metric}, {}, [0, 1, 2], [1 * S, 2 * S, 20 * S])
    assert split == {
        0: {"M": (4, pytest.approx(4.0))},
        1: {"M": (3, pytest.approx(3.0))},
        2: {"M": (1024, 1024.0)},
    }


# -- which counters are CPU fallbacks (issue 26: every namespace) ---------------------------------
@pytest.mark.parametrize(
    ("name", "fallback"),
    [
        ("aten::nonzero", True),
        ("aten::_embedding_bag_backward", True),
        ("aten::isin.Tensor_Tensor", True),
        ("torchvision::nms", True),
        ("torchvision::roi_align", True),  # measured: both fall back on torch_xla 2.9
        (
            "corpus_ops::numpy_tanh",
            True,
        ),  # a torch.library custom op with a CPU kernel only (corpus)
        (
            "aten::_local_scalar_dense",
            True,
        ),  # counted by the fallback too; the analysis calls it a value read
        ("xla::_to_cpu", False),
        ("xla::nms_kernel", False),
        ("xla::add", False),  # torch_xla's own kernels
        ("UncachedCompile", False),
        ("MarkStep", False),
        ("::odd", False),
        ("odd::", False),
    ],
)
def test_fallback_counters_are_every_namespace_but_torch_xla_s_own(
    name: str, fallback: bool
) -> None:
    assert is_fallback_counter(name) is fallback
    assert is_core_counter(name) is (
        fallback or name in ("UncachedCompile", "MarkStep", "xla::_to_cpu")
    )


def test_an_imported_metrics_report_names_fallbacks_in_every_namespace() -> None:
    report = parse_metrics_report(
        "Counter: torchvision::nms\n  Value: 3\nCounter: xla::nms_kernel\n  Value: 3\n"
        "Counter: aten::nonzero\n  Value: 2\n"
    )
    rows = evidence_from_report(report).rows["fallbacks"]
    assert {row["op"]: row["count"] for row in rows} == {"torchvision::nms": 3, "aten::nonzero": 2}
