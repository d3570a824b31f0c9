"""Which model types the zoo sweeps: transformers' own auto mappings, one entry per (task, model type).

The catalog is the pinned transformers version's registry (`MODEL_FOR_*_MAPPING_NAMES`), read
without importing any model: a new transformers release changes the zoo by itself. Tasks come
in a fixed order (causal LM first), and a model type is listed once per task it is registered
for; the scenarios that fit a task are named here too, so `--list` says what a sweep would run.
"""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass

# task -> (the auto mapping's name, the scenarios that fit it)
TASKS: dict[str, tuple[str, tuple[str, ...]]] = {
    "causal-lm": (
        "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
        ("train", "generate", "train-varlen", "eager", "tensorcore"),
    ),
    "masked-lm": ("MODEL_FOR_MASKED_LM_MAPPING_NAMES", ("train", "train-varlen", "eager")),
    "seq2seq": ("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES", ("train", "generate", "eager")),
    "seq-cls": ("MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES", ("train", "eager")),
    "image-cls": ("MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES", ("train", "eager")),
    "audio-cls": ("MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES", ("train", "eager")),
}


@dataclass(frozen=True)
class Entry:
    """One model type registered for one task: the class transformers' auto mapping names."""

    model_type: str
    task: str
    class_name: str

    @property
    def scenarios(self) -> tuple[str, ...]:
        return TASKS[self.task][1]


def entries(tasks: Iterable[str] | None = None) -> list[Entry]:
    """Every (model type, task) of the installed transformers, tasks in TASKS order, types sorted."""
    from transformers.models.auto import modeling_auto

    found: list[Entry] = []
    for task in tasks or TASKS:
        mapping = getattr(modeling_auto, TASKS[task][0])
        # a type registered with several classes (DeiT's plain head and its distillation head
        # "with teacher") runs the first, the one its task trains
        found += [
            Entry(model_type, task, cls if isinstance(cls, str) else cls[0])
            for model_type, cls in sorted(mapping.items())
            if isinstance(cls, str) or cls
        ]
    return found


def select(
    items: list[Entry], only: Iterable[str] = (), exclude: Iterable[str] = ()
) -> list[Entry]:
    """The entries whose model type matches any `only` glob (all when none) and no `exclude` glob."""
    only, exclude = list(only), list(exclude)

    def wanted(name: str) -> bool:
        keep = not only or any(fnmatch.fnmatchcase(name, p) for p in only)
        return keep and not any(fnmatch.fnmatchcase(name, p) for p in exclude)

    return [e for e in items if wanted(e.model_type)]


def patterns(values: Iterable[str]) -> list[str]:
    """The globs of repeated `--only`/`--exclude` options, each of which may list several
    separated by commas (`--only gpt2,llama`: model types never hold a comma)."""
    return [p.strip() for value in values for p in value.split(",") if p.strip()]


def unmatched(items: list[Entry], only: Iterable[str]) -> dict[str, list[str]]:
    """The `only` globs that match no model type of `items`, each with the closest types
    (difflib, its glob characters left out): a typo must not run, or list, nothing silently."""
    types = sorted({e.model_type for e in items})
    out: dict[str, list[str]] = {}
    for pattern in only:
        if not any(fnmatch.fnmatchcase(name, pattern) for name in types):
            stem = pattern.translate(str.maketrans("", "", "*?[]!"))
            out[pattern] = difflib.get_close_matches(stem, types, n=5, cutoff=0.6)
    return out


def cells(items: list[Entry], scenarios: Iterable[str]) -> list[tuple[Entry, str]]:
    """(entry, scenario) for every scenario asked for that fits the entry's task, one cell per
    (model type, scenario), a type's cells together (a row of the table fills at once); a type
    registered for several tasks runs a scenario under its first task."""
    seen: set[tuple[str, str]] = set()
    out: list[tuple[Entry, str]] = []
    scenarios = list(scenarios)
    for entry in items:
        for scenario in scenarios:
            key = (entry.model_type, scenario)
            if scenario in entry.scenarios and key not in seen:
                seen.add(key)
                out.append((entry, scenario))
    return out
