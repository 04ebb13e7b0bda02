"""What the deletion and insertion games (and ROAD) take away: the pixels of a map ranked
most salient first (:func:`pixel_order`), how many go at each step (:func:`step_counts`),
and what a removed pixel becomes (:func:`baseline_picture`: the picture under a Gaussian
blur, :func:`blurred`, or black). numpy only.

>>> pixel_order(np.array([[1.0, 3.0], [3.0, 0.0]])).tolist(), step_counts(10, 4).tolist()
([1, 2, 0, 3], [0, 2, 5, 7, 10])
"""

from __future__ import annotations

import numpy as np

from guidedbp.curves import positive_int
from guidedbp.errors import ArgumentError
from guidedbp.render.maps import magnitude

__all__ = ["BASELINES", "BLUR_SIGMA", "baseline_picture", "blurred", "checked_picture",
           "pixel_order", "step_counts"]

#: What a removed pixel becomes: a blurred copy of the picture, or black (pixel value 0).
BASELINES = ("blur", "black")
#: The blur's standard deviation, as a share of the picture's shorter side (22.4 px at
#: 224 x 224): strong enough that no object survives it, while the colours stay.
BLUR_SIGMA = 0.1
_BLUR_TRUNCATE = 4.0  # the kernel reaches this many standard deviations (as scipy's)


def pixel_order(saliency_map: np.ndarray) -> np.ndarray:
    """The pixels of a map, most salient first, as row-major flat indices.

    Args:
        saliency_map: Real, finite ``(H, W)``, or ``(H, W, C)`` with ``C`` 1 or 3, ranked
            by its magnitude ``max_c |map|`` (``|map|`` for an ``(H, W)`` one).

    Returns:
        Int64 ``(H * W,)``: pixel ``k`` is row ``k // W``, column ``k % W``. Equal values
        keep row-major order.

    Raises:
        ArgumentError: A map of another shape, an empty or non-finite one.

    >>> pixel_order(np.array([[1.0, 3.0], [3.0, 0.0]])).tolist()
    [1, 2, 0, 3]
    >>> pixel_order(np.array([[[0.5, -2.0, 1.0], [1.0, 1.0, 1.0]]])).tolist()
    [0, 1]
    """
    values = np.asarray(saliency_map)
    if values.dtype.kind not in "biuf" or values.dtype == np.bool_:
        raise ArgumentError(f"saliency_map must be a real array, got dtype {values.dtype}")
    if values.ndim == 3:
        try:
            values = magnitude(values)
        except ValueError as error:
            raise ArgumentError(f"saliency_map: {error}") from None
    elif values.ndim != 2 or 0 in values.shape:
        raise ArgumentError(f"saliency_map must have shape (H, W) or (H, W, C), got "
                            f"{values.shape}")
    elif not np.all(np.isfinite(values)):
        raise ArgumentError("saliency_map must be finite, got NaN or infinite values")
    else:
        values = np.abs(values.astype(np.float64))
    # Negated, a stable sort puts the largest first and keeps ties in index order.
    return np.argsort(-values.astype(np.float64).ravel(), kind="stable").astype(np.int64)


def step_counts(pixels: int, steps: int) -> np.ndarray:
    """How many pixels are perturbed after each step: ``floor(i * pixels / steps)``.

    Returns:
        Int64 ``(steps + 1,)`` from 0 to ``pixels``.

    Raises:
        ArgumentError: ``pixels`` or ``steps`` not a positive whole number.

    >>> step_counts(64, 20).tolist()[:6], step_counts(10, 4).tolist()
    ([0, 3, 6, 9, 12, 16], [0, 2, 5, 7, 10])
    """
    pixels = positive_int(pixels, "pixels")
    steps = positive_int(steps, "steps")
    return np.arange(steps + 1, dtype=np.int64) * pixels // steps


def blurred(picture: np.ndarray, sigma: float | None = None) -> np.ndarray:
    """A picture under a Gaussian blur, each channel on its own.

    The kernel reaches 4 standard deviations each way, normalised to sum 1; the picture
    is mirrored at its borders (edge pixel repeated, ``"reflect"`` in scipy's words), so
    a constant picture stays constant.

    Args:
        picture: Real ``(H, W, C)``.
        sigma: The standard deviation in pixels; ``None`` for :data:`BLUR_SIGMA` times
            the shorter side.

    Returns:
        Float32 ``(H, W, C)``.

    Raises:
        ArgumentError: Another shape, or a negative or non-finite ``sigma``.

    >>> blurred(np.full((4, 6, 1), 7.0))[..., 0].tolist()[0]
    [7.0, 7.0, 7.0, 7.0, 7.0, 7.0]
    """
    values = checked_picture(picture, "picture").astype(np.float64)
    if sigma is None:
        sigma = BLUR_SIGMA * min(values.shape[:2])
    if (isinstance(sigma, (bool, np.bool_)) or not isinstance(sigma, (int, float, np.number))
            or not np.isfinite(sigma) or sigma < 0):
        raise ArgumentError(f"sigma={sigma!r} must be a non-negative number of pixels")
    radius = int(_BLUR_TRUNCATE * float(sigma) + 0.5)
    if radius == 0:
        return values.astype(np.float32)
    offsets = np.arange(-radius, radius + 1, dtype=np.float64)
    kernel = np.exp(-0.5 * (offsets / float(sigma)) ** 2)
    kernel /= kernel.sum()
    for axis in (0, 1):
        values = _convolve(values, kernel, axis)
    return values.astype(np.float32)


def _convolve(values: np.ndarray, kernel: np.ndarray, axis: int) -> np.ndarray:
    """``values`` convolved with a symmetric ``kernel`` along ``axis``, mirrored borders."""
    radius = len(kernel) // 2
    widths = [(0, 0)] * values.ndim
    widths[axis] = (radius, radius)
    padded = np.moveaxis(np.pad(values, widths, mode="symmetric"), axis, 0)
    length = values.shape[axis]
    out = np.zeros_like(np.moveaxis(values, axis, 0))
    for offset, weight in enumerate(kernel):
        out += weight * padded[offset : offset + length]
    return np.moveaxis(out, 0, axis)


def baseline_picture(picture: np.ndarray, baseline: str) -> np.ndarray:
    """What every removed pixel of ``picture`` becomes, as float32 ``(H, W, C)`` pixels.

    >>> float(baseline_picture(np.full((2, 2, 3), 200, np.uint8), "black").max())
    0.0
    """
    if baseline not in BASELINES:
        raise ArgumentError(f"baseline={baseline!r} is not one of {', '.join(BASELINES)}")
    if baseline == "black":
        return np.zeros(checked_picture(picture, "picture").shape, np.float32)
    return blurred(picture)



def checked_picture(picture, name: str) -> np.ndarray:
    array = np.asarray(picture)
    if array.dtype.kind not in "biuf" or array.dtype == np.bool_:
        raise ArgumentError(f"{name} must be a real array, got dtype {array.dtype}")
    if array.ndim != 3 or 0 in array.shape:
        hint = " (add a channel axis: picture[..., None])" if array.ndim == 2 else ""
        raise ArgumentError(f"{name} must have shape (H, W, C), got {array.shape}{hint}")
    if not np.all(np.isfinite(array)):
        raise ArgumentError(f"{name} must be finite, got NaN or infinite values")
    return array
