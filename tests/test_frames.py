"""The one rule for "the user's frame" (collect/frames), on paths and on live frames."""

from __future__ import annotations

import os
import sys
import sysconfig

from tpuscope.collect import frames

SITE = sysconfig.get_paths()["purelib"]
STDLIB = sysconfig.get_paths()["stdlib"]


def test_installed_packages_stdlib_frozen_and_tpuscope_are_not_the_users() -> None:
    for path in (
        f"{SITE}/transformers/generation/utils.py",
        "/usr/lib/python3/dist-packages/x.py",
        f"{STDLIB}/contextlib.py",
        "<frozen runpy>",
        frames.__file__,
        "<eval_with_key>.3",
    ):
        assert not frames.is_user_file(path), path


def test_the_users_files_even_when_their_path_names_a_framework() -> None:
    here = os.getcwd()
    for path in (
        f"{here}/torch/train.py",
        f"{here}/tests/programs/idioms.py",
        "train.py",
        "<string>",
        "/home/someone/project/train.py",
    ):
        assert frames.is_user_file(path), path
    assert not frames.is_user_file(
        "/opt/src/pytorch/torch/nn/modules/module.py"
    )  # a source checkout


def test_user_and_library_frames_of_a_call_inside_a_library() -> None:
    """Seen from inside a site-packages function the user called: the user's line is the
    call, the library frame is the package's line (as an import path)."""
    code = compile(
        "def library_call(probe):\n    return probe()\n", f"{SITE}/somelib/api.py", "exec"
    )
    namespace: dict = {}
    exec(code, namespace)
    user, library = namespace["library_call"](lambda: frames.user_and_library(sys._getframe(1)))
    assert user == f"{__file__}:{sys._getframe().f_lineno - 1}"
    assert library == "somelib/api.py:2"
    here = sys._getframe()
    assert frames.user_and_library(here) == (f"{__file__}:{here.f_lineno}", None)
    assert frames.import_path(f"{SITE}/transformers/x.py") == "transformers/x.py"
