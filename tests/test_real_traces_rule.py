"""The suite's rule for ../shared/real_traces: absent, a test skips on a developer's
machine and fails in CI (CI=true), where a skip would pass without testing anything."""

from __future__ import annotations

import pytest

from tests.conftest import SHARED, real_trace

ABSENT = "no-such-folder/no-such-trace.xplane.pb"


def test_an_absent_real_trace_fails_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="real trace not available in CI"):
        real_trace(ABSENT)


def test_an_absent_real_trace_skips_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="real trace not available"):
        real_trace(ABSENT)


def test_a_present_real_trace_is_its_path() -> None:
    present = (
        next((p for p in sorted(SHARED.rglob("*")) if p.is_file()), None)
        if SHARED.is_dir()
        else None
    )
    if present is None:
        real_trace("xplane")  # the folder is absent: skips here, fails in CI
    assert real_trace(str(present.relative_to(SHARED))) == present
