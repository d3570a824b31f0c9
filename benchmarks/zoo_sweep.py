"""The full zoo sweep on this machine (resumable): every causal-LM type in `train` and `generate`.

Usage: nice -n 10 python3 benchmarks/zoo_sweep.py [STORE] [-- extra `tpuscope sweep` options]
Re-running continues where the last run stopped (finished cells are skipped). At the end it
writes the table (zoo/table.md, zoo/cells.csv in the store) and prints the summary.
"""

from __future__ import annotations

import sys
import time

from tpuscope.zoo.driver import run_sweep


def main(argv: list[str]) -> int:
    store = argv[0] if argv else "/work/zoo-store"
    start = time.monotonic()

    def said(record: dict) -> None:
        print(f"{time.monotonic() - start:7.0f} s  {record['model_type']}/{record['scenario']}: "
              f"{record['status']} {record.get('seconds')} s {record.get('reason', '')[:120]}"
              f"{' DISAGREES ' + '; '.join(record['disagreements']) if record.get('disagreements') else ''}",
              flush=True)

    records = run_sweep(store, scenarios=("train", "generate"), tasks=["causal-lm"], jobs=1,
                              timeout=900, on_cell=said, progress=False)
    from tpuscope.zoo import table  # at the end: the table module may be newer than the sweep

    table.write_outputs(store, records)
    print(table.markdown_summary(table.summarize(records)))
    print(f"sweep wall time this session: {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
