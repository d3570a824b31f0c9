#!/usr/bin/env bash
# Session 32 (6 December): jax-ml/jax's own examples on the chip as a new user runs them (device
# tool, repo root, .tpu/ carried; $UP is what tests/tpu/programs/jax_examples.py makes of a
# snapshot: synthetic MNIST, as the chip has no network, stand-ins for a plot and an accountant):
#   timeout 580 bash tests/tpu/chip_upstream.sh PART
# 1: examples/mnist_classifier.py (stax MLP, batch 128, a numpy batch each step, its ragged last
#    batch), examples/mnist_vae.py (a whole epoch in one jitted fori_loop), and
#    examples/differentially_private_sgd.py (per-example gradients by vmap over a conv net),
#    each bare with one epoch traced (bare_trace.py: the trace starts and stops at the epoch
#    prints) and under `tpuscope run` in the default mode.
# 2: the bf16 twins of the two f32 examples that got an f32 card (jax_examples.py writes them:
#    bf16 compute over f32 parameters), bare with one epoch traced: the cards' truth; the f32
#    examples bare again beside them.
# 3: the three examples under `tpuscope run` again, with this round's analysis (a loop's ops
#    counted once, the f32 saving bounded, ops far off the peak); the stores without traces.
# 4: examples/spmd_mnist_classifier_fromscratch.py (explicit sharding over a one-chip mesh, the
#    step under `jax.set_mesh` in the loop and once outside it, a print each step) bare and
#    under tpuscope.
PART=${1:-1}
LOG=$OUT/log$PART.txt
source tests/tpu/chip_lib.sh
UP=${UP:-upstream}
export PYTHONPATH=$PYTHONPATH:$PWD/$UP:$PWD/$UP/stubs
B=/tmp/bare; mkdir -p $B
pack() { tar czf $OUT/runs$PART.tgz -C /tmp --exclude='*/debug' store 2>/dev/null; }
traced() {  # name mark after program args...: bare, one span traced into $B/name
  local name=$1 mark=$2 after=$3; shift 3
  say "bare $name: $*"
  timed python3 $P/bare_trace.py --mark "$mark" --after $after --out $B/$name "$@"
  tar czf $OUT/bare_$name.tgz -C $B $name 2>/dev/null
}
if [ "$PART" = 1 ]; then
  export MNIST_EPOCHS=6 VAE_EPOCHS=8
  traced mnist Epoch 2 $UP/examples/mnist_classifier.py
  under mnist python3 $UP/examples/mnist_classifier.py; paths
  traced vae "sec)" 2 $UP/examples/mnist_vae.py
  under vae python3 $UP/examples/mnist_vae.py; paths
  traced dpsgd Epoch 1 $UP/examples/differentially_private_sgd.py --epochs 4
  under dpsgd python3 $UP/examples/differentially_private_sgd.py --epochs 4; paths
fi
if [ "$PART" = 2 ]; then
  export VAE_EPOCHS=8
  traced vae_bf16 "sec)" 2 $UP/examples/mnist_vae_bf16.py
  traced vae_f32 "sec)" 2 $UP/examples/mnist_vae.py
  traced dpsgd_bf16 Epoch 1 $UP/examples/differentially_private_sgd_bf16.py --epochs 3
  traced dpsgd_f32 Epoch 1 $UP/examples/differentially_private_sgd.py --epochs 3
fi
if [ "$PART" = 3 ]; then
  pack() { tar czf $OUT/runs$PART.tgz -C /tmp --exclude='*/debug' --exclude='*/trace' store 2>/dev/null; }
  export MNIST_EPOCHS=6 VAE_EPOCHS=8
  under vae python3 $UP/examples/mnist_vae.py; paths
  under dpsgd python3 $UP/examples/differentially_private_sgd.py --epochs 4; paths
  under mnist python3 $UP/examples/mnist_classifier.py; paths
fi
if [ "$PART" = 4 ]; then
  pack() { tar czf $OUT/runs$PART.tgz -C /tmp --exclude='*/debug' --exclude='*/trace' store 2>/dev/null; }
  export SPMD_EPOCHS=4
  bare python3 $UP/examples/spmd_mnist_classifier_fromscratch.py | grep -v "^Batch no"
  under spmd python3 $UP/examples/spmd_mnist_classifier_fromscratch.py | grep -v "^Batch no"; paths
fi
pack
