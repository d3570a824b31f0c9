"""A simulated pod (tests/pod_run.py): five real torch_xla processes on the CPU, one run.

host-3 is slow, host-1 compiles its own graph twice, host-2 reads `.item()`, host-4 is lost
(SIGKILL with its launcher). The findings must name exactly those hosts and lines, and the
lost host's flushed rows must be in the run.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest

from tests.conftest import run_tpuscope
from tests.pod_run import HOSTS, RUN_ID, STEPS, WARMUP, marked_line, pod_run
from tpuscope.analyze.contract import StragglerEvidence, evidence_of
from tpuscope.detect.run_analysis import analyze
from tpuscope.schema import TABLES
from tpuscope.step_runs import expand
from tpuscope.store import Run, RunStore, StoreError, layout
from tpuscope.store.hosts import host_name, part_host
from tpuscope.store.pods import combined_status, join_run


def short(location: str | None) -> str:
    return Path(location).name if location else ""


@pytest.fixture(scope="module")
def pod(tmp_path_factory) -> SimpleNamespace:
    made = pod_run(tmp_path_factory.getbasetemp())
    return SimpleNamespace(**vars(made), report=analyze(Run(made.run_dir)))


def by_rule(report, rule: str) -> list:
    return [f for f in report.findings if f.rule == rule]


def test_every_host_ran_unchanged_and_the_lost_one_is_shown(pod):
    meta = Run(pod.run_dir).meta
    program = {h["host"]: h.get("exit_code") for h in meta["hosts"]}  # as the launcher saw it end
    for rank, (out, err) in pod.outputs.items():
        # the launcher's status is the program's: a failure says which of the two ended so
        assert pod.procs[rank].returncode == 0, f"program exit {program[f'host-{rank}']}: {err}"
        assert out.strip() == f"rank {rank} done"  # the program's own output, untouched
    status = {h["host"]: h["status"] for h in meta["hosts"]}
    assert sorted(status) == [f"host-{k}" for k in range(HOSTS)]
    assert all(status[f"host-{k}"] == "finished" for k in range(HOSTS - 1))
    assert status["host-4"].startswith("lost (last write at ")
    assert meta["status"] == "4 finished, 1 lost"
    listing = run_tpuscope("ls", "--store", str(pod.store), "--json")
    (run,) = [
        r for r in json.loads(listing.stdout) if r["run_id"] == RUN_ID
    ]  # one run for all hosts
    assert run["run_id"] == RUN_ID and len(run["hosts"]) == HOSTS
    table = run_tpuscope("ls", "--store", str(pod.store), env={"COLUMNS": "500"})
    assert "5: 4 finished, 1 lost" in table.stdout


def test_the_killed_host_keeps_its_last_flush(pod):
    steps = Run(pod.run_dir).steps
    host4 = sorted(steps.loc[steps["host"] == "host-4", "step"])
    assert host4[:6] == [0, 1, 2, 3, 4, 5] and 6 not in host4  # hung in step 6: no boundary
    for k in range(HOSTS - 1):
        assert sorted(steps.loc[steps["host"] == f"host-{k}", "step"]) == list(range(STEPS))


def test_each_host_writes_only_parts_named_by_it(pod):
    pids = {p["host"]: p["pid"] for p in Run(pod.run_dir).meta["processes"]}
    assert sorted(pids) == [f"host-{k}" for k in range(HOSTS)]
    for name in TABLES:
        for part in (pod.run_dir / name).glob("part-host-*.parquet"):
            host = part_host(part.name)
            if not layout.is_compact(part.name):  # a process's own part: its host and pid
                assert re.match(rf"part-{host}-{pids[host]}-\d+\.parquet$", part.name)
            assert set(pq.read_table(part, columns=["host"]).column("host").to_pylist()) == {host}
    assert sorted(p.name for p in (pod.run_dir / "hosts").iterdir()) == [
        f"host-{k}.json" for k in range(HOSTS)
    ]


def test_each_host_merged_only_its_own_parts_when_it_ended(pod):
    """One part per table per finished host; the lost host's launcher never merged."""
    for name in ("steps", "metrics"):
        hosts = [part_host(p.name) for p in (pod.run_dir / name).glob("part-*.parquet")]
        finished = [h for h in hosts if h != "host-4"]
        assert sorted(finished) == [f"host-{k}" for k in range(HOSTS - 1)], hosts
        merged = {part_host(p.name) for p in (pod.run_dir / name).glob("part-*-compact-*")}
        assert "host-4" not in merged and hosts.count("host-4") >= 1


def test_straggler_is_the_slow_host(pod):
    (finding,) = by_rule(pod.report, "straggler")
    assert finding.evidence["hosts"] == ["host-3"]
    judged = list(range(WARMUP, STEPS))
    slow = expand(finding.step_runs)
    assert set(slow) <= set(judged) and len(slow) >= len(judged) // 2
    assert finding.evidence["excess_ms"] > finding.evidence["threshold_ms"]
    assert finding.evidence["cause"]["part"] == "host"  # the sleep is time outside XLA


def test_rank_divergence_names_the_hosts_and_lines(pod):
    found = {
        (tuple(f.evidence["hosts"]), short(f.location))
        for f in by_rule(pod.report, "rank_divergence")
    }
    assert found == {
        (("host-1",), marked_line("POD_EXTRA_LINE")),
        (("host-2",), marked_line("POD_ITEM_LINE")),
    }
    extra = next(
        f for f in by_rule(pod.report, "rank_divergence") if f.evidence["hosts"] == ["host-1"]
    )
    assert expand(extra.step_runs)[0] == 4  # host-1's own graph first compiled in step 4


