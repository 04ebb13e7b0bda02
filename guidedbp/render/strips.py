"""Float64 work on strips of rows: how a render of any size keeps its memory bounded.

Renders work in float64 on strips of rows (:data:`STRIP_VALUES` values at a time), in
place in a work array per strip, so a large map costs its render and a float32
magnitude, not several float64 copies of itself. Maps up to that size are computed
whole, as one strip. A thread keeps its two work arrays for its next render (up to
:data:`KEPT_WORK_VALUES` values each). The statistics of one strip are numpy's own
steps (:func:`std`, :func:`mean_std`), to the last bit.

>>> [len(row_strips(shape)) for shape in [(3, 2, 3), (3000, 1000, 3)]]
[1, 5]
>>> to_uint8(np.array([0.0, 0.5, 1.0])).tolist()
[0, 128, 255]
"""

from __future__ import annotations

import math
import threading

import numpy as np

__all__ = ["KEPT_WORK_VALUES", "STRIP_VALUES", "as_float64", "levels_in_place", "mean_std",
           "row_strips", "std", "to_uint8", "work_array"]

#: Values rendered at a time: float64 work arrays stay near 16 MB whatever the map's size.
STRIP_VALUES = 1 << 21
#: Work arrays up to this many values (8 MB) are kept for the thread's next render.
KEPT_WORK_VALUES = 1 << 20


def to_uint8(values01: np.ndarray) -> np.ndarray:
    """[0, 1] floats to uint8, round half up; callers have clipped already."""
    return np.clip(np.floor(values01 * 255.0 + 0.5), 0, 255).astype(np.uint8)


_kept = threading.local()  # this thread's work arrays, see work_array


def work_array(slot: int, shape: tuple) -> np.ndarray:
    """A float64 work array of ``shape`` (contents undefined), the thread's ``slot``-th.

    Renders reuse their thread's two work arrays (up to :data:`KEPT_WORK_VALUES` values
    each, 8 MB): a fresh array of that size costs the operating system more (its pages
    mapped and zeroed, then given back) than the arithmetic done in it.
    """
    size = math.prod(shape)
    if size > KEPT_WORK_VALUES:
        return np.empty(shape, dtype=np.float64)
    arrays = getattr(_kept, "arrays", None)
    if arrays is None:
        arrays = _kept.arrays = [np.empty(0), np.empty(0)]
    if arrays[slot].size < size:
        arrays[slot] = np.empty(size, dtype=np.float64)
    return arrays[slot][:size].reshape(shape)


def as_float64(values: np.ndarray, slot: int) -> np.ndarray:
    """``values.astype(np.float64)`` in the work array ``slot``."""
    work = work_array(slot, values.shape)
    np.copyto(work, values, casting="unsafe")
    return work


def std(centred: np.ndarray) -> np.floating:
    """``centred.std()``: numpy's own steps (``numpy/_core/_methods.py``, ``_var``), with
    its temporary in a work array."""
    count = centred.size
    mean = np.add.reduce(centred, axis=None, keepdims=True)
    mean = np.true_divide(mean, count, out=mean, casting="unsafe", subok=False)
    deviations = work_array(1, centred.shape)
    np.subtract(centred, mean, out=deviations)
    np.multiply(deviations, deviations, out=deviations)
    return np.sqrt(np.add.reduce(deviations, axis=None) / count)


def levels_in_place(values01: np.ndarray, out: np.ndarray) -> None:
    """:func:`to_uint8` of a float64 work array clipped to [0, 1], into the uint8 ``out``
    (broadcast to its shape); ``values01`` is used up. The same operations, in place: a
    fresh array per step cost more than the arithmetic."""
    values01 *= 255.0
    values01 += 0.5
    np.floor(values01, out=values01)  # within [0, 255]: the cast is exact
    out[...] = values01


def row_strips(shape: tuple) -> list[slice]:
    """Row slices of about :data:`STRIP_VALUES` values each (one slice for a small map)."""
    per_row = max(1, math.prod(shape[1:]))
    step = max(1, STRIP_VALUES // per_row)
    return [slice(top, top + step) for top in range(0, shape[0], step)]


def mean_std(values: np.ndarray, strips: list[slice], factor: float = 1.0
             ) -> tuple[float, float, np.ndarray | None]:
    """The mean of ``values * factor`` and the standard deviation of its difference from
    that mean, in float64; with one strip also that difference, ``values * factor -
    mean`` (float64, the caller's to reuse), else ``None``.

    One strip: numpy's own ``mean`` and ``std``. Several: the same sums, strip by strip.
    """
    def part(rows: slice) -> np.ndarray:
        scaled = as_float64(values[rows], 0)
        scaled *= factor
        return scaled

    if len(strips) == 1:
        centred = part(strips[0])
        mean = centred.mean()
        centred -= mean
        return mean, std(centred), centred
    count = values.size
    mean = sum(float(part(rows).sum()) for rows in strips) / count
    # numpy's std of the centred values subtracts their own (almost zero) mean too.
    centred_mean = sum(float((part(rows) - mean).sum()) for rows in strips) / count
    squares = sum(float(np.square(part(rows) - mean - centred_mean).sum()) for rows in strips)
    return mean, math.sqrt(squares / count), None
