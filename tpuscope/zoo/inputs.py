"""The inputs a scenario feeds a tiny model: random ids inside its vocabulary, labels per task.

Built on the CPU with a fixed seed (the program moves them to the device), so every run of a
cell sees the same batch and the shapes are exactly the ones the scenario names.
"""

from __future__ import annotations

import math
from typing import Any

BATCH = 2


def _vocab(config: Any) -> int:
    try:
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
    except ValueError:  # several text configs (an encoder's and a decoder's): the config's own
        text = config
    return int(getattr(text, "vocab_size", None) or getattr(config, "vocab_size", None) or 256)


def _ids(config: Any, batch: int, length: int) -> Any:
    import torch

    generator = torch.Generator().manual_seed(length)
    return torch.randint(4, max(5, _vocab(config) - 8), (batch, length), generator=generator)


def _codebooks(config: Any) -> int:
    """Parallel token streams per sequence (an audio decoder's codebooks: musicgen's input_ids are
    (batch x codebooks, length), its labels (batch, length, codebooks)); 1 for text."""
    value = getattr(config, "num_codebooks", None)
    return value if isinstance(value, int) and value > 1 else 1


def batch(task: str, config: Any, length: int) -> dict[str, Any]:
    """One training batch of `length` tokens (no padding: every position is real)."""
    import torch

    books = _codebooks(config)
    ids = _ids(config, BATCH * books, length)
    if task in ("causal-lm", "masked-lm") and books > 1:
        return {
            "input_ids": ids,
            "labels": ids.view(BATCH, books, length).transpose(1, 2).contiguous(),
        }
    if task in ("causal-lm", "masked-lm"):
        return {"input_ids": ids, "labels": ids.clone()}
    if task == "seq2seq":
        # targets as long as the sources: a class registered as seq2seq that decodes its own
        # input_ids (fsmt without decoder ids, the audio-text decoders) needs them equal, and
        # an encoder-decoder trains on them as well (its decoder ids are the shifted labels)
        return {"input_ids": ids, "labels": _ids(config, BATCH, length)}
    if task == "seq-cls":
        if getattr(config, "pad_token_id", None) is None:
            config.pad_token_id = 0
        return {"input_ids": ids, "labels": torch.tensor([0, 1][:BATCH])}
    if task == "image-cls":
        return {**image(config), "labels": torch.tensor([0, 1][:BATCH])}
    if task == "audio-cls":
        return {**audio(config), "labels": torch.tensor([0, 1][:BATCH])}
    raise NotImplementedError(f"no training batch for task {task}")


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, list | tuple) else value


