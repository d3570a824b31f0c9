#!/usr/bin/env bash
# Session 39 (7 December): two of Equinox's own example notebooks on the chip, as programs
# (device tool, repo root, .tpu/ carried with equinox, jaxtyping, einops and wadler_lindig's
# wheels in .tpu/whl; $EQ is what tests/tpu/programs/eqx_examples.py makes of a snapshot):
#   TPU_WITH_FLAX= timeout 580 bash tests/tpu/chip_equinox.sh PART
# Truth comes from bare_trace.py's clock: the median time between the programs' own prints.
# 1: train_rnn.py (a GRU over lax.scan, batches of 32, `eqx.filter_jit`, `loss.item()` and a
#    print each step; 2000 steps) bare, its twins without the per-step read
#    (train_rnn_noitem.py) and under plain jax.jit without filter_jit's wait
#    (train_rnn_nowait.py) bare; then train_rnn.py under `tpuscope run`.
# 2: vit.py (the ViT: 6 blocks, width 512, 8 heads of 64, batch 64, f32; 1000 steps, a print
#    every 50; then its test loop, 156 batches, as upstream) bare, its keys twin (the step's 64
#    dropout keys split in one call) bare with one test batch, then vit.py under
#    `tpuscope run`.
# 3: the ViT's twins without filter_jit's wait (vit_nowait.py) and with both fixes
#    (vit_keys_nowait.py), bare with one test batch; the RNN's loader over numpy copies of its
#    arrays (train_rnn_numpy.py); vit.py and its 4 heads of 128 (vit_hd128.py) bare with steps
#    150-200 traced. (Its traces came back too large for $OUT and were not kept.)
# 4: this round's code (the after-the-loop step, the fix beside a jitted step): vit.py and
#    train_rnn.py under `tpuscope run` again, their stores without traces.
PART=${1:-1}
LOG=$OUT/log$PART.txt
source tests/tpu/chip_lib.sh
EQ=${EQ:-equinox}
B=/tmp/bare; mkdir -p $B
quiet() { grep --line-buffered -a -v -i "^step=\|hugepage\|warnings.warn"; }
pack() { tar czf $OUT/runs$PART.tgz -C /tmp --exclude='*/debug' store 2>/dev/null; }
clock() {  # mark per program: bare, the median step between the program's marked prints
  local mark=$1 per=$2; shift 2
  say "bare clock: $*"
  timed python3 $P/bare_trace.py --mark "$mark" --after 2 --per "$per" "$@"
}
if [ "$PART" = 1 ]; then
  export EQX_RNN_STEPS=2000
  clock step= 1 $EQ/train_rnn.py
  clock step= 50 $EQ/train_rnn_noitem.py
  clock step= 50 $EQ/train_rnn_nowait.py
  under rnn python3 $EQ/train_rnn.py; paths
fi
if [ "$PART" = 2 ]; then
  export EQX_VIT_STEPS=1000 EQX_VIT_PRINT=50
  clock Step: 50 $EQ/vit.py
  EQX_VIT_TEST_BATCHES=1 clock Step: 50 $EQ/vit_keys.py
  under vit python3 $EQ/vit.py; paths
fi
if [ "$PART" = 3 ]; then
  export EQX_VIT_STEPS=1000 EQX_VIT_PRINT=50 EQX_VIT_TEST_BATCHES=1 EQX_RNN_STEPS=2000
  clock Step: 50 $EQ/vit_nowait.py
  clock Step: 50 $EQ/vit_keys_nowait.py
  clock step= 1 $EQ/train_rnn_numpy.py
  export EQX_VIT_STEPS=300
  say "bare trace: vit.py, steps 150-200"
  timed python3 $P/bare_trace.py --mark Step: --after 4 --per 50 --out $B/vit $EQ/vit.py
  say "bare trace: vit_hd128.py, steps 150-200"
  timed python3 $P/bare_trace.py --mark Step: --after 4 --per 50 --out $B/vit_hd128 $EQ/vit_hd128.py
  tar czf $OUT/bare_vit.tgz -C $B vit vit_hd128 2>/dev/null
fi
if [ "$PART" = 4 ]; then
  pack() { tar czf $OUT/runs$PART.tgz -C /tmp --exclude='*/debug' --exclude='*/trace' store 2>/dev/null; }
  export EQX_VIT_STEPS=1000 EQX_VIT_PRINT=50 EQX_RNN_STEPS=2000
  under vit python3 $EQ/vit.py; paths
  under rnn python3 $EQ/train_rnn.py; paths
fi
