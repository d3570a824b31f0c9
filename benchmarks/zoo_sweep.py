"""The full zoo sweep on this machine (resumable): every causal-LM type in `train` and `generate`.

Usage: nice -n 10 python3 benchmarks/zoo_sweep.py [STORE] [--scenario S ...] [--retry STATUS ...]
       [--only GLOB ...] [--exclude GLOB ...] [--timeout SECONDS] [--task T ...] [--earlier CSV]
Re-running continues where the last run stopped (finished cells are skipped; `--retry` runs the
cells of a status again). `--task` (repeatable, default causal-lm) picks the families;
`--earlier docs/zoo/cells.csv` counts the cells an earlier store ran as finished (a machine here
is not kept between sessions), so `--task causal-lm --task masked-lm ...` runs only what that
table lacks; the table written at the end joins those rows. One line per cell as it ends (the log), then the table is written
(zoo/table.md, zoo/cells.csv in the store) and the summary printed.
"""

from __future__ import annotations

import argparse
import sys
import time

from tpuscope.zoo.driver import run_sweep


def _args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", nargs="?", default="/work/zoo-store")
    parser.add_argument("--scenario", action="append", dest="scenarios")
    parser.add_argument("--retry", action="append", default=[])
    parser.add_argument("--only", action="append", default=[])
    parser.add_argument("--exclude", action="append", default=[])
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--task", action="append", dest="tasks")
    parser.add_argument("--earlier")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = _args(argv)
    start = time.monotonic()
    from tpuscope.zoo import table

    earlier = table.load_earlier(args.earlier) if args.earlier else []

    def said(record: dict) -> None:
        print(
            f"{time.monotonic() - start:7.0f} s  {record['model_type']}/{record['scenario']}: "
            f"{record['status']} {record.get('seconds')} s {record.get('reason', '')[:120]}"
            f"{' DISAGREES ' + '; '.join(record['disagreements']) if record.get('disagreements') else ''}",
            flush=True,
        )

    records = run_sweep(
        args.store,
        scenarios=tuple(args.scenarios or ("train", "generate")),
        tasks=args.tasks or ["causal-lm"],
        only=args.only,
        exclude=args.exclude,
        jobs=1,
        timeout=args.timeout,
        retry=args.retry,
        on_cell=said,
        progress=False,
        earlier=earlier,
    )
    table.write_outputs(args.store)
    print(table.markdown_summary(table.summarize(records, earlier)))
    print(f"sweep wall time this session: {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
