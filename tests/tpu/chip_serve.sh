#!/usr/bin/env bash
# Session 43 (7 December): Flax's Gemma example served as its sampler samples (gemma_serve.py
# over $UP/gemma, a flax snapshot's examples/gemma; jaxtyping's wheels in .tpu/dfxwhl), on the
# chip (device tool, repo root, .tpu/ carried):
#   timeout 580 bash tests/tpu/chip_serve.sh PART
# 1: bare, six requests of two prompts each (each new prompt length compiles the sampler's
#    while_loop again), with JAX's compile log; then its twin with one buffer length
#    (--fixed 96: one compile).
# 2: the same program under `tpuscope run`, default mode.
# 3: the twin (--fixed 96), twice through the prompts, under `tpuscope run`.
# 4: the same twin bare (its requests' times, against part 3's steps).
PART=${1:-1}
LOG=$OUT/log$PART.txt
source tests/tpu/chip_lib.sh
PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --no-index --no-deps --no-compile \
  --no-cache-dir --upgrade --target $SITE .tpu/dfxwhl/jaxtyping*.whl .tpu/dfxwhl/wadler*.whl \
  || echo "jaxtyping wheels failed" | tee -a $LOG
UP=${UP:-upstream}
LAYERS=${LAYERS:-0}
G="$P/gemma_serve.py --gemma $UP/gemma --layers $LAYERS"
# the store without raw traces, in parts of 15 MB (a run's trace events can be 33 MB)
pack() { tar cf - -C /tmp --exclude='*/debug' --exclude='*/trace' store 2>/dev/null | split -b 15000000 - $OUT/runs$PART.tar.; }
compiles() { grep -a "^request\|^total_s\|^wall\|Finished .*_sample_fn\|Error\|error" | tee -a $LOG; }
if [ "$PART" = 1 ]; then
  say "bare: $G"
  JAX_LOG_COMPILES=1 timeout 280 /usr/bin/time -f "wall %e s" python3 $G 2>&1 | quiet | compiles
  say "bare: $G --fixed 96"
  JAX_LOG_COMPILES=1 timeout 200 /usr/bin/time -f "wall %e s" python3 $G --fixed 96 2>&1 | quiet \
    | compiles
fi
if [ "$PART" = 2 ]; then
  under serve python3 $G; paths
fi
if [ "$PART" = 4 ]; then
  say "bare: $G --fixed 96 --rounds 2"
  timeout 200 /usr/bin/time -f "wall %e s" python3 $G --fixed 96 --rounds 2 2>&1 | quiet | compiles
fi
if [ "$PART" = 3 ]; then
  under serve_fixed python3 $G --fixed 96 --rounds 2; paths
fi
pack
