"""The one environment policy: what tpuscope sets so torch_xla and XLA tell it what it needs.

Two ways, one set of rules (a variable the user set is read, never replaced):
- a child (`tpuscope run`): `build_env` writes the variables into the child's environment
  before it starts, so they are in place before anything reads them;
- this process (`tpuscope.profile()`, a pytest watch): `prepare` sets them at the last safe
  moment, described below.

In this process: torch_xla reads PT_XLA_DEBUG_LEVEL and PT_XLA_DEBUG_FILE once, at its first
compile (measured: a file named later is never written), and keeps writing that one file for
the life of the process. A test process starts torch_xla long before any watch, so
`prepare()` arranges for the variables to be set when torch_xla is imported (a
post-import hook; at once if it already is and has not compiled yet), and
`release_if_read()` takes them out of os.environ again once torch_xla has compiled,
so programs that tests start later do not inherit them. Every watch of the process
tails the same file from where it stands.

XLA reads XLA_FLAGS even earlier, when its client starts (the first device use, often
at a test module's import), so the HLO dump that gives each compile its input shapes
(the "what changed" of a recompile, tpuscope.collect.xla.shapes) is turned on at the
same moment, into one folder for the process that every watch empties as it starts
and shows to its collector through `exposed()`.

Values tpuscope set carry TPUSCOPE_OWNS_PT_XLA_DEBUG=1, so a process started meanwhile
(another pytest, `tpuscope run`) takes its own file instead of writing into this one.
"""

from __future__ import annotations

import glob
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tpuscope.collect import envvars
from tpuscope.collect.envvars import ENV_OWNS_DEBUG
from tpuscope.collect.xla.ir_frames import ENV_IR_FRAMES
from tpuscope.store import layout

LEVEL, FILE = "PT_XLA_DEBUG_LEVEL", "PT_XLA_DEBUG_FILE"
BOOT_DIR = Path(__file__).parent.parent / "_boot"
# torch_xla prints 8 Python frames per compile by default: inside transformers' generate()
# that is all library code, and the user's line is cut off
DEBUG_DEFAULTS = {"PT_XLA_DEBUG_MAX_FRAME": "64"}


def tpu_present() -> bool:
    return bool(
        glob.glob("/dev/accel*")
        or glob.glob("/dev/vfio/[0-9]*")
        or os.environ.get("TPU_ACCELERATOR_TYPE")
    )


@dataclass
class ChildEnv:
    """The child's environment and the variables tpuscope set in it (kept in meta)."""

    env: dict[str, str]
    set_by_tpuscope: dict[str, str] = field(default_factory=dict)
    left_to_user: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def set_default(self, name: str, value: str) -> bool:
        if name in self.env:
            self.left_to_user.append(name)
            return False
        self.env[name] = value
        self.set_by_tpuscope[name] = value
        return True


def build_env(
    run_dir: Path,
    warmup: int,
    deep: bool,
    base: dict[str, str] | None = None,
    host: str | None = None,
) -> ChildEnv:
    """`host`: this host of a pod (its --deep dumps go to a folder of its own)."""
    child = ChildEnv(env=dict(os.environ if base is None else base))
    env = child.env
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(BOOT_DIR), env.get("PYTHONPATH", "")) if p)
    env[envvars.ENV_RUN_DIR] = str(run_dir.resolve())
    env[envvars.ENV_WARMUP] = str(warmup)
    env["TPUSCOPE_SRC"] = str(Path(__file__).resolve().parents[2])
    if not tpu_present():
        child.set_default(
            "PJRT_DEVICE", "CPU"
        )  # said after the run, if torch_xla ran (cli.backend_note)
    for name, value in DEBUG_DEFAULTS.items():
        child.set_default(name, value)
    # level 1 under --deep too: level 2 analyses every execution (~15-30 us and 3 KB of text
    # each, docs/overhead.md); the compile blocks are what the findings read
    if child.set_default("PT_XLA_DEBUG_LEVEL", "1"):
        env[ENV_OWNS_DEBUG] = "1"
        child.set_by_tpuscope["PT_XLA_DEBUG_FILE"] = str(
            run_dir / layout.debug_file("<host>", "<pid>")
        )
    if deep:
        frames = [child.set_default(name, "1") for name in ("XLA_IR_DEBUG", "XLA_HLO_DEBUG")]
        if all(frames):  # tpuscope's own: captured while graphs are new (collect/xla/ir_frames.py)
            env[ENV_IR_FRAMES] = "compiles"
        flags = env.get("XLA_FLAGS", "")
        if "--xla_dump_to" in flags:
            child.left_to_user.append("XLA_FLAGS --xla_dump_to")
        else:
            dump = f"--xla_dump_to={layout.hlo_dir(run_dir.resolve(), host)} --xla_dump_hlo_as_text --xla_dump_hlo_as_proto"
            env["XLA_FLAGS"] = f"{flags} {dump}".strip()
            child.set_by_tpuscope["XLA_FLAGS"] = env["XLA_FLAGS"]
    return child


