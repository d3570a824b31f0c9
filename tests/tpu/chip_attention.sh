#!/usr/bin/env bash
# Attention written three ways, and Keras's fit, on the chip in the default mode, with the bare
# twins that are their truth (device tool, repo root, .tpu/ carried after prepare.sh):
#   TPU_WITH_FLAX= timeout 560 bash tests/tpu/chip_attention.sh PART
# 1: gpt_attention.py (nanoGPT's `q @ k.T`, then `jax.nn.dot_product_attention`) at head_dim 64
#    and 128, bare and under `tpuscope run`; 2: keras_transformer.py (keras-io's classifier,
#    MultiHeadAttention key_dim 64 and 128, a ragged last batch), bare and under tpuscope;
#    3: part 2's two tpuscope runs alone.
# The store and the log are re-packed into $OUT after each run, so a run cut short keeps what
# finished.
PART=${1:-1}
LOG=$OUT/log.txt
source tests/tpu/chip_lib.sh
if [ "$PART" = 1 ]; then
  bare python3 $P/gpt_attention.py --heads 16
  bare python3 $P/gpt_attention.py --heads 8
  under gpt_hd64 python3 $P/gpt_attention.py --heads 16
  under gpt_hd128 python3 $P/gpt_attention.py --heads 8
  bare python3 $P/gpt_attention.py --attn dpa --heads 16
  bare python3 $P/gpt_attention.py --attn dpa --heads 8
  under dpa_hd64 python3 $P/gpt_attention.py --attn dpa --heads 16
fi
if [ "$PART" = 3 ]; then  # the Keras runs again, after the attention kernels were read
  under keras_hd64 python3 $P/keras_transformer.py --heads 16
  under keras_hd128 python3 $P/keras_transformer.py --heads 8
fi
if [ "$PART" = 2 ]; then
  bare python3 $P/keras_transformer.py --heads 16
  bare python3 $P/keras_transformer.py --heads 8
  under keras_hd64 python3 $P/keras_transformer.py --heads 16
  under keras_hd128 python3 $P/keras_transformer.py --heads 8
fi
pack
