"""Zoo scenario `generate`: two identical greedy `generate()` requests, each followed by a sync.

Usage: zoo_generate.py MODEL_TYPE CLASS TASK REQUESTS NEW_TOKENS - with a static cache where the
model supports one (`_can_compile_fullgraph`), else transformers' default (dynamic) cache. The
second request repeats the first exactly: a correct XLA program compiles nothing for it. A
logits processor that returns the scores untouched marks the counters at every token (no device
op added), so the truth also says whether the decode compiles again per token.
"""

from __future__ import annotations

import os
import sys

import torch
import torch_xla

from tpuscope.zoo import configs, inputs, truth


def main(model_type: str, class_name: str, task: str, requests: int, new_tokens: int) -> int:
    device = torch_xla.device()
    phase, experts = "build", None
    try:
        config, model, params = configs.build(model_type, class_name, decoder=task == "causal-lm")
        experts = os.environ.get("ZOO_EXPERTS")  # the sweep's workaround cell (docs/zoo.md)
        if experts:
            model.set_experts_implementation(experts)  # zoo: experts
        model = model.to(device).eval()
        static = bool(getattr(model, "_can_compile_fullgraph", False))
        kwargs = inputs.generate_kwargs(task, config, static)
        prompt = {k: v.to(device) for k, v in inputs.prompt(task, config).items()}
        for request in range(requests):
            phase = f"request {request}"
            truth.mark(f"request:{request}")
            marks = inputs.token_marks(f"token:{request}")
            with torch.no_grad():
                model.generate(**prompt, max_new_tokens=new_tokens, logits_processor=marks, **kwargs)  # zoo: generate
            torch_xla.sync()  # zoo: sync
    except Exception as exc:
        status = "refused" if isinstance(exc, configs.NotTiny) else "error"
        cpu = None if status == "refused" else inputs.fails_on_cpu(model_type, class_name, task, "generate", experts)
        if cpu:
            status = "broken-default" if inputs.fails_at_full_size(model_type, class_name, task, cpu) \
                else "fails-on-cpu-too"
        truth.failed(exc, phase, status, cpu_error=cpu)
        raise
    truth.finish(iterations=requests, params=params, static_cache=static)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])))
