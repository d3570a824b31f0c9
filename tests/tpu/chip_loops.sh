#!/usr/bin/env bash
# Loops the chip corpus lacked (device tool, repo root, .tpu/ carried after prepare.sh):
#   timeout 570 bash tests/tpu/chip_loops.sh PART
# 1: bare truths: mlp_train.py reading its loss every step (`--log-every 1`) and not; the Flax
#    decoder with its layers in one `nn.scan` (MaxText's scan_layers) at head_dim 64 and 128,
#    and with `nn.remat`; text_classify.py (dynamic padding: a compile per batch length)
#    against padding to the maximum and to buckets.
# 2: the same under `tpuscope run` (default mode), and the print callback again (the lane's
#    pace, lane.py PACE_DEPTH).
PART=${1:-1}
LOG=$OUT/log.txt
source tests/tpu/chip_lib.sh
M=$P/mlp_train.py
L="$P/lm_decoder.py --scan"
T=$P/text_classify.py
if [ "$PART" = 1 ]; then
  bare python3 $M
  bare python3 $M --log-every 1
  bare python3 $L --heads 16
  bare python3 $L --heads 8
  bare python3 $L --heads 8 --remat
  bare python3 $T --pad dynamic
  bare python3 $T --pad max
  bare python3 $T --pad bucket
fi
if [ "$PART" = 2 ]; then
  under mlp_log1 python3 $M --log-every 1
  under cb_print2 python3 $M --callback print
  under scan_hd64 python3 $L --heads 16
  under scan_remat128 python3 $L --heads 8 --remat
  under tc_dynamic python3 $T --pad dynamic
fi
pack
