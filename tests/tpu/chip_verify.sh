#!/usr/bin/env bash
# Session 31 (6 December): session 30's changes on the chip, and Flax's NNX toy examples as a new
# user runs them (device tool, repo root, .tpu/ carried after prepare.sh):
#   timeout 570 bash tests/tpu/chip_verify.sh PART
# 1: nnx_cnn.py bare and under `tpuscope run` (its steps' probe: session 30's probe.py), the
#    ordered io_callback under tpuscope (the idle card that names it), mlp_train.py --state (a
#    donated TrainState returned alone: the lane's late mark) bare and under, two pairs of the
#    leanest dispatch-bound step.
# 2: google/flax examples/nnx_toy_examples 02, 03, 04, 07, each bare and under `tpuscope run`,
#    from timed copies in $UP (their loop timed by perf_counter, the plot dropped; made from a
#    fetched snapshot, not committed).
# 3: Flax's Gemma example model (gemma_train.py over $UP/gemma, a flax snapshot's
#    examples/gemma; jaxtyping's wheels in .tpu/whl) bare and under `tpuscope run`, in the
#    example's bf16 activations and in f32 (the bf16 run is the f32 one's truth).
# 4: the round's last check: the bf16 Gemma under `tpuscope run` again (the device's backlog at
#    the trace's start), Flax's 03_train_state bare and under tpuscope, its loop timed after its
#    first 10 steps. Packs the store without the raw traces (Gemma's is 47 MB).
PART=${1:-1}
LOG=$OUT/log$PART.txt
source tests/tpu/chip_lib.sh
UP=${UP:-upstream}
pack() { tar czf $OUT/runs$PART.tgz -C /tmp store 2>/dev/null; }
if [ "$PART" = 1 ]; then
  bare python3 $P/nnx_cnn.py
  under nnx_cnn python3 $P/nnx_cnn.py; paths
  under cb_io python3 $P/mlp_train.py --callback io; paths
  bare python3 $P/mlp_train.py --state --steps 200
  under mlp_state python3 $P/mlp_train.py --state --steps 200; paths
  for rep in 1 2; do
    bare python3 $P/tiny_step.py --steps 10000 --lean
    say "tpuscope tiny --lean $rep"
    timed tpuscope run --quiet --store $S --name tiny-$rep python3 $P/tiny_step.py --steps 10000 --lean
    paths
  done
fi
if [ "$PART" = 2 ]; then
  for f in 03_train_state 02_lifted_transforms 07_array_leaves 04_data_parallel_with_jit; do
    bare python3 $UP/$f.py | grep -v "^step"
    under nnx_$f python3 $UP/$f.py; paths
  done
fi
if [ "$PART" = 3 ]; then
  G="$P/gemma_train.py --gemma $UP/gemma --batch 8"
  bare python3 $G
  under gemma_bf16 python3 $G; paths
  bare python3 $G --dtype f32
  under gemma_f32 python3 $G --dtype f32; paths
fi
if [ "$PART" = 4 ]; then
  pack() { tar czf $OUT/runs$PART.tgz -C /tmp --exclude='*/trace' --exclude='*/debug' store 2>/dev/null; }
  under gemma_bf16 python3 $P/gemma_train.py --gemma $UP/gemma --batch 8; paths
  bare python3 $UP/03_train_state.py | grep -v "^step"
  under nnx_03_train_state python3 $UP/03_train_state.py; paths
fi
pack
