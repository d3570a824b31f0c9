"""`tpuscope import`: read files with the registered importers and write them as one run.

Every file is parsed before anything is written, so a file that fails never leaves
a half-made run; refused files are reported by name and the others still form the
run. Each file's rows carry its own process fields (host = the file name, pid = its
position), like the processes of a live run, and its importer meta goes to
`procs/import-NNN.json`.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpuscope.ingest.registry import Imported, Importer, ImportRefused, load
from tpuscope.store import RunStore, StoreError
from tpuscope.store.run import Run


@dataclass
class ImportResult:
    """The run made (None if no file could be read) and what happened to each input."""

    run_dir: Path | None
    imported: list[dict[str, Any]] = field(default_factory=list)
    refused: list[dict[str, str]] = field(default_factory=list)
    # Text files inside a given folder that no importer reads (named, not an error).
    skipped: list[dict[str, str]] = field(default_factory=list)


_HLO_MODULE = re.compile(r"^module_\d+\.")  # the HLO-dump importer reads these with the folder


def text_logs(path: Path) -> list[Path]:
    """A folder's text logs (*.txt, *.log: metrics reports, PT_XLA_DEBUG logs), which the folder
    importers (xplane, HLO dumps) do not read: each is imported as a file of its own."""
    if not path.is_dir():
        return []
    return sorted(
        p
        for p in path.rglob("*")
        if p.suffix in (".txt", ".log") and p.is_file() and not _HLO_MODULE.match(p.name)
    )


def _load_all(
    paths: Sequence[str | Path], result: ImportResult
) -> list[tuple[Path, list[tuple[Importer, Imported]]]]:
    """Every readable file (a folder's text logs too); the others named in `result`."""
    loaded: list[tuple[Path, list[tuple[Importer, Imported]]]] = []
    for raw in paths:
        path = Path(raw)
        texts = text_logs(path)
        refusal, read = None, set()
        try:
            loaded.append((path, load(path)))
            result.refused += [r for _, evidence in loaded[-1][1] for r in evidence.refused]
            read = {p for _, evidence in loaded[-1][1] for p in evidence.read}
            read |= {Path(r["path"]) for _, evidence in loaded[-1][1] for r in evidence.refused}
        except ImportRefused as exc:
            refusal = {"path": str(raw), "reason": str(exc)}
        before = len(loaded)
        for text in texts:
            try:
                loaded.append((text, load(text)))
            except ImportRefused as exc:
                result.skipped.append({"path": str(text), "reason": str(exc)})
        if refusal is not None and len(loaded) == before:
            result.refused.append(refusal)
        elif path.is_dir():
            result.skipped += unread(path, read | set(texts))
    return loaded


def unread(folder: Path, read: set[Path]) -> list[dict[str, str]]:
    """The files of a folder no importer read (hidden files left aside), each named."""
    return [
        {"path": str(p), "reason": "a file of no format tpuscope reads"}
        for p in sorted(folder.rglob("*"))
        if p.is_file()
        and p not in read
        and not any(part.startswith(".") for part in p.relative_to(folder).parts)
    ]


def _write_file(run: Run, index: int, path: Path, results: list[tuple[Importer, Imported]]) -> int:
    number = f"{index:03d}"
    tag = f"import-{number}"  # parts and procs/ file named as a process "import", "pid" NNN
    fields = {"host": path.name, "pid": index, "rank": 0}
    writer = run.writer(tag=tag)
    meta: dict[str, Any] = {
        "backend": "torch_xla",
        **fields,
        "source": str(path.resolve()),
        "formats": [importer.name for importer, _ in results],
        "status": "imported",
    }
    written = 0
    for importer, evidence in results:
        for table, rows in evidence.rows.items():
            writer.extend(table, [{**fields, **row} for row in rows])
        for (
            table,
            parts,
        ) in evidence.tables.items():  # Arrow tables: written as they are, by row group
            for k, part in enumerate(parts):
                written += run.write_arrow(table, f"{tag}-{importer.name}-{k:04d}", part)
        _keep_files(run.path, evidence.files)
        meta.update(evidence.meta)
    written += writer.flush()
    run.write_proc("import", number, meta)
    return written


def _keep_files(run_dir: Path, files: dict[str, Path]) -> None:
    """Copy (or hard-link, when on one file system) files an importer keeps in the run."""
    for relative, source in files.items():
        target = run_dir / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(source, target)
        except OSError:
            shutil.copyfile(source, target)


def import_paths(
    paths: Sequence[str | Path], store: RunStore, name: str | None = None
) -> ImportResult:
    """Import every readable path into one new run of `store`."""
    result = ImportResult(run_dir=None)
    loaded = _load_all(paths, result)
    if not loaded:
        return result
    now = time.time_ns()
    run_dir = store.new_run(
        name or loaded[0][0].stem,
        command="tpuscope import " + " ".join(str(p) for p in paths),
        argv=[str(p) for p in paths],
        warmup=0,
        status="imported",
        start_ns=now,
        imported=[str(p.resolve()) for p, _ in loaded],
    )
    run = Run(run_dir)
    try:
        for index, (path, results) in enumerate(loaded):
            rows = _write_file(run, index, path, results)
            result.imported.append(
                {
                    "path": str(path),
                    "rows": rows,
                    "formats": [i.name for i, _ in results],
                    "summary": "; ".join(e.summary for _, e in results if e.summary),
                }
            )
        run.update_meta(end_ns=time.time_ns(), refused=result.refused)
    except Exception as exc:  # never leave a half-made run
        shutil.rmtree(run_dir, ignore_errors=True)
        reason = getattr(exc, "strerror", None) or f"{type(exc).__name__}: {exc}"
        raise StoreError(f"cannot write the run to {run_dir}: {reason}") from exc
    result.run_dir = run_dir
    return result
