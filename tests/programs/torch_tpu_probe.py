"""Drive tpuscope's TorchTPU adapter against the real torch_tpu package, on a host without a TPU.

Run by tests/test_tpu_adapter.py with an interpreter that has torch>=2.11 and torch_tpu
installed (TPUSCOPE_TORCH_TPU_PYTHON). Prints one line: RESULT <json>.
Only the device-initialised flag is faked, so the step path runs through the real
getters (which return zeros without a chip). The device count and any autograd
backward are avoided: on such a host they start the TPU runtime, which waits minutes
for the GCE metadata server.
"""

import json
import os
import sys
import tempfile

import torch  # torch_tpu autoloads through torch's device-backend entry point

sys.path.append(os.environ["TPUSCOPE_SRC"])
sys.path.extend(os.environ.get("TPUSCOPE_EXTRA_PATH", "").split(os.pathsep))  # pyarrow, pandas, ...

from tpuscope.collect.session import Session  # noqa: E402
from tpuscope.collect.torch_tpu.collector import TorchTpuApi, TpuCollector, mode_label  # noqa: E402
from tpuscope.store import Run  # noqa: E402

api = TorchTpuApi.from_package()
out = {"version": api.version, "initialized": api.device_initialized(), "mode": api.eager_mode(),
       "cpu_fallback": api.cpu_fallback_enabled(), "stats": vars(api.cache_stats()),
       "device_kind": api.device_meta().get("device_kind")}
with torch.tpu.set_eager_mode(torch.tpu.EagerMode.DEFER_AND_FUSE):
    out["mode_in_context"] = mode_label(api.eager_mode())
import torch_tpu._internal.execution_mode as execution_mode  # noqa: E402

execution_mode.eager_mode = torch.tpu.EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING
out["mode_after_set"] = mode_label(api.eager_mode())
execution_mode.eager_mode = torch.tpu.EagerMode.DEFER_NEVER
out["profiler_config"] = torch.tpu.profiler.TpuProfilerConfig(run_dir="/tmp/x", worker_rank="0").custom_profiler_config

run_dir = tempfile.mkdtemp()
session = Session(run_dir).start(install_handlers=False)
collector = TpuCollector(session, api).install()
optimizer = torch.optim.SGD(torch.nn.Linear(4, 2).parameters(), lr=0.1)
optimizer.step()
out["steps_before_init"] = collector.step
api.loader._DEVICE_INITIALIZED = True
api.device_meta = lambda: {"device_kind": "TPU (flag faked)"}
optimizer.step()
optimizer.step()
collector.uninstall()
session.close()
run = Run(run_dir)
out["steps"] = run.steps[["step", "boundary", "compiles", "executions"]].to_dict("records")
out["metrics"] = sorted(set(run.metrics["name"]))
out["meta"] = {k: v for k, v in session.proc_meta.items() if k.startswith(("torch_tpu", "eager", "backend"))}
print("RESULT " + json.dumps(out, default=str))
