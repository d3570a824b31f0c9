# Sourced by the chip scripts (chip_final.sh, chip_check.sh, chip_overhead.sh), after each sets
# LOG: installs tpuscope on the TPU machine (.tpu/ carried) and gives the helpers they share.
set -u
export TPU_WITH_FLAX=${TPU_WITH_FLAX-1}  # TPU_WITH_FLAX= (empty): no flax, a minute less
source .tpu/install.sh >/dev/null 2>&1
# unpacked wheels xz-packed to travel in 64 MiB (duckdb's since session 41), unpacked into the site
for x in .tpu/xz/*.tar.xz; do
  [ -f "$x" ] && python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" $x $SITE
done
S=/tmp/store; mkdir -p $S
P=tests/tpu/programs
say() { echo "== $*" | tee -a $LOG; }
quiet() { grep -a -v -i "hugepage\|warnings.warn"; }
timed() { /usr/bin/time -f "wall %e s" "$@" 2>&1 | quiet | tee -a $LOG; }
# what a script brings back through $OUT (the store; a script may define its own after this)
pack() { tar czf $OUT/runs.tgz -C /tmp store; }
bare() { say "bare: $*"; timed "$@"; }
# `tpuscope run` of one program into the store, its report as JSON beside it, then the sourcing
# script's own `pack` (what it brings back through $OUT)
under() {
  local name=$1; shift
  say "tpuscope $name: $*"
  /usr/bin/time -f "wall %e s" tpuscope run --store $S --name $name "$@" 2>&1 | quiet | tee -a $LOG
  tpuscope show latest --store $S --json > $S/$name.show.json 2>>$LOG
  pack
}
# what the JAX hooks did per step in the latest run (its process meta) and the report's summary
# and verdict lines, into the log
paths() {
  python3 - "$S" <<'PY' 2>&1 | tee -a $LOG
import json, sys
import tpuscope
run = tpuscope.load_run("latest", store=sys.argv[1])
proc = run.meta["processes"][0]
print(json.dumps({"paths": proc.get("jax_step_paths"), "cost": proc.get("profiler_cost")}))
PY
  tpuscope show latest --store $S 2>&1 \
    | grep -i "^steps\|step time\|tpuscope cost\|^[0-9]\. \[\|^cost:\|^where:" | tee -a $LOG
}
