"""Importers: turn text and traces users already have into tpuscope runs.

`import_paths(paths, store)` dispatches each file through the registry
(`tpuscope.ingest.registry`): every importer whose sniff accepts a file reads
it. The text importers (torch_xla metrics reports, PT_XLA_DEBUG logs) register
here; other readers (xplane, HLO dumps) call `register(Importer(...))` the same way.
"""

from tpuscope.ingest import (  # noqa: F401  (they register themselves)
    hlo_dump,
    hlo_proto_files,
    metrics_report,
    pt_xla_debug,
    xplane,
    xprof_json,
)
from tpuscope.ingest.registry import IMPORTERS, Imported, Importer, ImportRefused, register
from tpuscope.ingest.run import ImportResult, import_paths

__all__ = [
    "IMPORTERS",
    "Imported",
    "ImportRefused",
    "ImportResult",
    "Importer",
    "import_paths",
    "register",
]
