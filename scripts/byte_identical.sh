#!/bin/bash
# Every read command's output over copies of some run stores, to compare two versions of
# tpuscope byte for byte (issue 28's "byte-identical before and after"):
#
#   CODE=/tmp/base-checkout scripts/byte_identical.sh /tmp/out/before sample_traces /tmp/fresh-runs
#   CODE=$PWD               scripts/byte_identical.sh /tmp/out/after  sample_traces /tmp/fresh-runs
#   diff -r /tmp/out/before /tmp/out/after
#
# CODE is the checkout whose tpuscope runs (python -P keeps the current folder off the path, so
# the folder the commands run in, which the report's relative paths depend on, may differ
# from CODE). Per store: `ls`, `ls --json`; per run: `show`, `show --json` as stored, the same
# with analysis.json removed (the analysis computed now: evidence in the order the rules make
# it), `diff` text/json/markdown of consecutive runs, then `show --reanalyze` with the
# analysis.json and findings table it writes (rows as JSON and the Parquet bytes' sha256) and
# `show` reading them. The stores themselves are never written: each is copied first.
set -u
OUT=$1; shift
CODE=${CODE:-$(pwd)}
W=$OUT.work; rm -rf "$OUT" "$W"; mkdir -p "$OUT" "$W"
export PYTHONPATH=$CODE
tp() { python3 -P -m tpuscope "$@"; }
cap() { local name=$1; shift; tp "$@" > "$OUT/$name.out" 2> "$OUT/$name.err"; echo $? > "$OUT/$name.rc"; }
dumpfind() { python3 - "$1" "$2" <<'PY'
import hashlib, json, pathlib, sys
import pyarrow.parquet as pq
run, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
parts = sorted((run / "findings").glob("*.parquet"))
rows = [r for p in parts for r in pq.read_table(p).to_pylist()]
out.write_text(json.dumps(rows, indent=1, default=str) + "\n"
               + "\n".join(hashlib.sha256(p.read_bytes()).hexdigest() for p in parts) + "\n")
PY
}
for src in "$@"; do
  store=$(basename "$src"); S=$W/$store; N=$W/$store-now
  cp -a "$src" "$S"; cp -a "$src" "$N"; rm -f "$N"/*/analysis.json
  runs=$(cd "$S" && ls -d */ | tr -d /)
  cap "$store.ls" ls --store "$S"; cap "$store.ls-json" ls --store "$S" --json
  prev=""
  for r in $runs; do
    cap "$store.$r.show" show --store "$S" "$r"; cap "$store.$r.show-json" show --store "$S" "$r" --json
    cap "$store-now.$r.show" show --store "$N" "$r"; cap "$store-now.$r.show-json" show --store "$N" "$r" --json
    if [ -n "$prev" ]; then
      cap "$store.diff.$prev.$r.text" diff --store "$S" "$prev" "$r"
      cap "$store.diff.$prev.$r.json" diff --store "$S" "$prev" "$r" --json
      cap "$store.diff.$prev.$r.markdown" diff --store "$S" "$prev" "$r" --markdown
    fi
    prev=$r
  done
  for r in $runs; do
    cap "$store.$r.reanalyze" show --store "$S" "$r" --reanalyze
    python3 -c "import json,sys; print(json.dumps(json.load(open(sys.argv[1])), indent=1, sort_keys=True))" \
      "$S/$r/analysis.json" > "$OUT/$store.$r.analysis.json"
    dumpfind "$S/$r" "$OUT/$store.$r.findings.txt"
    cap "$store.$r.show-after-write" show --store "$S" "$r"
    cap "$store.$r.show-json-after-write" show --store "$S" "$r" --json
  done
  cap "$store.ls-after-write" ls --store "$S" --json
done
echo "captured $OUT"
