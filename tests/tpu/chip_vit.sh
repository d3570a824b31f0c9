#!/usr/bin/env bash
# A Vision Transformer (vit_train.py: google-research/vision_transformer's ViT-B/16 width and
# heads, 4 layers, 197 tokens, batch 64), a kind the chip corpus lacked, in upstream's float32
# and in bf16, at head_dim 64 and 128 (device tool, repo root, .tpu/ carried after prepare.sh):
#   timeout 560 bash tests/tpu/chip_vit.sh PART
# 1: the bare truths, each with a 3-step trace (in $OUT/vit.tgz): f32 at head_dim 64 (as
#    upstream runs), bf16 at 64, bf16 at 128 (6 heads, the same width).
# 2: the same three under `tpuscope run` (default mode).
PART=${1:-1}
LOG=$OUT/log.txt
source tests/tpu/chip_lib.sh
D=/tmp/vit
V=$P/vit_train.py
if [ "$PART" = 1 ]; then
  bare python3 $V --trace $D/f32_64
  bare python3 $V --dtype bf16 --trace $D/bf16_64
  bare python3 $V --dtype bf16 --heads 6 --trace $D/bf16_128
  tar czf $OUT/vit.tgz -C /tmp vit
fi
if [ "$PART" = 2 ]; then
  under vit_f32_64 python3 $V
  under vit_bf16_64 python3 $V --dtype bf16
  under vit_bf16_128 python3 $V --dtype bf16 --heads 6
fi
pack
