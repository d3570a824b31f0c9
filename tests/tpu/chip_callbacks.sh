#!/usr/bin/env bash
# Run on 6 December (docs/tpu.md, "Host callbacks in a jitted step"; the runs: tests/tpu/runs/cb_*).
# Host callbacks inside a jitted training step, and the relayout card's first fix, on the chip
# (device tool, repo root, .tpu/ carried after prepare.sh):
#   TPU_WITH_FLAX= timeout 560 bash tests/tpu/chip_callbacks.sh PART
# 1: mlp_train.py bare without a callback and with each kind (--callback print|pure|io), then
#    each kind again with a 5-step jax.profiler trace (in $OUT/callbacks.tgz): what a host
#    callback costs a step on a TPU, and what its trace shows (send/recv host transfers).
# 2: each kind under `tpuscope run` (default mode); the merged-heads decoder (--layout btf)
#    with its caches in the compiler's layout (--auto-layout: does Format(Layout.AUTO) remove
#    the boundary copies the relayout card costs, 2.76 ms of 4.07 ms a token?), bare and under
#    `tpuscope run`.
PART=${1:-1}
LOG=$OUT/log.txt
source tests/tpu/chip_lib.sh
D=/tmp/callbacks
if [ "$PART" = 1 ]; then
  for kind in "" print pure io; do
    bare python3 $P/mlp_train.py --steps 60 ${kind:+--callback $kind} | grep -v '^loss '
  done
  for kind in print pure io; do
    bare python3 $P/mlp_train.py --callback $kind --trace $D/$kind | grep -v '^loss '
  done
  tar czf $OUT/callbacks.tgz -C /tmp callbacks
fi
if [ "$PART" = 2 ]; then
  for kind in print pure io; do
    under cb_$kind python3 $P/mlp_train.py --callback $kind
  done
  bare python3 $P/gpt_decode.py --layout btf --heads 16 --auto-layout
  bare python3 $P/gpt_decode.py --layout btf --heads 16
  under decode_btf_auto64 python3 $P/gpt_decode.py --layout btf --heads 16 --auto-layout
fi
pack
