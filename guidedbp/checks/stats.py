"""Rank statistics for comparing saliency maps (numpy only).

Saliency maps are compared by the Spearman rank correlation of their magnitudes,
as in Adebayo et al. (2018), "Sanity Checks for Saliency Maps": a map is read as an
ordering of pixels by importance, so the comparison should not depend on the
map's scale or on a monotone change of its values.

>>> spearman([1, 2, 3], [3, 2, 1])
-1.0
"""

from __future__ import annotations

import numpy as np


def rankdata(values) -> np.ndarray:
    """1-based ranks of ``values`` (flattened), ties given the average of their ranks.

    >>> rankdata([10, 20, 20, 5]).tolist()
    [2.0, 3.5, 3.5, 1.0]
    """
    flat = np.asarray(values, dtype=np.float64).ravel()
    if flat.size == 0:
        return flat
    order = np.argsort(flat, kind="mergesort")
    ordered = flat[order]
    starts_group = np.concatenate(([True], ordered[1:] != ordered[:-1]))
    group = np.cumsum(starts_group) - 1
    starts = np.flatnonzero(starts_group)
    stops = np.append(starts[1:], flat.size)
    average = (starts + stops + 1) / 2.0  # mean of the 1-based ranks start+1 .. stop
    ranks = np.empty(flat.size)
    ranks[order] = average[group]
    return ranks


def pearson(a, b) -> float:
    """Pearson correlation of two equally long arrays; NaN where either is constant."""
    x = np.asarray(a, dtype=np.float64).ravel()
    y = np.asarray(b, dtype=np.float64).ravel()
    x = x - x.mean()
    y = y - y.mean()
    denominator = np.sqrt(np.dot(x, x) * np.dot(y, y))
    if denominator == 0:
        return float("nan")
    return float(np.clip(np.dot(x, y) / denominator, -1.0, 1.0))


def spearman(a, b) -> float:
    """Spearman rank correlation: the Pearson correlation of the average-tie ranks.

    Returns NaN when either array is constant (the correlation is undefined) or holds
    NaN or infinity.

    Raises:
        ValueError: If the arrays differ in size or are empty.

    >>> spearman([1, 2, 3, 4], [1, 3, 2, 4])
    0.8
    """
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    if x.size != y.size or x.size == 0:
        raise ValueError(f"spearman needs two equally long, non-empty arrays, got sizes "
                         f"{x.size} and {y.size}")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        return float("nan")
    return pearson(rankdata(x), rankdata(y))


def magnitude(saliency: np.ndarray) -> np.ndarray:
    """Per-pixel magnitude ``max_c |map|`` of an ``(H, W, C)`` map, as the gray render
    shows it (any channel count; NaN and infinity pass through)."""
    return np.max(np.abs(np.asarray(saliency, dtype=np.float64)), axis=-1)


def map_similarity(first: np.ndarray, second: np.ndarray) -> float:
    """Spearman correlation of two maps' magnitudes (``max_c |map|`` per pixel).

    Where the correlation is undefined because a magnitude is constant, two equal
    maps count as similar (1.0) and two different ones as unrelated (0.0). Maps
    holding NaN or infinity give NaN.

    Raises:
        ValueError: If the maps differ in shape.
    """
    first, second = np.asarray(first), np.asarray(second)
    if first.shape != second.shape:
        raise ValueError(f"maps of shapes {first.shape} and {second.shape} cannot be compared")
    first_magnitude, second_magnitude = magnitude(first), magnitude(second)
    value = spearman(first_magnitude, second_magnitude)
    if np.isnan(value) and np.all(np.isfinite(first)) and np.all(np.isfinite(second)):
        return 1.0 if np.array_equal(first_magnitude, second_magnitude) else 0.0
    return value


def relative_difference(value: np.ndarray, reference: np.ndarray) -> float:
    """``max |value - reference| / max |reference|``: 0 for equal arrays, inf when
    ``reference`` is all zero and ``value`` is not."""
    value = np.asarray(value, dtype=np.float64)
    reference = np.asarray(reference, dtype=np.float64)
    difference = float(np.max(np.abs(value - reference))) if value.size else 0.0
    scale = float(np.max(np.abs(reference))) if reference.size else 0.0
    if difference == 0.0:
        return 0.0
    return difference / scale if scale > 0 else float("inf")