@dataclass
class ProcessSettings:
    """What this process's watches can rely on, and what tpuscope changed to get it."""

    folder: Path
    file: str | None = None  # the PT_XLA_DEBUG text torch_xla writes in this process
    set_vars: dict[str, str] = field(default_factory=dict)  # kept in each run's meta
    note: str | None = None  # why compile causes are missing, when they are
    dump_dir: Path | None = None  # the HLO dump folder tpuscope chose (never the user's)
    previous: dict[str, str] = field(default_factory=dict)  # values set_vars replaced
    shapes: bool = True  # add XLA's HLO dump for per-compile input shapes
    applied: bool = False
    released: bool = False

    def release_if_read(self) -> None:
        if self.set_vars and not self.released and torch_xla_compiled():
            self._unset()

    def _unset(self) -> None:
        for name, value in self.set_vars.items():
            if os.environ.get(name) == value:
                if name in self.previous:
                    os.environ[name] = self.previous[name]
                else:
                    del os.environ[name]
        self.released = True

    @contextmanager
    def exposed(self) -> Iterator[None]:
        """While a collector starts: XLA_FLAGS as XLA read them (even once released), and
        without the TPUSCOPE_XLA_DUMP_DIR mark but with TPUSCOPE_XLA_DUMP_READ, so the
        collector reads and empties the dump folder in effect instead of naming a new one
        XLA would ignore. The mark stays otherwise, so a tpuscope process started from here
        uses a folder of its own. With no folder of tpuscope's (shapes off, or torch_xla
        started first) the collector adds none either: XLA has read its flags or will read
        them without one (a user's own --xla_dump_to is still read)."""
        from tpuscope.collect.xla.shapes import ENV_DUMP_DIR, ENV_DUMP_READ, ENV_SWITCH

        saved = {
            name: os.environ.get(name)
            for name in ("XLA_FLAGS", ENV_DUMP_DIR, ENV_DUMP_READ, ENV_SWITCH)
        }
        if self.dump_dir is None:
            os.environ[ENV_SWITCH] = "0"
        else:
            os.environ["XLA_FLAGS"] = self.set_vars["XLA_FLAGS"]
            os.environ.pop(ENV_DUMP_DIR, None)
            os.environ[ENV_DUMP_READ] = str(self.dump_dir)
        try:
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

    def clear_dump(self) -> None:
        """Empty tpuscope's dump folder, so a new watch reads only its own modules."""
        if self.dump_dir is not None and self.dump_dir.is_dir():
            for entry in self.dump_dir.iterdir():
                if entry.is_dir():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)


_state: ProcessSettings | None = None
_hooked = False
# The PT_XLA_DEBUG file torch_xla read in this process: it writes that one file until the
# process ends, so a later profile() (after reset()) reads it too instead of finding no causes.
_read_file: list[str] = []


def torch_xla_compiled() -> bool:
    """True once torch_xla has compiled a graph in this process (never imports it)."""
    module = sys.modules.get("torch_xla")
    try:
        data = module._XLAC._xla_metric_data("CompileTime") if module is not None else None
    except (AttributeError, RuntimeError):  # torch_xla half imported
        return False
    return bool(data and data[0])


