#!/usr/bin/env bash
# Session 42 (7 December): diffrax's neural ODE example on the chip (device tool, repo root,
# .tpu/ carried with diffrax, lineax, optimistix, equinox, jaxtyping and wadler_lindig's wheels
# in .tpu/dfxwhl; $DFX is what tests/tpu/programs/diffrax_examples.py makes of a snapshot):
#   timeout 580 bash tests/tpu/chip_diffrax.sh PART
# Truth is bare: the program's prints (one every 100 steps) timed by bare_trace.py, every gap
# kept (its two phases step at different speeds), and JAX's own compile log for make_step.
# 1: neural_ode.py and its twin neural_ode_strong.py bare; neural_ode.py under `tpuscope run`.
# 2: neural_ode.py and neural_ode_strong.py under `tpuscope run` (this round's code).
# 3: equinox's score-based diffusion example ($EQ: tests/tpu/programs/eqx_examples.py's folder,
#    its MNIST stand-in written here; einops's wheel in .tpu/dfxwhl too), 1,500 steps bare
#    (a print every 100 steps) and under `tpuscope run`.
# 4: its twin whose loader indexes a numpy copy of the data with a numpy permutation
#    (score_based_diffusion_numpy.py), bare and under `tpuscope run`.
PART=${1:-1}
LOG=$OUT/log$PART.txt
TPU_WITH_FLAX= source tests/tpu/chip_lib.sh
pack() { tar czf $OUT/runs$PART.tgz -C /tmp --exclude='*/debug' --exclude='*/trace' store 2>/dev/null; }
DFX=${DFX:-dfx}
PIP_CONFIG_FILE=/dev/null python3 -m pip install -q --isolated --only-binary=:all: \
  --index-url file:///opt/pypi/simple --target $SITE matplotlib typing_extensions \
  >/dev/null 2>&1 || echo "device index lacks matplotlib" | tee -a $LOG
PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --no-index --no-deps --no-compile \
  --no-cache-dir --upgrade --target $SITE .tpu/dfxwhl/*.whl || echo "diffrax wheels failed" | tee -a $LOG
rm -rf $SITE/jax $SITE/jaxlib $SITE/jax-* $SITE/jaxlib-* $SITE/numpy $SITE/numpy-* $SITE/numpy.libs
export MPLBACKEND=Agg
truth() {  # bare, every gap between its prints, and JAX's compile log of make_step
  say "bare: $1"
  JAX_LOG_COMPILES=1 /usr/bin/time -f "wall %e s" python3 $P/bare_trace.py --mark "Step:" \
    --after 1 --per 100 --gaps $DFX/$1 2>&1 | quiet \
    | grep -a "^Step\|bare_trace\|wall\|Finished .*make_step\|Error\|error" | tee -a $LOG
}
if [ "$PART" = 3 ] || [ "$PART" = 4 ]; then
  EQ=${EQ:-equinox}
  python3 -c "import sys; from pathlib import Path; sys.path.insert(0, '$P'); \
from eqx_examples import write_mnist; write_mnist(Path('$EQ'))"
  export SBD_STEPS=1500 SBD_PRINT=100
  here=$PWD
  cd $EQ
  SBD=score_based_diffusion.py; NAME=sbd
  [ "$PART" = 4 ] && SBD=score_based_diffusion_numpy.py && NAME=sbd_numpy
  say "bare: $SBD"
  /usr/bin/time -f "wall %e s" python3 $here/$P/bare_trace.py --mark "Step=" --after 2 --per 100 \
    --gaps $SBD 2>&1 | quiet | tee -a $LOG
  under $NAME python3 $SBD; paths
  cd $here
fi
if [ "$PART" = 1 ]; then
  truth neural_ode.py
  truth neural_ode_strong.py
  under node python3 $DFX/neural_ode.py; paths
fi
if [ "$PART" = 2 ]; then
  under node python3 $DFX/neural_ode.py; paths
  under node_strong python3 $DFX/neural_ode_strong.py; paths
fi
