#!/usr/bin/env bash
# Session 33 (6 December): two of google/flax's examples on the chip as a new user runs them
# (device tool, repo root, .tpu/ carried; $UP is what tests/tpu/programs/flax_examples.py makes
# of a snapshot: the examples, timed copies and twins, stand-ins for clu, datasets, pyplot):
#   timeout 580 bash tests/tpu/chip_flax.sh PART
# 1: examples/seq2seq/train.py (linen LSTM addition, batches made in Python each step): its
#    timed copy bare, the twin fed batches made before the loop, then upstream's file under
#    `tpuscope run` in the default mode; nnx_toy_examples/05_vae.py (an NNX VAE reading its
#    loss back each step): timed copy bare, the twin that reads the losses once an epoch, then
#    upstream's file under `tpuscope run`.
# 2: the NNX VAE again with this round's code (a read's cost is at most the longer of the
#    host's wait in it and the device's busy time; tpuscope's own wait at the trace's end is
#    not a read of the program's): bare, its twin, a copy timing the read itself, then
#    upstream's file under `tpuscope run`.
# 3 (session 34): examples/lm1b (flax's Transformer LM: 6 layers, width 512, 8 heads of 64,
#    packed sequences of 128, bf16, jit over a mesh, clu's hooks and profile; prepared by
#    flax_lm1b.py with UP=upstream_lm1b): its timed copy bare at head_dim 64 and at 128 (4
#    heads of 128, the width held), then upstream's main.py under `tpuscope run` at both.
# 4 (session 34): examples/imagenet (ResNet-50 under `jax.pmap`, upstream's default config:
#    f32, batch 128; prepared by flax_imagenet.py into the same UP as part 3's): under
#    `tpuscope run`, then bare with `--config.half_precision=True` (its bf16 twin) and bare as
#    configured; upstream logs its steps per second every 100 steps.
# 5 (session 35): imagenet's truth, 200 steps bare (upstream's steps per second over steps
#    100-199): bf16 twin, then f32 as configured.
# 6 (session 35): imagenet under `tpuscope run`, f32 then its bf16 twin, 200 steps; the
#    stores come back without their traces (a ResNet-50 window's is over what a call brings
#    back), with a census of each trace's events by plane, line and Python file.
# 7 (session 35): imagenet with the fix of tpuscope's recompile card applied (main_placed.py:
#    its state placed once with the sharding its pmapped step returns), under tpuscope.
# 8 (session 35): what JAX's profiler records at host tracer levels 1-3 and what its stop costs
#    (programs/tracer_levels.py; TPU_WITH_FLAX= needs no flax): data for bounding the window.
PART=${1:-1}
LOG=$OUT/log$PART.txt
source tests/tpu/chip_lib.sh
UP=${UP:-upstream_flax}
export PYTHONPATH=$PYTHONPATH:$PWD/$UP/stubs
pack() { tar czf $OUT/runs$PART.tgz -C /tmp --exclude='*/debug' store 2>/dev/null; }
if [ "$PART" = 1 ]; then
  SEQ="--num_train_steps=1201 --decode_frequency=200"
  bare python3 $UP/seq2seq/train_timed.py $SEQ
  bare python3 $UP/seq2seq/train_fixed.py $SEQ
  under seq2seq python3 $UP/seq2seq/train.py $SEQ; paths
  export VAE_EPOCHS=5
  bare python3 $UP/nnx_vae/05_vae_timed.py
  bare python3 $UP/nnx_vae/05_vae_nosync.py
  under nnx_vae python3 $UP/nnx_vae/05_vae.py; paths
fi
if [ "$PART" = 2 ]; then
  export VAE_EPOCHS=5
  bare python3 $UP/nnx_vae/05_vae_timed.py
  bare python3 $UP/nnx_vae/05_vae_nosync.py
  bare python3 $UP/nnx_vae/05_vae_reads.py
  under nnx_vae python3 $UP/nnx_vae/05_vae.py; paths
