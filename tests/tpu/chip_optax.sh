#!/usr/bin/env bash
# Session 40 (7 December): two of optax's own example notebooks on the chip, as programs
# (device tool, repo root, .tpu/ carried; $OX is what tests/tpu/programs/optax_examples.py
# makes of a snapshot, its stubs on PYTHONPATH):
#   timeout 580 bash tests/tpu/chip_optax.sh PART
# Truth comes from bare_trace.py's clock: the median time between the programs' own prints.
# 1: nanolm.py (a char-level decoder, f32, dropout 0.2, batch 128 x 64; 3000 steps, an eval
#    and a print every 250) bare, its twins in bf16, with the rbg PRNG and without dropout
#    bare; then nanolm.py under `tpuscope run`.
# 2: cifar_resnet.py (an NNX ResNet-18, f32, batch 128, per-image augmentation in Python; 100
#    steps an epoch, 6 epochs, a print each, upstream's 10,000 test images evaluated each
#    epoch) bare, with 128 test images (the epoch's train steps alone), its twins with the
#    batches made once and in bf16 bare; then cifar_resnet.py under `tpuscope run`.
# 3: this round's code (the training step is the loop's, the evaluation before it setup):
#    cifar_resnet.py under `tpuscope run` again; nanolm.py without dropout and with the rbg
#    PRNG bare, 200 steps, steps 60-79 traced (their ops against the f32 run's own trace).
PART=${1:-1}
LOG=$OUT/log$PART.txt
source tests/tpu/chip_lib.sh
OX=${OX:-optax}
export PYTHONPATH=$PWD/$OX/stubs:$PYTHONPATH
pack() { tar czf $OUT/runs$PART.tgz -C /tmp --exclude='*/debug' --exclude='*/trace' store 2>/dev/null; }
clock() {  # mark per program: bare, the median step between the program's marked prints
  local mark=$1 per=$2; shift 2
  say "bare clock: $*"
  timed python3 $P/bare_trace.py --mark "$mark" --after 2 --per "$per" "$@"
}
if [ "$PART" = 1 ]; then
  export NANOLM_STEPS=3000 NANOLM_EVAL=250
  for f in nanolm nanolm_bf16 nanolm_rbg nanolm_nodrop; do clock Step: 250 $OX/$f.py; done
  under nanolm python3 $OX/nanolm.py >/dev/null; paths
fi
if [ "$PART" = 2 ]; then
  export OPTAX_CIFAR_TRAIN=12800 OPTAX_EPOCHS=6 OPTAX_PRINT=1
  clock Epoch: 100 $OX/cifar_resnet.py
  OPTAX_CIFAR_TEST=128 clock Epoch: 100 $OX/cifar_resnet.py
  clock Epoch: 100 $OX/cifar_resnet_cached.py
  clock Epoch: 100 $OX/cifar_resnet_bf16.py
  under resnet python3 $OX/cifar_resnet.py; paths
fi
if [ "$PART" = 3 ]; then
  OPTAX_CIFAR_TRAIN=12800 OPTAX_EPOCHS=6 OPTAX_PRINT=1 under resnet python3 $OX/cifar_resnet.py
  paths
  B=/tmp/bare; mkdir -p $B
  for f in nanolm_nodrop nanolm_rbg; do
    say "bare trace: $f.py, steps 60-79"
    NANOLM_STEPS=200 NANOLM_EVAL=20 timed python3 $P/bare_trace.py --mark Step: --after 3 \
      --per 20 --out $B/$f $OX/$f.py
  done
  tar czf $OUT/bare_nanolm.tgz -C $B nanolm_nodrop nanolm_rbg 2>/dev/null; ls -la $OUT
fi
