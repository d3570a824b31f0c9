#!/usr/bin/env bash
# Issue 40's lane on the chip, in one call (device tool, repo root, .tpu/ carried after
# prepare.sh):   TPU_WITH_FLAX= timeout 560 bash tests/tpu/chip_lane.sh [PART]
# PART 1: the lane's parts in one process (benchmarks/jax_lane_parts.py), the dispatch-bound
# step bare vs under `tpuscope run --quiet` (ABAB), benchmarks/overhead.py --program jax-async.
# PART 2: the pairs at --size 128 and `tpuscope bench`'s JAX modes. PART 3: the last check:
# the parts, 3 pairs, the blocking tiny step and the 1.8 ms MLP bare vs under tpuscope, and
# benchmarks/overhead.py (jax-async, jax). PART 4: the parts twice, more kinds, and the clock's
# warm cost on the host (round 3). PART 5: the parts, then 4 pairs of the leanest
# dispatch-bound step (tiny_step.py --lean, the issue's ~120 us). Logs and stores land in $OUT.
PART=${1:-1}
LOG=$OUT/lane$PART.txt
source tests/tpu/chip_lib.sh
pack() { tar czf $OUT/lane$PART.tgz -C /tmp store 2>/dev/null; }
pairs() {  # REPS pairs (2)
  for rep in $(seq ${REPS:-2}); do
    say "bare tiny $*"; timed python3 $P/tiny_step.py --steps ${STEPS:-6000} "$@"
    say "tpuscope tiny $*"
    timed tpuscope run --quiet --store $S --name tiny-$rep python3 $P/tiny_step.py --steps ${STEPS:-6000} "$@"
    paths; pack
  done
}
if [ "$PART" = 1 ]; then
  say "lane parts"; timed python3 benchmarks/jax_lane_parts.py --n 12000
  pairs
  say "overhead jax-async"
  timed python3 benchmarks/overhead.py --program jax-async --reps 2 --steps 6000 --paired-steps 4000
  pack
fi
if [ "$PART" = 2 ]; then
  REPS=1 pairs --size 128
  export JAX_COMPILATION_CACHE_DIR=/tmp/jax-cache JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0
  export JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=0
  say "bench jax"
  timeout 300 tpuscope bench --store $S --model mlp --backends jax --modes strict,fused,debug \
    --steps 30 --repeats 1 --markdown -q 2>&1 | quiet | tee -a $LOG
  pack
fi
if [ "$PART" = 3 ]; then
  say "lane parts"; timed python3 benchmarks/jax_lane_parts.py --n 12000
  REPS=3 pairs
  say "bare tiny --block"; timed python3 $P/tiny_step.py --steps 3000 --block
  say "tpuscope tiny --block"
  timed tpuscope run --quiet --store $S --name tiny-block python3 $P/tiny_step.py --steps 3000 --block
  paths; pack
  say "bare mlp"; timed python3 $P/mlp_train.py --steps 1000
  say "tpuscope mlp"; timed tpuscope run --quiet --store $S --name mlp python3 $P/mlp_train.py --steps 1000
  paths; pack
  say "overhead jax-async"
  timed python3 benchmarks/overhead.py --program jax-async --reps 2 --steps 6000 --paired-steps 4000
  say "overhead jax (blocking)"
  timed python3 benchmarks/overhead.py --program jax --reps 2 --steps 1000 --paired-steps 0
  pack
fi
if [ "$PART" = 4 ]; then
  say "clock, warm"
  python3 -m timeit -s "from time import perf_counter_ns as c" "c()" 2>&1 | tee -a $LOG
  python3 -m timeit -s "from time import monotonic_ns as c" "c()" 2>&1 | tee -a $LOG
  for rep in 1 2; do say "lane parts $rep"; timed python3 benchmarks/jax_lane_parts.py --n 16000; done
fi
if [ "$PART" = 5 ]; then
  say "lane parts"; timed python3 benchmarks/jax_lane_parts.py --n 8000
  REPS=${REPS:-4} STEPS=10000 pairs --lean
fi
