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


def _gaussian_window(size: int, sigma: float) -> np.ndarray:
    """The normalised 1-D Gaussian of ``size`` taps (the SSIM window is its outer
    product with itself, as TensorFlow's ``_fspecial_gauss``)."""
    coords = np.arange(size, dtype=np.float64) - (size - 1) / 2.0
    weights = np.exp(-0.5 * coords**2 / sigma**2)
    return weights / weights.sum()


def ssim(first, second, *, window: int = 11, sigma: float = 1.5, k1: float = 0.01,
         k2: float = 0.03) -> float:
    """The structural similarity (Wang et al. 2004) of two ``(H, W, C)`` maps, as
    Xplique's ``RandomLogitMetric`` computes it with ``tf.image.ssim``.

    The dynamic range is ``max - min`` over both maps (1.0 when they are one constant
    value, which counts as similarity 1); the Gaussian window shrinks to the map's
    shorter side, kept odd; means, variances and covariance are window-weighted over the
    positions where the window fits (no padding), and the SSIM is the mean over those
    positions, then over channels.

    Raises:
        ValueError: Maps of different or non-3-D shapes.

    >>> ramp = np.arange(16.0).reshape(4, 4, 1)
    >>> ssim(ramp, ramp), round(ssim(ramp, ramp[::-1]), 4)
    (1.0, -0.7483)
    """
    x = np.asarray(first, np.float64)
    y = np.asarray(second, np.float64)
    if x.shape != y.shape or x.ndim != 3:
        raise ValueError(f"ssim needs two (H, W, C) maps of one shape, got {x.shape} and "
                         f"{y.shape}")
    data_range = float(max(x.max(), y.max()) - min(x.min(), y.min()))
    if data_range == 0:
        return 1.0
    size = min(window, x.shape[0], x.shape[1])
    size = max(size - 1 if size % 2 == 0 else size, 1)
    weights = _gaussian_window(size, sigma)

    def weighted(values: np.ndarray) -> np.ndarray:  # separable, 'valid' positions only
        rows = np.lib.stride_tricks.sliding_window_view(values, size, axis=0) @ weights
        return np.lib.stride_tricks.sliding_window_view(rows, size, axis=1) @ weights

    c1, c2 = (k1 * data_range) ** 2, (k2 * data_range) ** 2
    mean_x, mean_y = weighted(x), weighted(y)
    luminance = (2 * mean_x * mean_y + c1) / (mean_x**2 + mean_y**2 + c1)
    structure = ((2 * (weighted(x * y) - mean_x * mean_y) + c2)
                 / (weighted(x * x + y * y) - mean_x**2 - mean_y**2 + c2))
    return float((luminance * structure).mean(axis=(0, 1)).mean())


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
