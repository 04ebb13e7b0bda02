"""Localisation scores of saliency maps against object masks; numpy only.

The metrics take a saliency *magnitude*, one non-negative value per pixel, such as
``np.abs(maps).max(axis=-1)`` for engine maps of shape ``(N, H, W, C)``.

>>> import numpy as np
>>> magnitude = np.zeros((1, 4, 4)); magnitude[0, 0, 0] = 3.0; magnitude[0, 3, 3] = 1.0
>>> mask = np.zeros((1, 4, 4), bool); mask[0, 3, 3] = True
>>> pointing_game(magnitude, mask, tolerance=0).tolist(), energy_inside(magnitude, mask).tolist()
([False], [0.25])
"""

from __future__ import annotations

import numpy as np


def pointing_game(
    saliency_magnitude: np.ndarray, masks: np.ndarray, tolerance: float = 15
) -> np.ndarray:
    """Whether each map's maximum points at the object.

    The pointing game of Zhang et al. (2016, "Top-down Neural Attention by Excitation
    Backprop", ECCV): a hit when the map's highest pixel lies within ``tolerance``
    pixels (Euclidean distance between pixel centres) of a mask pixel. The test is
    exact: the distance from the maximum to the nearest mask pixel is computed, not
    approximated by a dilation. When several pixels share the maximum, the first in
    row-major order counts. An empty mask is never hit. So a constant map (an all-zero
    one) "hits" every object near pixel (0, 0) and misses the others: leave such maps
    and empty masks out, as ``guidedbp evaluate`` does
    (:func:`guidedbp.checks.metrics_arrays.constant_maps`).

    Args:
        saliency_magnitude: Real ``(N, H, W)``, one magnitude per pixel.
        masks: Bool ``(N, H, W)``, the objects.
        tolerance: Non-negative distance in pixels; the paper uses 15.

    Returns:
        Bool ``(N,)``, True for a hit.

    Raises:
        ValueError: For shapes that are not ``(N, H, W)`` or differ, non-bool masks or
            a negative tolerance.
    """
    magnitude, masks = _check(saliency_magnitude, masks)
    if not np.isfinite(tolerance) or tolerance < 0:
        raise ValueError(f"tolerance={tolerance!r} must be a non-negative number of pixels")
    count, _, width = magnitude.shape
    flat = magnitude.reshape(count, -1).argmax(axis=1)
    rows, cols = np.divmod(flat, width)
    hits = np.zeros(count, bool)
    for i in range(count):
        mask_rows, mask_cols = np.nonzero(masks[i])
        if mask_rows.size:
            nearest = np.min((mask_rows - rows[i]) ** 2 + (mask_cols - cols[i]) ** 2)
            hits[i] = nearest <= tolerance**2  # integer squares: exact at the boundary
    return hits


def energy_inside(saliency_magnitude: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """Share of each map's total magnitude that falls inside the mask.

    Args:
        saliency_magnitude: Non-negative real ``(N, H, W)``.
        masks: Bool ``(N, H, W)``.

    Returns:
        Float64 ``(N,)`` in [0, 1]; 0 for an all-zero map.

    Raises:
        ValueError: For mismatched or wrong shapes, non-bool masks or negative values.
    """
    magnitude, masks = _check(saliency_magnitude, masks)
    if np.any(magnitude < 0):
        raise ValueError("saliency_magnitude must be non-negative (take np.abs first)")
    magnitude = magnitude.astype(np.float64)
    total = magnitude.sum(axis=(1, 2))
    inside = np.where(masks, magnitude, 0.0).sum(axis=(1, 2))
    return np.divide(inside, total, out=np.zeros_like(total), where=total > 0)


def dilate(masks: np.ndarray, half_width: int) -> np.ndarray:
    """Bool ``(N, H, W)``: the pixels within Chebyshev distance ``half_width`` of a mask
    pixel (a square dilation by a ``(2*half_width + 1)``-pixel side, clipped to the image).

    Raises:
        ValueError: For masks that are not bool ``(N, H, W)`` or a negative half-width.

    >>> mask = np.zeros((1, 5, 5), bool); mask[0, 0, 0] = True
    >>> dilate(mask, 1)[0].astype(int).tolist()[:3]
    [[1, 1, 0, 0, 0], [1, 1, 0, 0, 0], [0, 0, 0, 0, 0]]
    """
    masks = np.asarray(masks)
    if masks.ndim != 3 or masks.dtype != bool:
        raise ValueError(f"masks must be bool (N, H, W), got {masks.dtype} {masks.shape}")
    if isinstance(half_width, bool) or not isinstance(half_width, (int, np.integer)) \
            or half_width < 0:
        raise ValueError(f"half_width={half_width!r} must be a non-negative integer")
    dilated = masks
    for axis in (1, 2):  # a square is a row segment times a column segment
        padding = [(0, 0)] * 3
        padding[axis] = (half_width, half_width)
        windows = np.lib.stride_tricks.sliding_window_view(
            np.pad(dilated, padding), 2 * half_width + 1, axis=axis)
        dilated = windows.any(axis=-1)
    return dilated


def energy_inside_dilated(
    saliency_magnitude: np.ndarray, masks: np.ndarray, half_width: int
) -> np.ndarray:
    """Share of each map's total magnitude within ``half_width`` pixels of the mask:
    :func:`energy_inside` of the masks under :func:`dilate`.

    With ``half_width`` a model's :func:`guidedbp.demo.receptive.reach`, the dilated
    mask holds every input pixel that the model's outputs over the mask can depend on:
    the gradient of a score of those outputs has all its energy there (share 1), and
    a method that spreads energy farther (a CAM upsampled from a coarse layer, a
    perturbation window) shows it here.

    Args:
        saliency_magnitude: Non-negative real ``(N, H, W)``.
        masks: Bool ``(N, H, W)``.
        half_width: Non-negative dilation half-width in pixels.

    Returns:
        Float64 ``(N,)`` in [0, 1]; 0 for an all-zero map.

    >>> magnitude = np.zeros((1, 4, 4)); magnitude[0, 0, 0] = 3.0; magnitude[0, 3, 3] = 1.0
    >>> mask = np.zeros((1, 4, 4), bool); mask[0, 3, 3] = True
    >>> [energy_inside_dilated(magnitude, mask, reach).tolist() for reach in (2, 3)]
    [[0.25], [1.0]]
    """
    magnitude, masks = _check(saliency_magnitude, masks)
    return energy_inside(magnitude, dilate(masks, half_width))


def _check(saliency_magnitude, masks) -> tuple[np.ndarray, np.ndarray]:
    magnitude = np.asarray(saliency_magnitude)
    masks = np.asarray(masks)
    if magnitude.ndim != 3:
        hint = " (reduce channels first: np.abs(maps).max(axis=-1))" if magnitude.ndim == 4 else ""
        raise ValueError(
            f"saliency_magnitude must have shape (N, H, W), got {magnitude.shape}{hint}"
        )
    if not (np.issubdtype(magnitude.dtype, np.floating)
            or np.issubdtype(magnitude.dtype, np.integer)):
        raise ValueError(f"saliency_magnitude must be real, got dtype {magnitude.dtype}")
    if masks.dtype != bool:
        raise ValueError(f"masks must be bool, got dtype {masks.dtype}")
    if masks.shape != magnitude.shape:
        raise ValueError(
            f"masks have shape {masks.shape}, expected the magnitude's {magnitude.shape}"
        )
    return magnitude, masks
