"""SPMD data parallelism over 4 CPU devices: one process, the batch sharded along a 'data' mesh axis.

Idiom: pytorch/xla's examples/data_parallel/train_resnet_spmd_data_parallel.py on
examples/train_resnet_base.py: `xr.use_spmd()` at import, `xs.Mesh(np.arange(n), (n,), ('data',))`,
the batch size scaled by the device count, `pl.MpDeviceLoader(xu.SampleGenerator(...), device,
input_sharding=xs.ShardingSpec(mesh, ('data', None, None, None)))`, the step compiled with
`torch_xla.compile(step_fn, full_graph=True)`, SGD with momentum, `xm.add_step_closure` logging
every few steps. A small CNN instead of ResNet, 12 iterations. The torch_xla CPU client gives
several devices with CPU_NUM_DEVICES (set here before torch_xla starts, as pytorch/xla's CPU
tests do). In the corpus because a sharded step is still one step an iteration.
"""

from __future__ import annotations

import os

os.environ.setdefault("CPU_NUM_DEVICES", "4")

import hook  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch_xla  # noqa: E402
import torch_xla.core.xla_model as xm  # noqa: E402
import torch_xla.distributed.parallel_loader as pl  # noqa: E402
import torch_xla.distributed.spmd as xs  # noqa: E402
import torch_xla.runtime as xr  # noqa: E402
import torch_xla.utils.utils as xu  # noqa: E402

xr.use_spmd()
BATCH_PER_DEVICE, ITERATIONS, LOG_STEPS = 4, 12, 4


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.head = nn.Linear(16 * 16 * 16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(torch.relu(self.conv(x)), 1))


def main() -> None:
    hook.start("xla")
    torch.manual_seed(0)
    device = torch_xla.device()
    num_devices = xr.global_runtime_device_count()
    mesh = xs.Mesh(np.arange(num_devices), (num_devices,), ("data",))
    batch = BATCH_PER_DEVICE * num_devices
    loader = pl.MpDeviceLoader(
        xu.SampleGenerator(data=(torch.zeros(batch, 3, 16, 16), torch.zeros(batch, dtype=torch.int64)),
                           sample_count=ITERATIONS),
        device, input_sharding=xs.ShardingSpec(mesh, ("data", None, None, None)))
    model = SmallCNN().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    def step_fn(data: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        optimizer.zero_grad()
        loss = loss_fn(model(data), target)
        loss.backward()
        optimizer.step()
        return loss

    compiled_step_fn = torch_xla.compile(step_fn, full_graph=True, name="spmd_step")
    for step, (data, target) in enumerate(loader):  # corpus: train-loop
        hook.mark(f"train:i{step}")
        loss = compiled_step_fn(data, target)  # corpus: step-call
        if step % LOG_STEPS == 0:
            xm.add_step_closure(lambda s, value: print(f"step {s} loss {value.item():.4f}"), args=(step, loss))
    hook.finish(iterations=ITERATIONS, devices=num_devices)


if __name__ == "__main__":
    main()
