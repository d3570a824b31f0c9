"""Shared fixtures: real torch_xla runs on the CPU, made once per session and reused.

A real run costs seconds (XLA compiles on the CPU), so every test that needs one
asks `example_run(...)`, which runs `tpuscope run` once per distinct command line
per test session and hands back the run folder.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.object_stores import gcs_store, s3_store  # noqa: F401 (real GCS / S3 API servers)
from tpuscope.collect.session import launcher_lost_signal

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
# ../shared/real_traces beside the project (a worktree one folder deeper: ../../shared)
SHARED = next(
    (
        p / "shared" / "real_traces"
        for p in (ROOT.parent, ROOT.parent.parent)
        if (p / "shared" / "real_traces").exists()
    ),
    ROOT.parent / "shared" / "real_traces",
)

# The suite checks what compiles and when, never how fast the compiled code runs: XLA's CPU
# backend without LLVM's optimizations compiles the same HLO graphs in a third to a half of the
# CPU time (examples/train_transformer.py: 31 s to 19 s of CPU; corpus_tv_detect_postprocess.py
# 78 s to 21 s), inherited by every program a test starts (the truth runs keep it too).
FAST_CPU_COMPILE = "--xla_backend_optimization_level=0"
if FAST_CPU_COMPILE not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {FAST_CPU_COMPILE}".strip()

# tests/tpu_real needs the real torch_tpu, which cannot share an environment with torch_xla
# 2.9: it runs in .venv-torch-tpu, started by tests/test_tpu_real.py.
collect_ignore = [] if importlib.util.find_spec("torch_tpu") else ["tpu_real"]

# what tpuscope's launcher and session touch (the launcher-lost signal: Linux only)
_SIGNALS = [
    s
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGCHLD)
    + (launcher_lost_signal(),)
    if s is not None
]


def _signal_state() -> tuple[object, ...]:
    """This thread's blocked signals and the handlers tpuscope touches."""
    return (signal.pthread_sigmask(signal.SIG_BLOCK, []), *map(signal.getsignal, _SIGNALS))


@pytest.fixture(autouse=True)
def _signals_left_as_found() -> object:
    """tpuscope code run inside the test process (profile(), the plugin, the CLI) must leave its
    signal handlers and mask as it found them: a blocked or ignored SIGINT is inherited by every
    program started later, which a Ctrl-C then cannot stop."""
    before = _signal_state()
    yield
    after = _signal_state()
    assert after == before, f"signal state changed by this test: {before} -> {after}"


def real_trace(relative: str) -> Path:
    """A file from ../shared/real_traces, or skip the test when it is absent locally.

    In CI (CI=true) an absent file fails the test instead: a skipped fault test there would
    pass without testing anything."""
    path = SHARED / relative
    if not path.exists():
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"real trace not available in CI: {path}")
        pytest.skip(f"real trace not available: {path}")
    return path


def tpuscope_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "tpuscope", *args]


def marked_line(program: Path, marker: str) -> str:
    """`path:line` of the line of `program` holding `marker` (a comment a test program marks
    the line a card must stand at with)."""
    for number, text in enumerate(program.read_text().splitlines(), 1):
        if marker in text:
            return f"{program}:{number}"
    raise AssertionError(f"{marker} not in {program}")


def run_tpuscope(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    full_env.pop("PJRT_DEVICE", None) if env is None or "PJRT_DEVICE" not in env else None
    return subprocess.run(
        tpuscope_cmd(*args), cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="session")
def session_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("store")


@pytest.fixture(scope="session")
def example_run(session_store: Path):
    """example_run("train_transformer.py", "--steps", "6") -> (run folder, CompletedProcess)."""
    cache: dict[tuple[str, ...], tuple[Path, subprocess.CompletedProcess[str]]] = {}

    def get(
        script: str, *args: str, tpuscope_args: tuple[str, ...] = ()
    ) -> tuple[Path, subprocess.CompletedProcess[str]]:
        key = (script, *args, "|", *tpuscope_args)
        if key not in cache:
            name = f"t{len(cache)}-{Path(script).stem}"
            proc = run_tpuscope(
                "run",
                "--store",
                str(session_store),
                "--name",
                name,
                "--quiet",
                *tpuscope_args,
                "python",
                str(EXAMPLES / script),
                *args,
            )
            runs = sorted(p for p in session_store.iterdir() if p.name.startswith(f"{name}-"))
            assert runs, f"no run folder made: {proc.stderr}"
            cache[key] = (runs[-1], proc)
        return cache[key]

    return get
