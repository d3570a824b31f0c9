"""Two real torch_xla hosts of a pod in one shared local folder, both with `--deep`.

XLA names its dumps module_0001... on every host, and the HLO ingest used to write its parts
under a fixed tag (`part-hlo-*`): in a shared folder the hosts overwrote each other's dumps and
parts. Each host now dumps into hlo/<host>/ and names its HLO parts by itself, as every writer.
"""

from __future__ import annotations

import pyarrow.parquet as pq

from tests.pod_run import side_by_side
from tpuscope.store import Run, layout
from tpuscope.store.hosts import part_host

STEPS = 8  # host-1 compiles its own graphs at steps 4 and 6 (extra=1)


def test_two_deep_hosts_keep_their_own_hlo(tmp_path):
    done = side_by_side(
        tmp_path / "store", "deep2", ["--deep"], [str(STEPS), "extra=1"], tmp_path / "barrier"
    )
    assert [p.returncode for p in done] == [0, 0], [p.stderr[-2000:] for p in done]
    run_dir = tmp_path / "store" / "deep2"
    for host in ("host-0", "host-1"):  # each host's dumps in a folder of its own
        assert list(layout.hlo_dir(run_dir, host).glob("module_*.txt")), host
    assert not list((run_dir / layout.HLO).glob("module_*.txt"))
    modules: dict[str, int] = {}
    for part in sorted((run_dir / "hlo_modules").glob("part-*.parquet")):
        hosts = set(pq.read_table(part, columns=["host"]).column("host").to_pylist())
        assert hosts == {part_host(part.name)}, part.name  # named by the one host it holds
    rows = Run(run_dir).table("hlo_modules")
    modules = rows["host"].astype(str).value_counts().to_dict()
    assert set(modules) == {"host-0", "host-1"}
    assert modules["host-1"] > modules["host-0"]  # host-1's own graphs, not host-0's dumps