def prepare(folder: str | Path | None = None, shapes: bool = True) -> ProcessSettings:
    """Arrange this process's settings once; later calls return the same object.

    shapes=False (or TPUSCOPE_HLO_SHAPES=0) leaves XLA's dump off: no "what changed",
    and compiles do not pay for the dump (docs/overhead.md, "Shapes in the default mode")."""
    global _state, _hooked
    if _state is None:
        _state = ProcessSettings(
            folder=Path(folder or tempfile.mkdtemp(prefix="tpuscope-watch-")), shapes=shapes
        )
        if sys.modules.get("torch_xla") is not None:
            _apply(_state)
        elif not _hooked:
            import wrapt  # this process only: the launcher's own start-up never needs it

            _hooked = True
            wrapt.register_post_import_hook(_on_torch_xla_import, "torch_xla")
    return _state


def current() -> ProcessSettings | None:
    return _state


def _on_torch_xla_import(module: object) -> None:
    if _state is not None and not _state.applied:
        _apply(_state)


def _apply(state: ProcessSettings) -> None:
    state.applied = True
    if torch_xla_compiled():  # too late for either setting
        state.file = os.environ.get(FILE) if os.environ.get(LEVEL) not in (None, "0") else None
        if state.file is None and _read_file:  # an earlier block's: torch_xla still writes it
            state.file = _read_file[-1]
        if state.file is None:
            state.note = (
                f"torch_xla compiled before tpuscope could turn PT_XLA_DEBUG on; set {LEVEL}=1 "
                f"and {FILE}=<file> yourself to get causes and frames"
            )
        return
    _enable_debug_text(state)
    from tpuscope.collect import autostart

    if autostart.active_session() is None:  # else the running watch's collector sets its own dump
        _enable_hlo_dump(state)


def _enable_debug_text(state: ProcessSettings) -> None:
    level, file = os.environ.get(LEVEL), os.environ.get(FILE)
    inherited = os.environ.get(ENV_OWNS_DEBUG) == "1"  # set by a tpuscope parent, not the user
    if level is not None and not inherited:
        state.file = file if level != "0" else None
        if not file:
            state.note = (
                f"{LEVEL} is set without {FILE}, so compile causes went to stderr "
                "instead of to tpuscope"
            )
        return
    state.set_vars.update({LEVEL: level or "1", ENV_OWNS_DEBUG: "1"})
    state.set_vars.update({k: v for k, v in DEBUG_DEFAULTS.items() if k not in os.environ})
    if inherited or not file:
        state.folder.mkdir(parents=True, exist_ok=True)
        state.set_vars[FILE] = str(state.folder / f"pt_xla_debug-{os.getpid()}.txt")
    os.environ.update(state.set_vars)
    state.file = os.environ[FILE]


def _enable_hlo_dump(state: ProcessSettings) -> None:
    """Input shapes per compile: XLA's own HLO dump (collect/xla/shapes.py decides when:
    not over the user's own dump flags, not with TPUSCOPE_HLO_SHAPES=0).

    Watches read it through `exposed()`."""
    from tpuscope.collect.xla.shapes import ENV_DUMP_DIR, HloDumpShapes

    if not state.shapes:
        return
    before = os.environ.get("XLA_FLAGS")
    reader, env_set = HloDumpShapes.enable(state.folder / "hlo")
    if reader is not None and "XLA_FLAGS" in env_set:
        state.set_vars["XLA_FLAGS"] = os.environ["XLA_FLAGS"]
        state.set_vars[ENV_DUMP_DIR] = os.environ[ENV_DUMP_DIR]
        if before is not None:
            state.previous["XLA_FLAGS"] = before
        state.dump_dir = reader.folder


def reset() -> None:
    """Undo prepare() (pytest_unconfigure): variables tpuscope set leave os.environ."""
    global _state
    if _state is not None and LEVEL in _state.set_vars and _state.file and torch_xla_compiled():
        _read_file[:] = [
            _state.file
        ]  # torch_xla read it (tpuscope turned it on) and goes on writing it
    if _state is not None and not _state.released:
        _state._unset()
    _state = None
