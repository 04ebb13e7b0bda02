"""Warnings that point at the caller's code: the first frame outside guidedbp (and
TensorFlow, which may sit between while a trace runs), wherever in the engine they are
raised."""

from __future__ import annotations

import os
import sys
import warnings


def caller_stacklevel() -> int:
    """The ``stacklevel`` that points a warning raised by this function's caller at the
    first frame outside guidedbp (and TensorFlow)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frame, level = sys._getframe(1), 1
    while frame is not None:
        filename = os.path.abspath(frame.f_code.co_filename)
        if not filename.startswith(package + os.sep) and "/tensorflow/" not in filename:
            return level
        frame, level = frame.f_back, level + 1
    return 1


def warn(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` pointed at the first frame outside guidedbp."""
    warnings.warn(message, category, stacklevel=caller_stacklevel())
