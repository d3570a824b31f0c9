"""Two real torch_xla hosts of a pod in one shared local folder, both with `--trace-steps 2:4`.

Each host's profiler writes into trace/xla-<host>-<pid>/, but the ingest used to read every
xplane under trace/ and write its tables under a fixed tag (`part-trace-NNNN`): in a shared
folder each host ingested the other's trace as its own (labelled with the machine's name,
the same for both), and the host that ingested last replaced the other's parts. A pod's host
now ingests only its own folders, labels the rows with its host and names its parts by itself.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from tests.pod_run import side_by_side
from tpuscope.ingest import traces as trace_ingest
from tpuscope.store import Run, layout
from tpuscope.store.hosts import part_host

HOSTS = ("host-0", "host-1")
TABLES = ("trace_events", "device_steps")


def _xplanes(run_dir: Path, host: str) -> list[Path]:
    """The xplane files the host's own profiler windows wrote."""
    folders = [p for p in (run_dir / layout.TRACE).iterdir() if layout.trace_host(p.name) == host]
    return [f for folder in folders for f in layout.xplane_files(folder)]


def test_two_traced_hosts_keep_their_own_trace(tmp_path):
    done = side_by_side(
        tmp_path / "store", "trace2", ["--trace-steps", "2:4"], ["6"], tmp_path / "barrier"
    )
    assert [p.returncode for p in done] == [0, 0], [p.stderr[-2000:] for p in done]
    run_dir = tmp_path / "store" / "trace2"
    for table in TABLES:
        for part in sorted((run_dir / table).glob("part-*.parquet")):
            hosts = set(pq.read_table(part, columns=["host"]).column("host").to_pylist())
            assert hosts == {part_host(part.name)}, part.name  # named by the one host it holds
    events = Run(run_dir).table("trace_events")
    per_host = events["host"].astype(str).value_counts().to_dict()
    assert set(per_host) == set(HOSTS)
    for host in HOSTS:
        files = _xplanes(run_dir, host)
        assert len(files) == 1, (host, files)  # one process, one window
        own = trace_ingest.load_traces(files, xprof=False).rows("trace_events")
        assert own > 10 and per_host[host] == own, (host, per_host, own)  # all its rows, only its
        steps = set(events.loc[events["host"].astype(str) == host, "step"].dropna().astype(int))
        assert steps == {2, 3}, (host, steps)  # the window, on the host's own steps
