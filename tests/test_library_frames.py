"""A library is known by where it is installed, not by how its path is spelled (issue 39).

Real installs, real runs: a throwaway package is built as a wheel and installed with
`pip install --target DIR` (a folder named nothing like site-packages, as on many TPU images),
then a program whose library comes from PYTHONPATH=DIR runs under `tpuscope run`: its cards
must land at the user's line, with the library's frame beside it. Keras 3 on JAX, installed
the same way, is the issue's own case (skipped where pip cannot install it). The path rules
themselves (src layouts, `pip install --target .`, JAX's shortened HLO file names): below.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import run_tpuscope
from tpuscope import user_files

STEPLIB = '''"""A training loop a library owns (like keras's fit): it jits the step itself."""
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp

_POOL = ThreadPoolExecutor(1)


@jax.jit
def train_step(w, x):
    loss = jnp.mean((x @ w) ** 2)
    return w - 0.01 * jax.grad(lambda v: jnp.mean((x @ v) ** 2))(w), loss


def _log(loss):
    return float(loss)  # the library's own read of the loss


def fit(w, data, batch, logs):
    """One epoch; the last batch is short (no drop_last). `logs`: where the loss is read:
    'sync' on the caller's thread every batch, 'async' on the library's own thread."""
    futures = []
    for start in range(0, len(data), batch):
        w, loss = train_step(w, data[start : start + batch])
        if logs == "sync":
            _log(loss)
        else:
            futures.append(_POOL.submit(_log, loss))
    for future in futures:
        future.result()
    return w
'''

PROGRAM = """import sys

import numpy as np
import steplib

data = np.ones((168, 64), np.float32)
w = np.ones((64,), np.float32)
for epoch in range(2):
    w = steplib.fit(w, data, 32, sys.argv[1])  # user: fit
print("done")
"""


def _wheel(folder: Path, name: str, files: dict[str, str]) -> Path:
    """A pure-Python wheel of `files` (path -> text), made by hand: what pip installs."""
    dist = f"{name}-0.1.dist-info"
    files = {
        **files,
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{dist}/top_level.txt": f"{name}\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    record.append(f"{dist}/RECORD,,")
    wheel = folder / f"{name}-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
        zf.writestr(f"{dist}/RECORD", "\n".join(record) + "\n")
    return wheel


def _pip_target(target: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        + ["--no-deps", "--target", str(target), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def _run(store: Path, cwd: Path, target: Path, *program: str) -> dict:
    env = {"PYTHONPATH": os.pathsep.join([str(target), os.environ.get("PYTHONPATH", "")])}
    proc = run_tpuscope(
        "run", "--store", str(store), "--quiet", "python", *program, cwd=cwd, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    shown = run_tpuscope("show", "latest", "--store", str(store), "--json")
    assert shown.returncode == 0, shown.stderr[-3000:]
    return json.loads(shown.stdout)


@pytest.fixture(scope="module")
def steplib_install(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the --target folder holding steplib, the program's folder)."""
    pytest.importorskip("jax")
    root = tmp_path_factory.mktemp("libframes")
    target = root / "opt" / "libs"  # no site-packages in its path
    wheel = _wheel(root, "steplib", {"steplib/__init__.py": STEPLIB})
    proc = _pip_target(target, "--no-index", str(wheel))
    assert proc.returncode == 0, proc.stderr
    assert (target / "steplib-0.1.dist-info").is_dir()
    program = root / "work"
    program.mkdir()
    (program / "train.py").write_text(PROGRAM)
    return target, program


def _fit_line(program: Path) -> str:
    lines = (program / "train.py").read_text().splitlines()
    return (
        f"{program / 'train.py'}:{next(i for i, t in enumerate(lines) if '# user: fit' in t) + 1}"
    )


def test_a_library_installed_with_pip_target_is_a_library(
    steplib_install: tuple[Path, Path], tmp_path: Path
) -> None:
    """The ragged last batch recompiles the library's jitted step: the card is at the user's
    fit line, not in steplib; the per-batch read on the program's thread is a host sync there,
    with the library's read named as the line inside."""
    target, program = steplib_install
    report = _run(tmp_path / "store", program, target, "train.py", "sync")
    found = {(f["rule"], f.get("location")) for f in report["findings"]}
    fit = _fit_line(program)
    assert ("recompile", fit) in found, found
    assert ("host_sync", fit) in found, found
    assert not any(str(target) in str(loc) for _, loc in found), found
    sync = next(f for f in report["findings"] if f["rule"] == "host_sync")
    inside = json.dumps(sync.get("evidence"))
    assert "steplib/__init__.py" in inside and str(target) not in inside, inside


def test_a_read_on_the_librarys_own_thread_is_no_host_sync_of_the_program(
    steplib_install: tuple[Path, Path], tmp_path: Path
) -> None:
    """keras on JAX reads each batch's logs on its callback thread (CallbackList's async
    dispatch): the program's thread never waits on it, and no user line made it."""
    target, program = steplib_install
    report = _run(tmp_path / "store", program, target, "train.py", "async")
    rules = {(f["rule"], f.get("location")) for f in report["findings"]}
    assert ("recompile", _fit_line(program)) in rules, rules
    assert not any(rule == "host_sync" for rule, _ in rules), rules


def test_keras_installed_with_pip_target(tmp_path: Path) -> None:
    """The issue's case: keras 3 `fit` on JAX from a --target folder; the one recompile (the
    short last batch) is at the user's fit line, never in keras's traceback_utils.py."""
    pytest.importorskip("jax")
    target = tmp_path / "keras-target"
    proc = _pip_target(target, "keras", "namex", "optree", "h5py")
    if proc.returncode != 0:
        pytest.skip(f"keras cannot be installed here: {proc.stderr[-300:]}")
    corpus = Path(__file__).parent / "corpus"
    report = _run(tmp_path / "store", tmp_path, target, str(corpus / "corpus_jax_keras_fit.py"))
    lines = (corpus / "corpus_jax_keras_fit.py").read_text().splitlines()
    fit = next(i for i, t in enumerate(lines) if "# corpus: fit" in t) + 1
    found = {(f["rule"], f.get("location")) for f in report["findings"]}
    assert found == {("recompile", f"{corpus / 'corpus_jax_keras_fit.py'}:{fit}")}, found


# -- the path rules, on this process's sys.path --------------------------------------------


@pytest.fixture
def fresh_rules() -> Iterator[None]:
    """The rules' caches emptied before and after (they hold answers per sys.path)."""

    def clear() -> None:
        for cached in (
            user_files.is_user_file,
            user_files.library_root,
            user_files._installed_tops,
            user_files._folder_tops,
        ):
            cached.cache_clear()
        user_files._forget_kinds()

    clear()
    yield
    clear()


def test_path_rules(
    steplib_install: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fresh_rules: None,
) -> None:
    target, _ = steplib_install
    here = Path.cwd()  # the program's own folder (where it started)
    library = f"{target}/steplib/__init__.py"
    # not on sys.path, but its dist-info beside it says it is installed (a run made with
    # PYTHONPATH=DIR, read without it); a file of that folder no distribution declares is not
    assert not user_files.is_user_file(library)
    (target / "undeclared").mkdir(exist_ok=True)
    (target / "undeclared" / "x.py").write_text("x = 1\n")
    assert user_files.is_user_file(f"{target}/undeclared/x.py")
    monkeypatch.setattr(sys, "path", [*sys.path, str(target), str(here / "src")])
    user_files.is_user_file.cache_clear()
    user_files.library_root.cache_clear()
    assert not user_files.is_user_file(library)
    assert user_files.import_path(library) == "steplib/__init__.py"
    assert user_files.is_user_file(f"{here}/src/mypkg/model.py")  # a src layout is the user's
    project = tmp_path / "proj"  # PYTHONPATH=proj python proj/scripts/train.py, from elsewhere
    monkeypatch.setattr(user_files, "_own_folders", lambda: (f"{project}/scripts/",))
    monkeypatch.setattr(sys, "path", [*sys.path, str(project)])
    for cached in (user_files.is_user_file, user_files.library_root):
        cached.cache_clear()
    assert user_files.is_user_file(f"{project}/proj/model.py")
    assert not user_files.is_user_file(library)
    assert not user_files.is_user_file("steplib/__init__.py")  # a shortened HLO file name
    assert user_files.is_user_file("train.py")


def test_a_single_module_distribution_off_sys_path(tmp_path: Path, fresh_rules: None) -> None:
    """A distribution of one top-level module (six's form: `six.py` beside its dist-info),
    installed with `pip install --target` and not on sys.path, is a library; a module beside it
    that no distribution declares is not."""
    target = tmp_path / "site"
    proc = _pip_target(
        target, "--no-index", str(_wheel(tmp_path, "onemod", {"onemod.py": "x = 1\n"}))
    )
    assert proc.returncode == 0, proc.stderr
    (target / "mine.py").write_text("y = 2\n")
    assert not user_files.is_user_file(f"{target}/onemod.py")
    assert user_files.is_user_file(f"{target}/mine.py")


def test_a_distribution_installed_in_the_programs_folder(
    steplib_install: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, fresh_rules: None
) -> None:
    """`pip install --target .`: the distribution's files are a library, the rest is the user's."""
    target, _ = steplib_install
    monkeypatch.setattr(user_files, "_own_folders", lambda: (f"{target}/",))
    monkeypatch.setattr(sys, "path", [*sys.path, str(target)])
    assert not user_files.is_user_file(f"{target}/steplib/__init__.py")
    assert user_files.is_user_file(f"{target}/train.py")


def test_a_program_folder_named_by_its_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_rules: None
) -> None:
    """pytest puts a suite's folders on sys.path whatever folder it started in: the plugin
    names its rootdir as the program's own, so the tests' lines stay the user's."""
    suite = tmp_path / "suite"
    monkeypatch.setattr(sys, "path", [*sys.path, str(suite / "tests")])
    monkeypatch.setattr(user_files, "_ADDED", [])
    user_files._own_folders.cache_clear()
    assert not user_files.is_user_file(f"{suite}/tests/test_x.py")
    assert user_files.frame_kind(f"{suite}/tests/test_x.py") == user_files.LIBRARY
    user_files.add_program_folder(str(suite))
    assert user_files.is_user_file(f"{suite}/tests/test_x.py")
    assert user_files.frame_kind(f"{suite}/tests/test_x.py") == user_files.USER  # cache cleared
    monkeypatch.undo()
    user_files._own_folders.cache_clear()


def test_the_program_folders_a_run_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_rules: None
) -> None:
    """The launcher reads the HLO dumps' stacks after the program ended, from its own folder
    and sys.path: the run's meta names the program's (cwd, the script's folder)."""
    project = tmp_path / "proj"
    monkeypatch.setattr(sys, "path", [*sys.path, str(project), str(tmp_path / "libs")])
    monkeypatch.setattr(user_files, "_ADDED", [])
    user_files._own_folders.cache_clear()
    assert not user_files.is_user_file(f"{project}/scripts/train.py")
    user_files.add_program_folders(
        {"cwd": str(tmp_path / "elsewhere"), "argv": ["python", f"{project}/scripts/train.py"]}
    )
    assert user_files.is_user_file(f"{project}/scripts/train.py")
    assert user_files.is_user_file(f"{project}/proj/model.py")  # the script's project
    assert not user_files.is_user_file(f"{tmp_path}/libs/lib/x.py")  # an install folder
    monkeypatch.undo()
    user_files._own_folders.cache_clear()


def test_a_runs_install_folders_read_on_another_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_rules: None
) -> None:
    """A run made on a TPU VM with flax under `pip --target /tmp/site`, analysed here: its
    meta's `library_folders` (that process's sys.path apart from its folders) say the folder
    is an install one; an older run's meta lacks them, and a path this machine lacks whose tail
    is a file of a library installed here (flax's, in this suite's environment) is that
    library's. The program's own lines stay the user's."""
    pytest.importorskip("flax")
    monkeypatch.setattr(user_files, "_ADDED", [])
    monkeypatch.setattr(user_files, "_RUN_LIBRARIES", [])
    monkeypatch.setattr(user_files, "_ENTRIES", ((), ()))
    user_files._own_folders.cache_clear()
    foreign = "/nonexistent-vm/site"
    assert user_files.is_user_file(f"{foreign}/mylib/layers.py")  # nothing says otherwise
    assert not user_files.is_user_file(f"{foreign}/flax/linen/attention.py")  # flax's tail
    user_files.add_program_folders(
        {"cwd": "/nonexistent-vm/work", "library_folders": [f"{foreign}/"]}
    )
    assert not user_files.is_user_file(f"{foreign}/mylib/layers.py")  # the run's install folder
    assert user_files.is_user_file("/nonexistent-vm/work/train.py")
    here = user_files.library_folders()
    assert f"{foreign}/" not in here and any("site-packages" in f for f in here)
    monkeypatch.undo()
    user_files._own_folders.cache_clear()
    user_files._ENTRIES = ((), ())
