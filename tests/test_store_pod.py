"""A simulated pod into an object store (tests/pod_run.py: three real torch_xla processes on
the CPU, each its own host, `tpuscope run --run-id exp43` into a real GCS API server on
loopback): one run with every host, the same findings as on a local folder, every object
named by the host that wrote it, one part per host per table (merged
when the host ended), and a host SIGKILLed
with its launcher keeping what it had shipped.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest

from tests.conftest import run_tpuscope
from tests.object_stores import ObjectStore
from tests.pod_run import (
    LOST_STEP,
    REMOTE_HOSTS,
    REMOTE_RUN_ID,
    REMOTE_STEPS,
    WARMUP,
    marked_line,
    remote_pod_run,
)
from tpuscope.detect.run_analysis import analyze
from tpuscope.schema import TABLES
from tpuscope.store import Run, RunStore, StoreError
from tpuscope.store.hosts import part_host
from tpuscope.store.location import Location
from tpuscope.store.pods import join_remote, pod_meta
from tpuscope.store.ship import finish_shipping

HOSTS = [f"host-{k}" for k in range(REMOTE_HOSTS)]


@pytest.fixture(scope="module")
def pod(gcs_store: ObjectStore, tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    pytest.importorskip("torch_xla")
    base = tmp_path_factory.getbasetemp()
    made = remote_pod_run(base, gcs_store.url("pods"), gcs_store.env)
    return SimpleNamespace(**vars(made), report=analyze(Run(made.run)), gcs=gcs_store)


def cli_json(pod: SimpleNamespace, *args: str) -> object:
    proc = run_tpuscope(*args, "--store", pod.store, "--json", env=pod.env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def objects(pod: SimpleNamespace) -> list[str]:
    fs = pod.run.fs
    return sorted(p.split(f"{REMOTE_RUN_ID}/", 1)[1] for p in fs.find(pod.run.path))


@pytest.mark.slow
def test_ls_shows_one_run_with_every_host_and_how_it_ended(pod: SimpleNamespace) -> None:
    for rank, (out, err) in pod.outputs.items():
        assert pod.procs[rank].returncode == 0, err
        assert out.strip() == f"rank {rank} done"  # the program's own output, untouched
    (run,) = [r for r in cli_json(pod, "ls") if r["run_id"] == REMOTE_RUN_ID]
    status = {h["host"]: h["status"] for h in run["hosts"]}
    assert sorted(status) == HOSTS
    assert status["host-1"] == status["host-2"] == "finished"
    assert status["host-0"].startswith("lost (last write at ")
    assert run["status"] == "2 finished, 1 lost" and run["store"] == pod.store


@pytest.mark.slow
def test_show_names_the_slow_host_and_the_divergent_one(pod: SimpleNamespace) -> None:
    (straggler,) = [f for f in pod.report.findings if f.rule == "straggler"]
    assert straggler.evidence["hosts"] == ["host-2"]
    divergent = {
        (tuple(f.evidence["hosts"]), Path(f.location or "").name)
        for f in pod.report.findings
        if f.rule == "rank_divergence"
    }
    assert divergent == {
        (("host-1",), marked_line("POD_EXTRA_LINE")),
        (("host-1",), marked_line("POD_ITEM_LINE")),
    }
    summary = cli_json(pod, "show", REMOTE_RUN_ID)["summary"]
    hosts = {h["host"]: h for h in summary["hosts"]}
    assert hosts["host-2"]["straggler"] and not hosts["host-1"]["straggler"]
    assert "rank_divergence" in hosts["host-1"]["rules"]
    assert hosts["host-0"]["status"].startswith("lost")


@pytest.mark.slow
def test_query_groups_by_host(pod: SimpleNamespace) -> None:
    rows = cli_json(
        pod,
        "query",
        REMOTE_RUN_ID,
        "SELECT host, count(*) AS n, median(wall_ns) / 1e6 AS p50_ms FROM steps "
        "WHERE boundary <> 'end' GROUP BY host ORDER BY p50_ms DESC",
    )
    assert [r["host"] for r in rows][0] == "host-2"  # the straggler's median is the highest
    counts = {r["host"]: r["n"] for r in rows}
    assert counts["host-1"] == counts["host-2"] == REMOTE_STEPS


@pytest.mark.slow
def test_every_object_is_named_by_its_host_and_holds_only_its_rows(pod: SimpleNamespace) -> None:
    names = objects(pod)
    shared = {"meta.json", "analysis.json", "findings/part-analysis.parquet"}
    assert shared <= set(names)
    meta = json.loads(pod.run.fs.cat_file(f"{pod.run.path}/meta.json"))
    assert meta == pod_meta(REMOTE_RUN_ID, store=pod.store, name="pod")  # no host's own fields
    assert {n for n in names if n.startswith("hosts/")} == {f"hosts/{h}.json" for h in HOSTS}
    for name in sorted(set(names) - shared):
        base = name.rsplit("/", 1)[-1]
        if name.endswith(".parquet"):
            host = part_host(base)
            assert host in HOSTS, name
            with pod.run.fs.open(f"{pod.run.path}/{name}", "rb") as handle:
                rows = pq.read_table(handle, columns=["host"]).column("host").to_pylist()
            assert set(rows) == {host}, name
        else:  # procs/<host>-<pid>.json, hosts/<host>.json, debug/pt_xla_debug-<host>-<pid>.txt
            assert any(h in base for h in HOSTS), name


@pytest.mark.slow
def test_each_finished_host_left_one_merged_part_per_table(pod: SimpleNamespace) -> None:
    parts = [n for n in objects(pod) if n.endswith(".parquet") and not n.startswith("findings/")]
    for host in ("host-1", "host-2"):
        mine = [n for n in parts if part_host(n.rsplit("/", 1)[-1]) == host]
        tables = [n.split("/")[0] for n in mine]
        assert sorted(tables) == sorted(set(tables)) and set(tables) <= set(TABLES), mine
    # the straggler ran past a flush interval (48 steps of 60 ms): its steps came in several
    # batches, merged when it ended (a table of one batch is one object already)
    assert any(n.startswith("steps/part-host-2-") and "-compact-" in n for n in parts), parts
    lost = [n for n in parts if part_host(n.rsplit("/", 1)[-1]) == "host-0"]
    assert lost and not any("-compact-" in n for n in lost)  # its launcher died: batches only


@pytest.mark.slow
def test_the_killed_host_keeps_what_it_shipped(pod: SimpleNamespace) -> None:
    steps = Run(pod.run).table("steps", columns=["host", "step"])
    lost = sorted(steps.loc[steps["host"] == "host-0", "step"])
    assert lost[:LOST_STEP] == list(range(LOST_STEP)) and LOST_STEP not in lost
    for host in ("host-1", "host-2"):
        assert sorted(steps.loc[steps["host"] == host, "step"]) == list(range(REMOTE_STEPS))
    judged = steps[(steps["host"] == "host-2") & (steps["step"] >= WARMUP)]
    assert len(judged) == REMOTE_STEPS - WARMUP


@pytest.mark.parametrize("fixture", ["gcs_store", "s3_store"])
def test_joining_an_object_store_run_never_clobbers_it(
    fixture: str, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first host's meta.json stands (S3 refuses the second exclusive write; the GCS
    emulator ignores the condition and gets the same bytes); a run made without --run-id is
    never joined."""
    store: ObjectStore = request.getfixturevalue(fixture)
    monkeypatch.setenv("TPUSCOPE_STAGE", str(tmp_path / "stage"))
    root = Location.of(store.url(f"join-{tmp_path.name}"))
    store.filesystem()
    stages = [join_remote(root, "exp7", host, name="train") for host in ("host-0", "host-1")]
    assert stages[0] != stages[1] and all(s.name == "exp7" for s in stages)  # a stage per host
    written = json.loads(root.fs.cat_file((root / "exp7" / "meta.json").path))
    assert written == pod_meta("exp7", store=root.url, name="train")
    if fixture == "s3_store":  # honours If-None-Match: a host with another name changes nothing
        finish_shipping(join_remote(root, "exp7", "host-2", name="other"))
        assert json.loads(root.fs.cat_file((root / "exp7" / "meta.json").path))["name"] == "train"
    for stage in stages:
        finish_shipping(stage)
    single = RunStore(root).new_run("solo")
    finish_shipping(single)
    with pytest.raises(StoreError, match="was not started with --run-id"):
        join_remote(root, single.name, "host-0")
