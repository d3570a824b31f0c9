"""Every example a `--help` shows works (issue 29: `query ... --csv` in `query --help` crashed on a
list column). The examples of the commands that read or import runs are run as written, in a
folder whose `./tpuscope-runs` holds golden sample runs copied under the examples' run ids
(`exp42`, `baseline-20261201...`) and whose files are real artifacts under the examples' names
(metrics.txt, pt_xla_debug.txt, logs/*.txt, plugins/profile_logdir, xprof_tool_outputs/); only
an object-store URL is read as the local store. The examples that start a program (`run`,
`bench`) or a server (`dashboard`) are parsed by the command line itself (every option and value
valid): `tpuscope run` and `bench` are run for real by test_run.py and test_bench.py."""

from __future__ import annotations

import csv
import glob
import io
import os
import re
import shlex
import shutil
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from tests.conftest import ROOT, real_trace
from tpuscope.cli.main import main

STARTS_SOMETHING = {"run", "bench", "dashboard", "sweep"}
STORE = "./tpuscope-runs"


def examples() -> list[tuple[str, str]]:
    """(command, example line) of every `--help`, the group's own included."""
    found = []
    for name, command in [("tpuscope", main), *sorted(main.commands.items())]:
        lines = (command.help or "").splitlines()
        starts = [i for i, line in enumerate(lines) if re.match(r"\s*Examples?:\s*$", line)]
        for line in lines[starts[0] + 1 :] if starts else []:
            if not line.strip():
                break
            found.append((name, line.strip()))
    return found


def commands(example: str) -> list[list[str]]:
    """The tpuscope commands of an example line: `&&` splits, a `> file` and a comment go."""
    out = []
    for part in example.split("&&"):
        words = shlex.split(part, comments=True)
        if ">" in words:
            words = words[: words.index(">")]
        assert words[0] == "tpuscope", example
        words = [w.replace("gs://my-bucket/tpuscope", STORE) for w in words[1:]]
        expanded = [
            hit
            for w in words
            for hit in (sorted(glob.glob(w)) if "*" in w and " " not in w else [w])
        ]
        out.append(expanded)
    return out


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A working folder holding ./tpuscope-runs and the files the examples name."""
    here = tmp_path_factory.mktemp("examples")
    store = here / "tpuscope-runs"
    for sample, run_id in (
        ("fallback_host_sync", "baseline-20261201-000000-aaaa"),
        ("clean_static", "train_transformer-20261129-000000-bbbb"),
        ("recompile_storm", "exp42"),
    ):
        shutil.copytree(ROOT / "sample_traces" / sample, store / run_id)
    metrics = real_trace(
        "metrics_reports/fastai_xla_extensions_XLA_run_debug_base_grid_sample_tpu_xrt"
        ".metrics_report.txt"
    )
    debug = real_trace(
        "pt_xla_debug/pytorch_xla_troubleshooting_2024-05_parallel_loader_decoder_only"
        ".pt_xla_debug.txt"
    )
    shutil.copy(metrics, here / "metrics.txt")
    shutil.copy(debug, here / "pt_xla_debug.txt")
    (here / "logs").mkdir()
    shutil.copy(metrics, here / "logs" / "metrics.txt")
    profile = here / "plugins" / "profile_logdir" / "plugins" / "profile" / "2025_12_10"
    profile.mkdir(parents=True)
    shutil.copy(
        real_trace("xplane/tpu_inference_2.xplane.pb"), profile / "tpu_inference_2.xplane.pb"
    )
    tools = here / "xprof_tool_outputs"
    tools.mkdir()
    for name in ("overview_page", "hlo_stats", "op_profile"):
        source = real_trace(
            f"xplane/xprof_golden_tpu_training/data_tpu-training_{name}_tpu_training.json.gz"
        )
        shutil.copy(source, tools / source.name)
    return here


def test_the_help_examples_are_found() -> None:
    names = {name for name, _ in examples()}
    assert names >= {
        "tpuscope",
        "run",
        "ls",
        "show",
        "dashboard",
        "bench",
        "import",
        "trace",
        "diff",
        "query",
        "compact",
    }


def _stand_in(words: list[str]) -> list[str] | None:
    """A program started with --trace-steps leaves a traced run: the real TPU logdir imported
    stands in for it (the example after it reads `latest`); other programs are only parsed."""
    main.make_context("tpuscope", list(words))
    return ["import", "plugins/profile_logdir"] if "--trace-steps" in words else None


@pytest.mark.parametrize(
    "name", sorted({n for n, _ in examples() if n not in STARTS_SOMETHING | {"tpuscope"}})
)
def test_the_examples_of_each_reading_command_run_in_order(
    folder: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(folder)
    for example in [e for n, e in examples() if n == name]:
        for words in commands(example):
            if words[0] in STARTS_SOMETHING:
                words = _stand_in(words)
                if words is None:
                    continue
            result = CliRunner().invoke(main, words, env={"COLUMNS": "80"})
            allowed = (
                {0, 3} if "--fail-on-regression" in words else {0}
            )  # 3: a regression was found
            assert result.exit_code in allowed, f"{example}: {result.output}{result.exception!r}"
            if "--csv" in words:
                rows = list(csv.DictReader(io.StringIO(result.stdout)))
                assert rows and rows[0]["input_shapes"].startswith("["), rows[:1]


@pytest.mark.parametrize(
    ("name", "example"),
    [e for e in examples() if e[0] in STARTS_SOMETHING or e[0] == "tpuscope" and " run " in e[1]],
)
def test_each_example_that_starts_a_program_parses(name: str, example: str) -> None:
    for words in commands(example):
        try:
            main.make_context("tpuscope", list(words))
        except click.exceptions.Exit as exc:  # a group without a subcommand: its help
            assert exc.exit_code == 0
    assert os.path.exists(ROOT / "tpuscope")