fi
# Each run takes about 160 s (its step's compile about 50 s): on the chip it ran as `3b` (the
# bare half) and `3u` (the tpuscope half) on one warm machine.
LM="--config=configs/default.py --config.num_train_steps=800 --config.num_eval_steps=8"
LM="$LM --config.eval_every_steps=1000 --config.save_checkpoints=False"
LM="$LM --config.restore_checkpoints=False"
if [ "$PART" = 3 ] || [ "$PART" = 3b ]; then
  (cd $UP/lm1b && bare python3 main_timed.py --workdir=/tmp/lm1b_a $LM)
  (cd $UP/lm1b && bare python3 main_timed.py --workdir=/tmp/lm1b_b $LM --config.num_heads=4)
fi
if [ "$PART" = 3 ] || [ "$PART" = 3u ]; then
  (cd $UP/lm1b && under lm1b python3 main.py --workdir=/tmp/lm1b_c $LM); paths
  (cd $UP/lm1b && under lm1b_hd128 python3 main.py --workdir=/tmp/lm1b_d $LM --config.num_heads=4)
  paths
fi
if [ "$PART" = 4 ]; then
  IN="--config=configs/default.py --config.num_train_steps=300"
  (cd $UP/imagenet && under imagenet python3 main.py --workdir=/tmp/imagenet_a $IN); paths
  (cd $UP/imagenet && bare python3 main.py --workdir=/tmp/imagenet_b $IN --config.half_precision=True)
  (cd $UP/imagenet && bare python3 main.py --workdir=/tmp/imagenet_c $IN)
fi
IN5="--config=configs/default.py --config.num_train_steps=200"
if [ "$PART" = 5 ]; then
  (cd $UP/imagenet && bare python3 main.py --workdir=/tmp/imagenet_b $IN5 --config.half_precision=True)
  (cd $UP/imagenet && bare python3 main.py --workdir=/tmp/imagenet_c $IN5)
fi
# events of the latest run's trace by plane and line, and the Python tracer's by file
census() {
  python3 - "$S" "$1" <<'PY' 2>&1 | tee -a $LOG
import collections, glob, json, sys
from jax.profiler import ProfileData
import tpuscope
run = tpuscope.load_run("latest", store=sys.argv[1])
out = {}
for path in glob.glob(f"{run.path}/trace/**/*.xplane.pb", recursive=True):
    data = ProfileData.from_file(path)
    lines, files = collections.Counter(), collections.Counter()
    for plane in data.planes:
        for line in plane.lines:
            n = 0
            for event in line.events:
                n += 1
                if event.name.startswith("$"):
                    files[event.name[1:].split(":")[0]] += 1
            lines[f"{plane.name} | {line.name}"] = n
    out[path.rsplit("/", 1)[-1]] = {"lines": dict(lines.most_common(20)),
                                    "python_files": dict(files.most_common(30))}
json.dump(out, open(f"{sys.argv[1]}/{sys.argv[2]}.census.json", "w"), indent=1)
print(json.dumps({k: v["lines"] for k, v in out.items()})[:3000])
PY
}
pack6() { tar czf $OUT/runs6.tgz -C /tmp --exclude='*/debug' --exclude='*/trace' store 2>/dev/null; }
if [ "$PART" = 6 ]; then
  pack() { :; }
  (cd $UP/imagenet && under imagenet python3 main.py --workdir=/tmp/imagenet_a $IN5); census imagenet; paths; pack6
  (cd $UP/imagenet && under imagenet_bf16 python3 main.py --workdir=/tmp/imagenet_d $IN5 --config.half_precision=True)
  census imagenet_bf16; paths; pack6
fi
if [ "$PART" = 7 ]; then
  pack() { :; }
  (cd $UP/imagenet && under imagenet_placed python3 main_placed.py --workdir=/tmp/imagenet_e $IN5)
  paths; tar czf $OUT/runs7.tgz -C /tmp --exclude='*/debug' --exclude='*/trace' store
fi
if [ "$PART" = 8 ]; then
  python3 $P/tracer_levels.py $OUT/tracer_levels.json 2>&1 | quiet | tee -a $LOG
fi
