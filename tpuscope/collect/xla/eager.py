"""Where the program turned torch_xla's eager mode on: the line an `op_by_op` card names.

Strict eager (`torch_xla.experimental.eager_mode(True)`) runs every op as its own device
program, so the line to change is the call that chose it. Wrapping that one function
records the user's frame of the call (the first frame outside installed libraries, the standard
library and tpuscope) in the process meta as `eager_mode_at`; the call itself is passed on
unchanged, and a failure to record never reaches the program.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

from tpuscope.parse.pt_xla_debug import user_location


def _caller_location() -> str | None:
    frame: FrameType | None = sys._getframe(2)
    frames: list[str] = []
    while frame is not None and len(frames) < 32:
        frames.append(f"{frame.f_code.co_name} ({frame.f_code.co_filename}:{frame.f_lineno})")
        frame = frame.f_back
    return user_location(frames)


def watch_eager_mode(record: Callable[[str], None]) -> Callable[[], None]:
    """Wrap torch_xla.experimental.eager_mode; returns the function that unwraps it."""
    import torch_xla.experimental as experimental
    import torch_xla.experimental.eager as eager

    original = eager.eager_mode

    @functools.wraps(original)
    def eager_mode(enable: bool, *args: Any, **kwargs: Any) -> Any:
        if enable:
            try:
                where = _caller_location()
                if where:
                    record(where)
            except Exception:  # recording must never break the user's call
                pass
        return original(enable, *args, **kwargs)

    eager.eager_mode = experimental.eager_mode = eager_mode

    def unwrap() -> None:
        eager.eager_mode = experimental.eager_mode = original

    return unwrap
