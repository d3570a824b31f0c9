#!/usr/bin/env bash
# Session 44 (7 December): jax-ml/jax-ai-stack's miniGPT tutorial on the chip (device tool, repo
# root, .tpu/ carried; grain's and tiktoken's unpacked wheels in .tpu/xz/minigpt.tar.xz, which
# chip_lib.sh unpacks into the site; $MG is what tests/tpu/programs/minigpt.py makes of a
# snapshot):
#   timeout 580 bash tests/tpu/chip_minigpt.sh PART
# 1: the clocks, bare: minigpt_tick.py (a tick every 5 steps, waited for: the median gap is the
#    step's time with the device's work in it; 60 steps) with 5 steps traced, then the twins'
#    (2 heads of 128; bf16).
# 2: minigpt.py bare (its own prints and wall time: 250 steps of 144 stories, text generated
#    before training, at step 200 and at the end), then under `tpuscope run` (default mode),
#    then minigpt_hd128.py under `tpuscope run`.
# 3: minigpt.py under `tpuscope run`, then the bf16 twin's clock; 4: the f32 clock over 250 steps,
#    JAX's compile log beside it; 5: a pair (10 steps), bare then under tpuscope, each with
#    JAX's compile log: whether tpuscope slows XLA's compiles (about 300 s).
PART=${1:-1}
LOG=$OUT/log$PART.txt
source tests/tpu/chip_lib.sh
pack() { tar czf $OUT/runs$PART.tgz -C /tmp --exclude='*/debug' --exclude='*/trace' store 2>/dev/null; }
MG=${MG:-minigpt}
stories() {
  python3 -c "import sys; from pathlib import Path; sys.path.insert(0, '$P'); \
from minigpt import write_stories; write_stories(Path('$MG'), $1)"
}
here=$PWD
clock() {  # bare, a tick every 5 steps waited for; with a second argument, 5 steps traced
  say "bare clock: $1"
  /usr/bin/time -f "wall %e s" python3 $here/$P/bare_trace.py --mark "tick" --after 4 --per 5 \
    ${2:+--out /tmp/trace_$2} $1 2>&1 | quiet | grep -a -o "tick [0-9]*\|bare_trace.*\|wall.*\|[A-Za-z]*Error.*" | tee -a $LOG
  [ -n "${2:-}" ] && tar czf $OUT/trace_$2.tgz -C /tmp trace_$2  # $OUT keeps no deep folders
}
export MINIGPT_TICK=5
if [ "$PART" = 1 ]; then
  stories $((${MINIGPT_BATCH:-144} * 60))
  cd $MG
  clock minigpt_tick.py bare
  clock minigpt_hd128_tick.py
  clock minigpt_bf16_tick.py
fi
if [ "$PART" = 2 ]; then
  stories $((${MINIGPT_BATCH:-144} * 250))
  cd $MG
  say "bare: minigpt.py"
  /usr/bin/time -f "wall %e s" python3 minigpt.py 2>&1 | quiet | grep -a "Step\|wall\|Error\|error" \
    | tee -a $LOG
  under minigpt python3 minigpt.py; paths  # in $MG: the program opens its stories there
  under minigpt_hd128 python3 minigpt_hd128.py; paths
fi
if [ "$PART" = 3 ]; then  # session 45: part 1's two clocks took 330 s; the run that matters first
  stories $((${MINIGPT_BATCH:-144} * 250))
  cd $MG
  under minigpt python3 minigpt.py; paths
  clock minigpt_bf16_tick.py
fi
if [ "$PART" = 4 ]; then  # the f32 clock over part 3's 250 steps, with JAX's own compile log
  stories $((${MINIGPT_BATCH:-144} * 250))
  cd $MG
  say "bare clock, JAX_LOG_COMPILES=1: minigpt_tick.py"
  JAX_LOG_COMPILES=1 /usr/bin/time -f "wall %e s" python3 $here/$P/bare_trace.py --mark "tick" \
    --after 4 --per 5 minigpt_tick.py 2>&1 | grep -a "Finished XLA compilation\|bare_trace\|wall\|Error" \
    | tee -a $LOG
fi
if [ "$PART" = 5 ]; then  # does tpuscope slow XLA's compiles? a pair, bare then under tpuscope,
  # each with JAX's own compile log (part 3 under tpuscope compiled 1.14-1.27x part 4's bare)
  stories $((${MINIGPT_BATCH:-144} * 10))
  cd $MG
  for mode in bare tpuscope; do
    say "$mode, JAX_LOG_COMPILES=1: minigpt_tick.py"
    if [ $mode = bare ]; then run=(python3 minigpt_tick.py)
    else run=(tpuscope run --store $S --name pair python3 minigpt_tick.py); fi
    JAX_LOG_COMPILES=1 /usr/bin/time -f "wall %e s" "${run[@]}" 2>&1 \
      | grep -a -o "Finished XLA compilation of jit(\(generate_step\|train_step\)) in [0-9.]*\|wall.*" \
      | tee -a $LOG
  done
fi
cd $here
