"""The step-time interval's bootstrap draws each resample's median from its exact distribution
(analyze/compare._medians); it must be the distribution the brute-force bootstrap gives."""

from __future__ import annotations

import numpy as np
import pytest

from tpuscope.analyze.compare import _medians


@pytest.mark.parametrize("n", [1, 2, 5, 8, 31])
@pytest.mark.parametrize("ties", [False, True])
def test_the_drawn_medians_have_the_bootstrap_distribution(n: int, ties: bool) -> None:
    values = np.random.default_rng(n).lognormal(0, 0.5, n)
    values = np.round(values, 1) if ties else values
    resamples = 40_000
    brute = np.median(values[np.random.default_rng(1).integers(0, n, (resamples, n))], axis=1)
    drawn = _medians(values, np.random.default_rng(2), resamples)
    support = np.union1d(brute, drawn)
    gap = max(abs((brute == v).mean() - (drawn == v).mean()) for v in support)
    assert gap < 0.012  # 5 sigma of two 40k-sample frequencies
    assert np.isin(drawn, np.union1d(values, (values[:, None] + values) / 2)).all()
