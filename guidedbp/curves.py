"""The maths of the deletion and insertion curves: their x axis and the area under them.

Shared by :mod:`guidedbp.checks.faithfulness` (which plays the games) and
:mod:`guidedbp.plot` (which draws the curves), so that neither client imports the
other. numpy only: every room may import it.

>>> fractions(4).tolist(), auc([1.0, 0.0, 0.0, 0.0, 0.5])
([0.0, 0.25, 0.5, 0.75, 1.0], 0.1875)
"""

from __future__ import annotations

import numpy as np

from guidedbp.errors import ArgumentError

__all__ = ["GAMES", "auc", "fractions", "positive_int"]

#: The two games, in the order they are reported.
GAMES = ("deletion", "insertion")


def positive_int(value, name: str) -> int:
    """``value`` as an ``int`` when it is a whole number of at least 1 (not a bool).

    Raises:
        ArgumentError: Anything else, naming ``name``.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) \
            or value < 1:
        raise ArgumentError(f"{name}={value!r} must be a positive whole number")
    return int(value)


def fractions(steps: int) -> np.ndarray:
    """The x axis of a curve of ``steps`` steps: ``0, 1/steps, ..., 1`` (float64).

    >>> fractions(4).tolist()
    [0.0, 0.25, 0.5, 0.75, 1.0]
    """
    steps = positive_int(steps, "steps")
    return np.arange(steps + 1, dtype=np.float64) / steps


def auc(curve) -> float:
    """The area under a curve sampled at x = 0, 1/steps, ..., 1: the trapezoid rule.

    Args:
        curve: Real, finite ``(steps + 1,)``, at least 2 points.

    Returns:
        The area, ``(sum(curve) - (curve[0] + curve[-1]) / 2) / steps``.

    Raises:
        ArgumentError: Another shape, fewer than 2 points, or non-finite values.

    >>> auc([1.0, 0.0, 0.0, 0.0, 0.5])
    0.1875
    """
    values = np.asarray(curve)
    if values.ndim != 1 or len(values) < 2 or values.dtype.kind not in "biuf":
        raise ArgumentError(f"curve must be a real 1-D array of at least 2 points, got "
                            f"shape {values.shape} and dtype {values.dtype}")
    values = values.astype(np.float64)
    if not np.all(np.isfinite(values)):
        raise ArgumentError("curve must be finite, got NaN or infinite values")
    steps = len(values) - 1
    return float((values.sum() - (values[0] + values[-1]) / 2.0) / steps)
