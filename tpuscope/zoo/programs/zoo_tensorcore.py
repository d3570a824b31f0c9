"""Zoo scenario `tensorcore`: one training step of the model at its real default widths, compiled
by XLA but never run, for the `--deep` TensorCore lint on a chosen `--target`.

Usage: zoo_tensorcore.py MODEL_TYPE CLASS TASK LENGTH - the default config keeps its widths
(hidden size, heads, head_dim, FFN, vocabulary) and loses only depth and expert count (one layer
of each kind, at most 4 experts: neither changes a matmul's shape). The model is built on the
meta device and every parameter and buffer becomes a torch_xla placeholder tensor (a shape with
no device buffer), so a 100-billion-parameter default costs no memory: forward, loss and
backward are traced lazily and compiled with `_xla_warm_up_cache` (compile, no execution), in
bfloat16 (as TPU training runs), batch 1 x LENGTH tokens. tpuscope --deep reads the compiled HLO.
The truth (widths.expected) comes from the config's widths and, for f32, from the element types
of the traced graph's dot instructions read with a plain regex (not tpuscope's parser): the
model may upcast inside (torch's SDPA math path on XLA casts bf16 queries to f32).
"""

from __future__ import annotations

import sys

import torch
import torch_xla
from torch_xla.core import xla_builder

from tpuscope.zoo import inputs, truth, widths


def _placeholders(model: torch.nn.Module, dtype: torch.dtype) -> None:
    """Every parameter and buffer replaced by a placeholder of its shape (floats in `dtype`)."""
    for module in model.modules():
        for name, param in list(module.named_parameters(recurse=False)):
            kind = dtype if param.is_floating_point() else param.dtype
            module._parameters[name] = torch.nn.Parameter(
                xla_builder.create_placeholder_tensor(tuple(param.shape), kind), requires_grad=param.requires_grad)
        for name, buf in list(module.named_buffers(recurse=False)):
            if buf is not None:
                kind = dtype if buf.is_floating_point() else buf.dtype
                module._buffers[name] = xla_builder.create_placeholder_tensor(tuple(buf.shape), kind)


def main(model_type: str, class_name: str, task: str, length: int) -> int:
    device = torch_xla.device()
    phase = "build"
    try:
        config = widths.full_width_config(model_type, class_name)
        with torch.device("meta"):
            model = widths.model_class(class_name)(config)
        _placeholders(model, torch.bfloat16)
        model.train()
        length = widths.positions(config, length)
        batch = {k: v[:1].to(device) for k, v in inputs.batch(task, config, length).items()}
        phase = "trace"
        truth.mark("step:0")
        loss = model(**batch).loss  # zoo: forward
        loss.backward()  # zoo: backward
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        phase = "compile"
        f32 = widths.f32_dots(torch_xla._XLAC._get_xla_tensors_hlo([loss, *grads]))
        torch_xla._XLAC._xla_warm_up_cache([loss, *grads], [])  # zoo: compile
    except Exception as exc:
        truth.failed(exc, phase, "error")
        raise
    truth.finish(iterations=1, params=sum(p.numel() for p in model.parameters()), length=length,
                 expected_tensorcore=widths.expected(config, f32), widths=widths.summary(config), f32_dots=f32)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
