#!/usr/bin/env bash
# Session 36 (7 December): Keras's default float32 policy against mixed_bfloat16 on the chip,
# and the head_dim 128 twins' traces (device tool, repo root, .tpu/ carried; no flax needed):
#   TPU_WITH_FLAX= timeout 580 bash tests/tpu/chip_keras.sh PART
# 1: keras_xception.py (keras-io's image classifier from scratch: a small Xception of separable
#    convolutions, batches of 128 180x180 images, `fit` on numpy arrays) under float32, as the
#    example runs, and under mixed_bfloat16, bare; then keras_transformer.py at key_dim 128
#    under float32, bare (its mixed_bfloat16 twin: 33.86 ms a step, docs/tpu.md); then all
#    three under `tpuscope run` in the default mode.
# 2: this round's code (the profiler's stop collects beside the program): keras_transformer.py
#    at key_dim 128 under float32 and keras_xception.py under float32 under `tpuscope run`;
#    then default-mode runs of two head_dim 128 twins whose traces were not kept:
#    lm_decoder.py --heads 8 and gpt_attention.py --attn dpa --heads 8.
# 3: a step clock change, not kept (a polled step still running 2 ms after its close timed by
#    the helper thread; ready.py): gpt_attention.py --attn dpa --heads 8 (a loop that never
#    reads until its end) and keras_xception.py (epochs that drain the device) under
#    `tpuscope run`; tiny_step.py (dispatch-bound, never blocks) bare and under tpuscope, twice.
# 4: session 37's step clock (a step whose host interval took 5 ms or more timed by the helper
#    thread; the profiler's stop hands it the polled steps; a polled step the device started
#    behind takes the device's pace): the dpa head_dim 128 loop and Keras's Xception under
#    `tpuscope run`; tiny_step.py bare and under tpuscope, twice. Run from a folder with no
#    tpuscope/ source in it (the installed wheel, not the carried tree's, is imported).
# 5: the same step clock on a flax loop that never reads before its end (lm_decoder.py at
#    head_dim 128; TPU_WITH_FLAX=1) and on Keras's Xception under mixed_bfloat16.
# 6: keras-io's two unseen examples (session 38), bare then under `tpuscope run`: the MNIST
#    convnet (keras_mnist.py) with Keras's progress bar, and with `steps_per_execution=32`
#    (Keras's own way to run several batches a call); then the Vision Transformer
#    (keras_vit.py, float32 as the example runs) bare, its mixed_bfloat16 twin bare, and under
#    `tpuscope run`. Progress bars are left out of the log. (The ViT's first run, with 20,000
#    samples, did not end within the call: its compiles, ragged batches included.)
# 7: the ViT on 25,600 samples (no ragged batch in either split: one compile of each step):
#    float32 bare, under `tpuscope run`, mixed_bfloat16 bare.
# 8: the ViT's head_dim 128 twin (2 heads of 128) under float32, bare.
# 9: (part 7's float32 ViT had finished one epoch of 90 batches in about 7 minutes, compiles
#    included) the ViT on 2,560 samples, one epoch of 9 batches, under `tpuscope run`.
PART=${1:-1}
LOG=$OUT/log$PART.txt
source tests/tpu/chip_lib.sh
quiet() { stdbuf -oL tr '\r' '\n' | grep --line-buffered -a -v -i "━\|hugepage\|warnings.warn"; }
# part 1's stores come back without their raw traces (image batches fed from numpy fill a
# window with millions of host events; the tables hold the ops' times)
SKIP=${SKIP_TRACE-}; [ "$PART" = 1 ] && SKIP=--exclude='*/trace'
pack() { tar czf $OUT/runs$PART.tgz -C /tmp --exclude='*/debug' $SKIP store 2>/dev/null; }
if [ "$PART" = 1 ]; then
  bare python3 $P/keras_xception.py --policy float32
  bare python3 $P/keras_xception.py --policy mixed_bfloat16
  bare python3 $P/keras_transformer.py --heads 8 --policy float32
  under xception_f32 python3 $P/keras_xception.py --policy float32; paths
  under xception_bf16 python3 $P/keras_xception.py --policy mixed_bfloat16; paths
  under keras_f32_128 python3 $P/keras_transformer.py --heads 8 --policy float32; paths
fi
if [ "$PART" = 2 ]; then
  under keras_f32_128 python3 $P/keras_transformer.py --heads 8 --policy float32; paths
  SKIP=--exclude='xception*/trace'
  under xception_f32b python3 $P/keras_xception.py --policy float32; paths
  under lm_hd128 python3 $P/lm_decoder.py --heads 8; paths
  under dpa_hd128 python3 $P/gpt_attention.py --attn dpa --heads 8; paths
fi
if [ "$PART" = 3 ]; then
  SKIP=--exclude='xception*/trace'
  under dpa_hd128c python3 $P/gpt_attention.py --attn dpa --heads 8; paths
  under xception_f32c python3 $P/keras_xception.py --policy float32; paths
  for rep in 1 2; do
    bare python3 $P/tiny_step.py --steps 6000
    under tiny-$rep python3 $P/tiny_step.py --steps 6000; paths
  done
fi
if [ "$PART" = 4 ]; then
  SKIP=--exclude='xception*/trace'
  under dpa_hd128d python3 $P/gpt_attention.py --attn dpa --heads 8; paths
  for rep in 1 2; do
    bare python3 $P/tiny_step.py --steps 6000
    under tiny-$rep python3 $P/tiny_step.py --steps 6000; paths
  done
  under xception_f32d python3 $P/keras_xception.py --policy float32; paths
fi
if [ "$PART" = 5 ]; then
  SKIP=--exclude='xception*/trace'
  under lm_hd128e python3 $P/lm_decoder.py --heads 8; paths
  under xception_bf16e python3 $P/keras_xception.py --policy mixed_bfloat16; paths
fi
if [ "$PART" = 6 ]; then
  bare python3 $P/keras_mnist.py
  bare python3 $P/keras_mnist.py --steps-per-execution 32
  under mnist python3 $P/keras_mnist.py; paths
  under mnist_spe32 python3 $P/keras_mnist.py --steps-per-execution 32; paths
  bare python3 $P/keras_vit.py
  bare python3 $P/keras_vit.py --policy mixed_bfloat16
  under vit_f32 python3 $P/keras_vit.py; paths
fi
if [ "$PART" = 7 ]; then
  bare python3 $P/keras_vit.py --samples 25600
  under vit_f32 python3 $P/keras_vit.py --samples 25600; paths
  bare python3 $P/keras_vit.py --samples 25600 --policy mixed_bfloat16
fi
if [ "$PART" = 9 ]; then
  SKIP=--exclude='*/trace'
  under vit_f32_small python3 $P/keras_vit.py --samples 2560 --epochs 1 --verbose 2; paths
fi
if [ "$PART" = 8 ]; then
  bare python3 $P/keras_vit.py --samples 25600 --heads 2 --key-dim 128
fi
pack
