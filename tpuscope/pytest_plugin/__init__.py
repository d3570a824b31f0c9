"""tpuscope's pytest plugin: assert zero recompiles and zero CPU fallbacks in any test
(torch_xla and JAX; how each is judged is in tpuscope.watch.engine and tpuscope.watch.jax_rules).

    @pytest.mark.tpuscope(max_recompiles=0, max_fallbacks=0, warmup_compiles=1)
    def test_decode_step_is_static(model, batch): ...

    def test_train_loop(tpuscope):
        with tpuscope.watch(warmup_compiles=1) as w:
            train_a_few_steps()
        w.assert_no_recompiles()

Loaded through the `pytest11` entry point and inert unless used: this package imports
only pytest and the standard library, and nothing else happens (no framework import,
no environment change, no per-test hook) until a collected test is watched — marked,
taking the `tpuscope` fixture, or run under `--tpuscope`. The work lives in
tpuscope.watch.engine; this is the pytest shell around it (docs/pytest.md).

The package, as pytest-benchmark splits its plugin: this module holds the hooks pytest finds
(options, configure, the fixture); options.py the command line; marker.py which tests are
watched; session.py the session object and its summary; runner.py the per-test hooks (the only
part that imports the watch engine); fixture.py what the fixture gives a test.
"""

from __future__ import annotations

from typing import cast

import pytest

from tpuscope.pytest_plugin.fixture import TpuscopeFixture
from tpuscope.pytest_plugin.marker import MARKER_HELP, SPEC_KEY, Spec, uses_tpuscope
from tpuscope.pytest_plugin.options import Options, add_options, check_store, is_xdist_controller
from tpuscope.pytest_plugin.session import PLUGIN_NAME, TpuscopePlugin

__all__ = ["pytest_addoption", "pytest_configure", "tpuscope", "uses_tpuscope"]


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_HELP)
    options = Options.from_config(config)
    if options.store is not None:
        check_store(options.store)
    plugin = TpuscopePlugin(config, options)
    config.pluginmanager.register(plugin, PLUGIN_NAME)
    if options.watch_all and not is_xdist_controller(config):
        plugin.ensure_runner()  # before test modules import (and start) the frameworks


@pytest.fixture
def tpuscope(request: pytest.FixtureRequest) -> TpuscopeFixture:
    """Watch blocks of this test for recompiles and CPU fallbacks (see docs/pytest.md)."""
    plugin = cast(TpuscopePlugin, request.config.pluginmanager.get_plugin(PLUGIN_NAME))
    spec = request.node.stash.get(SPEC_KEY, None) or Spec(manual=True)
    return TpuscopeFixture(request.node, plugin.ensure_runner(), spec)
