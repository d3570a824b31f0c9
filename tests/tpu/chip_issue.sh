#!/usr/bin/env bash
# The issue's own kinds of program again, in the default mode, on a round's code (device tool,
# repo root, .tpu/ carried, flax installed):   timeout 580 bash tests/tpu/chip_issue.sh
# The decoder at head_dim 64, the f32 MLP at precision highest, the clean bf16 MLP, widths
# 1000/3000, and the dispatch-bound step bare and under `tpuscope run --quiet`; their runs
# (without raw traces) and the log land in $OUT after each.
LOG=$OUT/log.txt
source tests/tpu/chip_lib.sh
pack() { tar czf $OUT/runs.tgz -C /tmp --exclude='*/debug' --exclude='*/trace' store 2>/dev/null; }
under lm_hd64 python3 $P/lm_decoder.py --heads 16; paths
under mlp_f32_highest python3 $P/mlp_train.py --dtype f32 --precision highest; paths
under mlp_bf16 python3 $P/mlp_train.py; paths
under mlp_1000 python3 $P/mlp_train.py --widths 1000,3000,3000,1000; paths
bare python3 $P/tiny_step.py --steps 6000
under tiny --quiet python3 $P/tiny_step.py --steps 6000; paths
