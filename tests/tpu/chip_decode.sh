#!/usr/bin/env bash
# The KV-cached decoder's head_dim twins and an input-bound training loop on the chip (device
# tool, repo root, .tpu/ carried after prepare.sh):
#   TPU_WITH_FLAX= timeout 560 bash tests/tpu/chip_decode.sh PART
# 1: gpt_decode.py at head_dim 64 and 128 in both cache layouts (nanoGPT's bhtd, flax's and
#    gemma's bthd), bare, each with a 3-token jax.profiler trace and XLA's optimized HLO (the
#    layouts XLA chose) in $OUT/decode/; mlp_train.py --host-data (mnist_classifier's numpy
#    batches) bare and under `tpuscope run`; the bthd decoder at head_dim 64 under it.
PART=${1:-1}
LOG=$OUT/log.txt
source tests/tpu/chip_lib.sh
D=$OUT/decode
if [ "$PART" = 1 ]; then
  for layout in bhtd bthd; do
    for heads in 16 8; do
      name=${layout}_h$heads
      XLA_FLAGS="--xla_dump_to=$D/$name.hlo --xla_dump_hlo_module_re=.*decode_step.* --xla_dump_hlo_as_text" \
        bare python3 $P/gpt_decode.py --layout $layout --heads $heads --trace $D/$name.trace
      find $D/$name.hlo -type f ! -name '*after_optimizations.txt' -delete
    done
  done
  bare python3 $P/mlp_train.py --host-data
  bare python3 $P/mlp_train.py
  under mlp_host python3 $P/mlp_train.py --host-data
  under decode_bthd64 python3 $P/gpt_decode.py --layout bthd --heads 16
fi

# 2: the round's code on the chip: the merged-heads cache (btf) at both head_dims bare, the
#    decoders under `tpuscope run` (the lane-writes card at head_dim 64 in both layouts, none
#    for btf or at head_dim 128, no idle card on the device-bound twin), the input-bound MLP
#    bare, its on-device twin, and under tpuscope (its idle card against the untraced steps).
if [ "$PART" = 2 ]; then
  bare python3 $P/gpt_decode.py --layout btf --heads 16
  bare python3 $P/gpt_decode.py --layout btf --heads 8
  under decode_bthd64 python3 $P/gpt_decode.py --layout bthd --heads 16
  under decode_btf64 python3 $P/gpt_decode.py --layout btf --heads 16
  under decode_bhtd64 python3 $P/gpt_decode.py --heads 16
  under decode_bthd128 python3 $P/gpt_decode.py --layout bthd --heads 8
  bare python3 $P/mlp_train.py --host-data
  bare python3 $P/mlp_train.py
  under mlp_host python3 $P/mlp_train.py --host-data
fi
pack
# 3: the caches kept in the compiler's layout (--auto-layout) at head_dim 64, bare in both
#    layouts and under `tpuscope run`; the bthd decoder under it again (the fixture).
if [ "$PART" = 3 ]; then
  bare python3 $P/gpt_decode.py --layout bthd --heads 16 --auto-layout
  bare python3 $P/gpt_decode.py --heads 16 --auto-layout
  under decode_auto64 python3 $P/gpt_decode.py --layout bthd --heads 16 --auto-layout
  under decode_bthd64 python3 $P/gpt_decode.py --layout bthd --heads 16
  pack
fi
