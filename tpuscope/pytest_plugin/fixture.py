"""What the `tpuscope` fixture gives a test: watches it places itself (never imports the session)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tpuscope.pytest_plugin.marker import WATCHES_KEY, Spec

if TYPE_CHECKING:
    from tpuscope.pytest_plugin.runner import WatchRunner
    from tpuscope.watch.engine import Watch


class TpuscopeFixture:
    """What the `tpuscope` fixture gives a test: `with tpuscope.watch(warmup_compiles=1) as w:`."""

    def __init__(self, item: pytest.Item, runner: WatchRunner, spec: Spec) -> None:
        self._item = item
        self._runner = runner
        self._spec = spec

    def watch(
        self,
        warmup_compiles: int | None = None,
        name: str | None = None,
        *,
        warmup_steps: int | None = None,
    ) -> Watch:
        """A new Watch of this test (the marker's warmup_compiles by default; warmup_steps is
        its older name)."""
        given = warmup_steps if warmup_compiles is None else warmup_compiles
        compiles = self._spec.warmup_compiles if given is None else given
        return self._runner.new_watch(self._item, compiles, name)

    @property
    def watches(self) -> list[Watch]:
        watches: list[Watch] = self._item.stash.get(WATCHES_KEY, [])
        return list(watches)
