#!/usr/bin/env bash
# The chip check of this round (device tool, repo root, .tpu/ carried after prepare.sh):
#   timeout 350 bash tests/tpu/chip_final.sh
# Default-mode runs of the chip corpus, bare-vs-tpuscope pairs of the dispatch-bound step, and
# the persistent compilation cache benchmark. Runs and logs are re-packed into $OUT after each.
LOG=$OUT/log.txt
source tests/tpu/chip_lib.sh
pack() { tar czf $OUT/runs.tgz -C /tmp store; }
bare() { say "bare: $*"; "$@" 2>&1 | quiet | tee -a $LOG; }
under lm_hd64 python3 $P/lm_decoder.py --heads 16
under mlp_f32_highest python3 $P/mlp_train.py --dtype f32 --precision highest
under mlp_bf16 python3 $P/mlp_train.py
bare python3 $P/tiny_step.py --steps 6000
under tiny_1 --quiet python3 $P/tiny_step.py --steps 6000
say "compile cache"
timeout 110 python3 benchmarks/compile_cache.py --json > $S/compile_cache.json 2>>$LOG; tail -c 3000 $S/compile_cache.json | tee -a $LOG; pack
bare python3 $P/tiny_step.py --steps 6000
under tiny_2 --quiet python3 $P/tiny_step.py --steps 6000
under mlp_1000 python3 $P/mlp_train.py --widths 1000,3000,3000,1000
under lm_hd128 python3 $P/lm_decoder.py --heads 8
pack
