#!/usr/bin/env bash
# Session 41 (7 December): purejaxrl's PPO on the chip (device tool, repo root, .tpu/ carried,
# $RL what tests/tpu/programs/purejaxrl.py makes of a snapshot, the wheels it needs that the
# machine's index lacks in .tpu/rlwhl, duckdb's and tfp-nightly's unpacked wheels xz-packed in
# .tpu/xz so that all travels in 64 MiB):
#   timeout 580 bash tests/tpu/chip_rl.sh PART
# Truth is timed_main.py's: the jitted training call compiled ahead, its run timed apart.
# 1: ppo_nodebug.py, ppo_numpy.py, ppo.py bare; then ppo.py under `tpuscope run`.
# 2: ppo.py under `tpuscope run` (this round's code), ppo.py and ppo_numpy.py bare again.
# 3: ppo.py and ppo_nodebug.py under `tpuscope run` (the round's last code: the report says
#    that the automatic trace's steps never came).
PART=${1:-1}
LOG=$OUT/log$PART.txt
source tests/tpu/chip_lib.sh
pack() { tar czf $OUT/runs$PART.tgz -C /tmp --exclude='*/debug' --exclude='*/trace' store 2>/dev/null; }
RL=${RL:-rl}
PIP_CONFIG_FILE=/dev/null python3 -m pip install -q --isolated --only-binary=:all: \
  --index-url file:///opt/pypi/simple --target $SITE matplotlib attrs absl-py typing_extensions \
  >/dev/null 2>&1 || echo "device index lacks one of matplotlib attrs absl-py" | tee -a $LOG
PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --no-index --no-deps --no-compile \
  --no-cache-dir --upgrade --target $SITE .tpu/rlwhl/*.whl || echo "rl wheels failed" | tee -a $LOG
rm -rf $SITE/jax $SITE/jaxlib $SITE/jax-* $SITE/jaxlib-* $SITE/numpy $SITE/numpy-* $SITE/numpy.libs
export PYTHONPATH=$PWD/$RL/stubs:$PWD/$RL:$PYTHONPATH
truth() {  # the program's own prints (an episode's return each) counted, not kept
  say "bare: $1"
  /usr/bin/time -f "wall %e s" python3 $RL/timed_main.py $RL/$1 2>&1 | quiet \
    | awk '/^global step/ {n++; next} {print} END {print n+0, "episode prints"}' | tee -a $LOG
}
if [ "$PART" = 1 ]; then
  for f in ppo_nodebug.py ppo_numpy.py ppo.py; do truth $f; done
  under ppo python3 $RL/ppo.py >/dev/null; paths
fi
if [ "$PART" = 2 ]; then
  under ppo python3 $RL/ppo.py >/dev/null; paths
  for f in ppo.py ppo_numpy.py; do truth $f; done
fi
if [ "$PART" = 3 ]; then
  under ppo python3 $RL/ppo.py >/dev/null; paths
  under ppo_nodebug python3 $RL/ppo_nodebug.py >/dev/null; paths
fi