def image(config: Any) -> dict[str, Any]:
    """A batch of random images at the config's own size and channels (224 x 224 x 3 where it
    names neither, as a backbone's checkpoints are trained). A config with neither but with a
    vocabulary takes images as token ids (ImageGPT: colour-cluster ids of the pixels, 64 of
    them, an 8 x 8 image). A config that counts patches but names no image size reads its
    pixels already cut into patches, as its processor gives them (SigLIP 2's NaFlex: each
    image's patches flattened, their mask and the grid's height and width)."""
    import torch

    vision = getattr(config, "vision_config", None) or config
    size = _first(getattr(vision, "image_size", None))
    channels = getattr(vision, "num_channels", None) or getattr(vision, "stem_num_channels", None)
    if size is None and channels is None and getattr(config, "vocab_size", None):
        return {"input_ids": _ids(config, BATCH, 64)}
    generator = torch.Generator().manual_seed(0)
    patches = getattr(vision, "num_patches", None)
    if size is None and patches:  # patches, not an image (NaFlex): a square grid, all valid
        side, flat = math.isqrt(patches), (channels or 3) * vision.patch_size**2
        return {
            "pixel_values": torch.randn((BATCH, patches, flat), generator=generator),
            "pixel_attention_mask": torch.ones((BATCH, patches), dtype=torch.long),
            "spatial_shapes": torch.tensor([[side, patches // side]] * BATCH),
        }
    shape = (BATCH, channels or 3, size or 224, size or 224)
    return {"pixel_values": torch.randn(shape, generator=generator)}


def audio(config: Any) -> dict[str, Any]:
    """Random audio in the form the config's model reads, as its feature extractor would give
    it: log-mel features of a Whisper-like encoder (mel bins x twice its source positions: the
    30 s window its convolutions halve), stacked features of a feature projection (w2v-BERT:
    100 frames of its input width, ~2 s), a spectrogram as input_values (AST: its max_length
    frames of mel bins, ~10 s), else one second of raw 16 kHz waveform (wav2vec2, HuBERT)."""
    import torch

    generator = torch.Generator().manual_seed(0)

    def noise(*shape: int) -> Any:
        return torch.randn((BATCH, *shape), generator=generator)

    mels, frames = getattr(config, "num_mel_bins", None), getattr(config, "max_length", None)
    if mels and getattr(config, "max_source_positions", None):
        return {"input_features": noise(mels, 2 * config.max_source_positions)}
    if getattr(config, "feature_projection_input_dim", None):
        return {"input_features": noise(100, config.feature_projection_input_dim)}
    if mels and frames:
        return {"input_values": noise(frames, mels)}
    return {"input_values": noise(16_000)}


def prompt(task: str, config: Any, length: int = 8) -> dict[str, Any]:
    """One generation prompt: a single sequence with its attention mask."""
    import torch

    ids = _ids(config, _codebooks(config), length)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def generate_kwargs(task: str, config: Any, static: bool) -> dict[str, Any]:
    """Greedy decoding as users call it (the model's own EOS and stopping criteria kept), a pad
    id when the config has none, a static cache if supported."""
    kwargs: dict[str, Any] = {"do_sample": False}
    if getattr(config, "pad_token_id", None) is None:
        kwargs["pad_token_id"] = 0
    if static:
        kwargs["cache_implementation"] = "static"
    return kwargs


def token_marks(label: str) -> Any:
    """A LogitsProcessorList whose one processor marks the truth's counters at each token (as
    `{label}:{token index}`, truth.mark) and returns the scores untouched: nothing is added to
    the device graph."""
    from transformers import LogitsProcessor, LogitsProcessorList

    from tpuscope.zoo import truth

    class _Mark(LogitsProcessor):
        def __init__(self) -> None:
            self.token = 0

        def __call__(self, input_ids: Any, scores: Any) -> Any:
            truth.mark(f"{label}:{self.token}")
            self.token += 1
            return scores

    return LogitsProcessorList([_Mark()])


def fails_on_cpu(
    model_type: str, class_name: str, task: str, scenario: str, experts: str | None = None
) -> str | None:
    """The same tiny model and inputs on the plain CPU (no XLA): the error there, or None when it
    runs. A cell that fails on XLA but runs here is XLA's problem; one that fails here too is the
    model's (or the tiny config's)."""
    from tpuscope.zoo import configs

    try:
        config, model, _ = configs.build(model_type, class_name, decoder=task == "causal-lm")
        if experts:
            model.set_experts_implementation(experts)
        if scenario == "generate":
            model.eval().generate(
                **prompt(task, config), max_new_tokens=4, **generate_kwargs(task, config, False)
            )
        else:
            model.train()(**batch(task, config, 16)).loss.backward()
    except Exception as exc:  # the reason is the result
        return _reason(exc)
    return None


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ''}"


def _same(a: str, b: str) -> bool:
    """The same error up to sizes (a full-size model's message has other numbers)."""
    import re

    return re.sub(r"\d+", "N", a) == re.sub(r"\d+", "N", b)


def fails_at_full_size(model_type: str, class_name: str, task: str, cpu_error: str) -> bool:
    """Whether the type's own default config, not shrunk, fails the same way: its model built
    and run forward on the meta device (no memory, no compute). Then the default config itself
    is broken (transformers' problem), not the tiny config nor XLA."""
    import torch
    from transformers import CONFIG_MAPPING

    from tpuscope.zoo import configs

    try:
        default = configs.for_class(CONFIG_MAPPING[model_type](), class_name)
        with torch.device("meta"):
            model = configs.model_class(class_name)(default)
            model.train()(**batch(task, default, 16))
    except Exception as exc:  # the same failure, or another one: compared below
        return _same(_reason(exc), cpu_error)
    return False
