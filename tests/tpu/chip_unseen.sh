#!/usr/bin/env bash
# Programs of kinds the chip corpus had not held, bare and under `tpuscope run` in the default
# mode (device tool, repo root, .tpu/ carried after prepare.sh):
#   TPU_WITH_FLAX= timeout 540 bash tests/tpu/chip_unseen.sh PART
# 1: cnn_train.py (a ResNet-18 in flax's imagenet idiom) in bf16 and f32 (its f32 cost: the f32
#    step less the bf16 step), and mlp_train.py --eager (the step not jitted) with its jitted twin.
# 2: the round's check on the code that read part 1: the eager MLP and the f32 ResNet under
#    tpuscope again, the f32 MLP at default precision against its mixed-precision twin (f32
#    parameters, bf16 compute), bare and under tpuscope, and Keras's fit at key_dim 64 under it.
# 3: part 2 with the eager MLP bare first (tpuscope's cost on an un-jitted loop, paired) and the
#    GPT at head_dim 64 under tpuscope (the card's wording).
# The store and the log are re-packed into $OUT after each run, so a run cut short keeps what
# finished.
PART=${1:-1}
LOG=$OUT/log.txt
source tests/tpu/chip_lib.sh
if [ "$PART" = 1 ]; then
  bare python3 $P/mlp_train.py --eager
  bare python3 $P/mlp_train.py
  under mlp_eager python3 $P/mlp_train.py --eager
  bare python3 $P/cnn_train.py --dtype bf16
  bare python3 $P/cnn_train.py --dtype f32
  under cnn_bf16 python3 $P/cnn_train.py --dtype bf16
  under cnn_f32 python3 $P/cnn_train.py --dtype f32
fi
if [ "$PART" = 3 ]; then
  bare python3 $P/mlp_train.py --eager
  under gpt_hd64 python3 $P/gpt_attention.py --heads 16
fi
if [ "$PART" = 2 ] || [ "$PART" = 3 ]; then
  under mlp_eager python3 $P/mlp_train.py --eager
  bare python3 $P/mlp_train.py --dtype f32
  bare python3 $P/mlp_train.py --master-f32
  under mlp_f32 python3 $P/mlp_train.py --dtype f32
  under cnn_f32 python3 $P/cnn_train.py --dtype f32
  under keras_hd64 python3 $P/keras_transformer.py --heads 16
fi
pack
