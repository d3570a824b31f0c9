#!/usr/bin/env bash
# The last chip check of a round, in one call (device tool, repo root, .tpu/ carried after
# prepare.sh):   timeout 500 bash tests/tpu/chip_check.sh
# The dispatch-bound step bare vs under `tpuscope run --quiet` (ABAB), the hook's own cost in
# one process, the programs not yet run on the round's code in the default mode, and
# benchmarks/overhead.py on the chip. Logs and stores land in $OUT after each program.
LOG=$OUT/log.txt
source tests/tpu/chip_lib.sh
pack() { tar czf $OUT/store.tgz -C /tmp store 2>/dev/null; }
paths() {  # what the JAX hooks did per step (the run's meta) and the report's cost lines
  python3 - "$S" <<'EOF' 2>&1 | tee -a $LOG
import json, sys
import tpuscope
run = tpuscope.load_run("latest", store=sys.argv[1])
proc = run.meta["processes"][0]
print(json.dumps({"paths": proc.get("jax_step_paths"), "cost": proc.get("profiler_cost")}))
EOF
  tpuscope show latest --store $S 2>&1 | grep -i "tpuscope cost\|device trace\|step time\|^[0-9]\. \[" | tee -a $LOG
}
under() {
  local name=$1; shift
  say "tpuscope $name: $*"; timed tpuscope run --quiet --store $S --name $name "$@"; paths; pack
}
for rep in 1 2; do
  say "bare tiny"; timed python3 $P/tiny_step.py --steps 6000
  under tiny-$rep python3 $P/tiny_step.py --steps 6000
done
say "hook path"; timed python3 benchmarks/jax_hook_path.py --n 20000
under lm_hd128 python3 $P/lm_decoder.py --heads 8
under mlp_1000 python3 $P/mlp_train.py --widths 1000,3000,3000,1000
say "bare mlp"; timed python3 $P/mlp_train.py
under mlp python3 $P/mlp_train.py
say "overhead jax-async"
timed python3 benchmarks/overhead.py --program jax-async --reps 2 --steps 4000 --paired-steps 4000
say "overhead jax"
timed python3 benchmarks/overhead.py --program jax --reps 2 --steps 1000 --paired-steps 0
pack
