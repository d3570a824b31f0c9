"""Reading a run's new part files as they appear, each once (the watcher's only input)."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

# Columns read from each table's parts (never the metrics table: it is most of a run's rows).
COLUMNS = {
    "compiles": [
        "host",
        "pid",
        "step",
        "index",
        "time_ns",
        "duration_ns",
        "graph_hash",
        "cause",
        "location",
        "frames",
        "num_inputs",
        "num_outputs",
        "input_shapes",
        "output_shapes",
        "input_gb",
    ],
    "fallbacks": ["host", "pid", "step", "op", "count", "location"],
    "steps": ["host", "pid", "step", "boundary"],
    "retraces": None,  # JAX's explanations, every column (few rows)
}


class PartTail:
    """The part files of some tables of a run, each read once, as they appear."""

    def __init__(self, run_dir: Path, columns: dict[str, list[str] | None] | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.columns = COLUMNS if columns is None else columns
        self._seen: dict[str, set[str]] = {name: set() for name in self.columns}

    def poll(self) -> dict[str, pd.DataFrame]:
        """The rows of the parts written since the last poll, per table (absent: none new)."""
        from tpuscope.store.parts import read_part
        from tpuscope.store.run import table_to_frame

        out: dict[str, pd.DataFrame] = {}
        for name, columns in self.columns.items():
            folder = self.run_dir / name
            try:
                with os.scandir(folder) as scan:
                    names = sorted(
                        e.name
                        for e in scan
                        if e.name.startswith("part-") and e.name.endswith(".parquet")
                    )
            except OSError:
                continue
            seen = self._seen[name]
            frames = []
            for part in names:
                if part in seen:
                    continue
                seen.add(part)
                table = read_part(folder / part, columns=_present(folder / part, columns), warn=[])
                if table is not None and table.num_rows:
                    frames.append(table_to_frame(table))
            if frames:
                out[name] = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
        return out


def _present(path: Path, columns: list[str] | None) -> list[str] | None:
    """The wanted columns this part has (a part from an older writer may lack one)."""
    if columns is None:
        return None
    import pyarrow.parquet as pq

    try:
        names = set(pq.read_schema(path).names)
    except Exception:  # damaged: read_part says so (quietly) and skips it
        return columns
    return [c for c in columns if c in names]
