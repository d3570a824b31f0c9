"""Importer for XLA HLO text: `--xla_dump_to` folders and single HLO text files.

From a dump folder the module files of both stages are read
(`module_NNNN.<name>.before_optimizations.txt`, `...[cpu_|gpu_|tpu_]after_optimizations.txt`);
the TensorCore rule prefers the first (platform independent, with the user's source
lines) and takes traffic estimates from the second. A file that does not parse is
refused by name while the others are imported.
"""

from __future__ import annotations

import re
from pathlib import Path

from tpuscope.ingest.device import DUMP_STAGES
from tpuscope.ingest.registry import Imported, Importer, register
from tpuscope.parse.hlo import dump_files
from tpuscope.parse.hlo_rows import load_dumps

_HEADER = re.compile(rb"^\s*(HloModule\s|ENTRY\s)")


def load(path: Path) -> Imported:
    files = dump_files(path, DUMP_STAGES) if path.is_dir() else [path]
    if not files:
        raise ValueError("no module_*.{before,after}_optimizations.txt file in it")
    rows, refused = load_dumps(files)
    if not rows["hlo_modules"]:
        raise ValueError("; ".join(r["reason"] for r in refused) or "no HLO module in it")
    evidence = Imported(meta={"backend": "hlo"})
    for table, table_rows in rows.items():
        evidence.add(table, table_rows)
    evidence.refused = refused
    evidence.read = list(files)
    dots = sum(r["dots"] + r["convolutions"] for r in rows["hlo_modules"])
    evidence.summary = f"HLO: {len(rows['hlo_modules'])} module(s), {dots} dot/convolution(s)"
    return evidence


def sniff(path: Path, head: bytes) -> bool:
    if path.is_dir():
        return bool(dump_files(path, DUMP_STAGES))
    return bool(_HEADER.match(head))


IMPORTER = register(
    Importer(
        name="hlo_dump",
        description="XLA HLO text (an --xla_dump_to folder, or one module's text)",
        sniff=sniff,
        load=load,
    )
)