def test_per_host_facets_of_the_rules(pod):
    (recompile,) = by_rule(pod.report, "recompile")
    assert recompile.evidence["hosts"] == ["host-1"] and expand(recompile.step_runs) == [6]
    assert short(recompile.location) == marked_line("POD_EXTRA_LINE")
    assert "[hosts: host-1 (1 of 5)]" in recompile.title
    (sync,) = by_rule(pod.report, "host_sync")
    assert sync.evidence["hosts"] == ["host-2"] and short(sync.location) == marked_line(
        "POD_ITEM_LINE"
    )
    named = {h for f in pod.report.findings for h in f.evidence.get("hosts", [])}
    assert named == {"host-1", "host-2", "host-3"}  # host-0 and the lost host-4 did nothing wrong


def test_the_stored_analysis_says_how_each_host_ended_now(pod):
    """No launcher analysed the pod (host-4 still ran when the others ended: none was last), so
    the first read analyses it; read after host-4 was lost, it says so."""
    hosts = {h["host"]: h for h in pod.before["hosts"]}
    assert (
        hosts["host-4"]["status"].startswith("lost")
        and pod.before["status"] == "4 finished, 1 lost"
    )
    assert hosts["host-3"]["straggler"]


def test_show_reports_the_pod_with_its_hosts(pod):
    shown = run_tpuscope("show", RUN_ID, "--store", str(pod.store), "--json")
    summary = json.loads(shown.stdout)["summary"]
    hosts = {h["host"]: h for h in summary["hosts"]}
    assert hosts["host-3"]["straggler"] and not hosts["host-0"]["straggler"]
    assert hosts["host-1"]["rules"] == ["rank_divergence", "recompile"]
    assert hosts["host-2"]["rules"] == ["host_sync", "rank_divergence"]
    assert hosts["host-4"]["status"].startswith("lost")


def test_the_pod_reads_through_the_analysis_contract(pod):
    """The pod's summary and its findings' evidence as the contract's records (analyze/contract.py):
    every key declared, and each record writes back the JSON it was read from."""
    summary = pod.report.summary
    assert summary.pod is not None and [h.host for h in summary.pod.hosts][:2] == [
        "host-0",
        "host-1",
    ]
    assert next(h for h in summary.pod.hosts if h.host == "host-3").straggler
    for finding in pod.report.findings:
        record = evidence_of(finding)  # the analysis read it back as its rule's record
        assert not record.undeclared, (finding.rule, record.undeclared)
        assert record is finding.evidence
    assert StragglerEvidence.of(by_rule(pod.report, "straggler")[0]).host == "host-3"


def test_host_identity_from_the_environment():
    assert host_name({"TPUSCOPE_HOST": "host-7", "TPU_WORKER_ID": "3"}) == "host-7"
    assert host_name({"TPU_WORKER_ID": "3"}) == "worker-3"
    assert host_name({"CLOUD_TPU_TASK_ID": "2"}) == "worker-2"
    assert (
        host_name({"TPU_WORKER_ID": "1", "MEGASCALE_SLICE_ID": "2", "MEGASCALE_NUM_SLICES": "4"})
        == "slice2-worker-1"
    )
    assert host_name({}) == os.uname().nodename


def test_a_run_id_never_joins_a_single_host_run(tmp_path):
    single = RunStore(tmp_path).new_run("solo")
    with pytest.raises(StoreError, match="was not started with --run-id"):
        join_run(tmp_path, single.name)
    with pytest.raises(StoreError, match="not a valid run id"):
        join_run(tmp_path, "../escape")
    assert join_run(tmp_path, "exp1") == join_run(tmp_path, "exp1")  # the second host joins


def test_combined_status():
    assert combined_status(["finished", "finished"]) == "finished"
    assert combined_status(["finished", "running"]) == "running (1 of 2 hosts)"
    assert (
        combined_status(["finished", "lost (last write at x)", "finished"]) == "2 finished, 1 lost"
    )


def test_a_bad_run_id_is_one_line_and_runs_nothing(tmp_path):
    marker = tmp_path / "ran"
    proc = run_tpuscope(
        "run",
        "--store",
        str(tmp_path / "store"),
        "--run-id",
        "../up",
        "python",
        "-c",
        f"open({str(marker)!r}, 'w')",
    )
    assert proc.returncode == 2 and not marker.exists()
    assert proc.stderr.strip().splitlines() == [
        "tpuscope: not a valid run id: '../up' (letters, digits, '.', '_', '-')"
    ]


def test_the_analysis_over_the_parts_is_the_in_memory_one(pod):
    """The fixture's analysis (DuckDB over the parts, host by host: detect/pod_tables.py) is the
    one made with every host's tables read whole into memory (the same SQL over the frames, every
    rule on every host), to the last digit: a lost host with fewer steps, hosts with their own
    compiles and reads (tests/test_pod_sql.py)."""
    from tpuscope.detect import RunTables, detect
    from tpuscope.detect.run_analysis import _summary

    memory = RunTables.from_run(Run(pod.run_dir))
    findings = detect(memory)
    summary = {k: v for k, v in pod.report.summary.to_dict().items() if k != "parts_digest"}
    text = lambda x: json.dumps(x, sort_keys=True, default=str)  # noqa: E731
    assert text([f.to_dict() for f in pod.report.findings]) == text([f.to_dict() for f in findings])
    assert text(summary) == text(_summary(memory, findings).to_dict())
