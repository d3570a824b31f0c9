#!/usr/bin/env bash
# On the TPU machine (device tool), from the repo root, with .tpu/ carried:
#   bash tests/tpu/chip_truth.sh
# The bare truths (no tpuscope): each program's own step time, the cost table, and the traces
# that become fixtures. Everything lands in $OUT (one tarball + the logs).
set -u
export TPU_WITH_FLAX=1
source .tpu/install.sh
W=/tmp/work; mkdir -p $W
P=tests/tpu/programs
python3 -c "import jax; print(jax.devices())"
{
echo "== cost table"; python3 benchmarks/tpu_cost_table.py $W/costtable --reps 20
echo "== mlp bf16";           python3 $P/mlp_train.py
echo "== mlp f32 highest";    python3 $P/mlp_train.py --dtype f32 --precision highest
echo "== mlp f32 default";    python3 $P/mlp_train.py --dtype f32
echo "== mlp bf16 1000/3000"; python3 $P/mlp_train.py --widths 1000,3000,3000,1000
echo "== mlp bf16 1024/3072"; python3 $P/mlp_train.py --widths 1024,3072,3072,1024
echo "== lm hd64";            python3 $P/lm_decoder.py --heads 16
echo "== lm hd128";           python3 $P/lm_decoder.py --heads 8
echo "== tiny";               python3 $P/tiny_step.py
echo "== tiny block";         python3 $P/tiny_step.py --block --steps 2000
echo "== trace mlp steady";   python3 $P/mlp_train.py --annotate --trace $W/trace_mlp_steady --trace-from 10 --trace-count 5 --steps 20
echo "== trace mlp f32 steady"; python3 $P/mlp_train.py --dtype f32 --precision highest --annotate --trace $W/trace_mlp_f32 --trace-from 10 --trace-count 4 --steps 16
echo "== trace mlp compiles"; python3 $P/mlp_train.py --widths 1024,2048,1024 --batch 512 --annotate --trace $W/trace_mlp_compiles --trace-from 0 --trace-count 8 --steps 14
} 2>&1 | tee $OUT/truth.log
tar czf $OUT/truth.tgz -C $W .
ls -la $OUT
