"""Zoo scenario `train` (and `train-varlen`): a few AdamW steps of one tiny model, lazy mode.

Usage: zoo_train.py MODEL_TYPE CLASS TASK STEPS [LENGTHS [eager]] - LENGTHS is a comma list of
sequence lengths, one per step in turn (a single length = static shapes); `eager` turns on
torch_xla's eager mode first (op by op, as pytorch/xla's eager examples do). The loop is the plain torch_xla
idiom: forward with labels, backward, optimizer step, `torch_xla.sync()`; nothing is read back.
"""

from __future__ import annotations

import os
import sys

import torch
import torch_xla
import torch_xla.experimental

from tpuscope.zoo import configs, inputs, truth


def main(model_type: str, class_name: str, task: str, steps: int, lengths: list[int], eager: bool) -> int:
    if eager:
        torch_xla.experimental.eager_mode(True)  # zoo: eager-on
    device = torch_xla.device()
    phase, experts = "build", None
    try:
        config, model, params = configs.build(model_type, class_name, decoder=task == "causal-lm")
        experts = os.environ.get("ZOO_EXPERTS")  # the sweep's workaround cell (docs/zoo.md)
        if experts:
            model.set_experts_implementation(experts)  # zoo: experts
        model = model.to(device).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        batches = [{k: v.to(device) for k, v in inputs.batch(task, config, length).items()} for length in lengths]
        for step in range(steps):
            phase = f"step {step}"
            truth.mark(f"step:{step}")
            out = model(**batches[step % len(batches)])  # zoo: forward
            out.loss.backward()  # zoo: backward
            optimizer.step()
            optimizer.zero_grad()
            torch_xla.sync()  # zoo: sync
    except Exception as exc:
        status = "refused" if isinstance(exc, configs.NotTiny) else "error"
        cpu = None if status == "refused" else inputs.fails_on_cpu(model_type, class_name, task, "train", experts)
        if cpu:
            status = "broken-default" if inputs.fails_at_full_size(model_type, class_name, task, cpu) \
                else "fails-on-cpu-too"
        truth.failed(exc, phase, status, cpu_error=cpu)
        raise
    truth.finish(iterations=steps, params=params, lengths=lengths)
    return 0


if __name__ == "__main__":
    lengths = [int(n) for n in (sys.argv[5] if len(sys.argv) > 5 else "16").split(",")]
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), lengths, sys.argv[6:7] == ["eager"]))
