#!/usr/bin/env bash
# Issue 40's chip check (device tool, repo root, .tpu/ carried after prepare.sh):
#   timeout 580 bash tests/tpu/chip_overhead.sh [PART]
# PART 1: bare traces of the decoder at head_dim 64 and 128 (issue 39's per-op evidence), the
# dispatch-bound step bare vs under `tpuscope run --quiet` (ABAB, whole-process wall too: the
# start-up cost), and the host costs. PART 2: benchmarks/overhead.py (jax-async, jax). PART 3:
# `tpuscope bench`'s JAX modes. Everything lands in $OUT after each program.
PART=${1:-1}
LOG=$OUT/log$PART.txt
source tests/tpu/chip_lib.sh
mkdir -p /tmp/traces
pack() { tar czf $OUT/part$PART.tgz -C /tmp store traces 2>/dev/null; }
paths() {  # what the JAX hooks did per step (meta) and tpuscope's own cost line
  python3 - "$S" <<'EOF' 2>&1 | tee -a $LOG
import json, sys
import tpuscope
from tpuscope.analyze.summary import profiler_ms_per_step
run = tpuscope.load_run("latest", store=sys.argv[1])
proc = run.meta["processes"][0]
print(json.dumps({"paths": proc.get("jax_step_paths"), "cost": proc.get("profiler_cost"),
                  "ms_per_step": profiler_ms_per_step(run.meta)}))
EOF
}
if [ "$PART" = 1 ]; then
  for h in 16 8; do
    say "bare trace lm_decoder --heads $h"
    timed python3 $P/lm_decoder.py --heads $h --trace /tmp/traces/lm_heads$h
    pack
  done
  for rep in 1 2 3; do
    say "bare tiny"; timed python3 $P/tiny_step.py --steps 6000
    say "tpuscope tiny"
    timed tpuscope run --quiet --store $S --name tiny-$rep python3 $P/tiny_step.py --steps 6000
    paths; tpuscope show latest --store $S 2>&1 | grep -i "cost\|trace\|step time" | tee -a $LOG
    pack
  done
  say "bare tiny --block"; timed python3 $P/tiny_step.py --steps 3000 --block
  say "tpuscope tiny --block"; timed tpuscope run --quiet --store $S --name tiny-block python3 $P/tiny_step.py --steps 3000 --block
  paths; pack
  say "bare mlp"; timed python3 $P/mlp_train.py
  say "tpuscope mlp"; timed tpuscope run --quiet --store $S --name mlp python3 $P/mlp_train.py
  paths; tpuscope show latest --store $S 2>&1 | grep -i "cost\|trace\|step time" | tee -a $LOG
  pack
  say "host costs"; timed python3 benchmarks/jax_host_costs.py
fi
if [ "$PART" = 2 ]; then
  say "overhead jax-async"
  timed python3 benchmarks/overhead.py --program jax-async --reps 3 --steps 4000 --paired-steps 4000
  say "overhead jax (blocking)"
  timed python3 benchmarks/overhead.py --program jax --reps 3 --steps 1000 --paired-steps 2000
  pack
fi
if [ "$PART" = 3 ]; then  # op by op compiles each op (0.5-2.5 s on the v5e): one cache for all
  export JAX_COMPILATION_CACHE_DIR=/tmp/jax-cache JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0
  export JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=0
  say "bench jax"
  timeout 500 tpuscope bench --store $S --model mlp --backends jax --modes strict,fused,debug --steps 30 \
    --repeats 1 --markdown -q 2>&1 | quiet | tee -a $LOG
  pack
fi
