#!/usr/bin/env bash
# On the TPU machine (device tool), from the repo root, with .tpu/ carried (prepare.sh first):
#   bash tests/tpu/chip_tpuscope.sh [PART...]
# Runs the chip corpus under `tpuscope run` in the default mode, bare twins for overhead, and
# the host-cost microbenchmarks. The store (runs, traces, show --json) is re-packed into
# $OUT/runs.tgz after each program, so a run cut short by the time limit still brings back
# what finished; the log is $OUT/log.txt.
set -u
export TPU_WITH_FLAX=1
source .tpu/install.sh >/dev/null 2>&1
S=/tmp/store; mkdir -p $S
P=tests/tpu/programs
LOG=$OUT/log.txt
say() { echo "== $*" | tee -a $LOG; }
pack() { tar czf $OUT/runs.tgz -C /tmp store; }
under() {  # under NAME ARGS...: one program under tpuscope, its report and show --json kept
  local name=$1; shift
  say "tpuscope $name: $*"
  /usr/bin/time -f "wall %e s" tpuscope run --store $S --name $name "$@" 2>&1 | grep -v -i "hugepage\|warnings.warn" | tee -a $LOG
  tpuscope show latest --store $S --json > $S/$name.show.json 2>>$LOG
  pack
}
bare() { say "bare: $*"; "$@" 2>&1 | grep -v -i "hugepage\|warnings.warn" | tee -a $LOG; }
parts=${*:-"verdicts overhead last"}
for part in $parts; do case $part in
verdicts)
  under mlp_f32_highest python3 $P/mlp_train.py --dtype f32 --precision highest
  under lm_hd64 python3 $P/lm_decoder.py --heads 16
  under mlp_bf16 python3 $P/mlp_train.py
  under lm_hd128 python3 $P/lm_decoder.py --heads 8
  ;;
last)
  under mlp_1000 python3 $P/mlp_train.py --widths 1000,3000,3000,1000
  ;;
overhead)
  bare python3 benchmarks/jax_host_costs.py
  for i in 1 2; do
    bare python3 $P/tiny_step.py
    under tiny_$i python3 $P/tiny_step.py
  done
  under tiny_notrace --trace-steps off python3 $P/tiny_step.py
  under step_path python3 benchmarks/jax_step_path.py --steps 4000
  ;;
esac; done
pack
ls -la $OUT
