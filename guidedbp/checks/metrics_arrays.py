"""Arguments shared by the metric modules: images, maps and classes checked once, and a
model's scores read in batches.

numpy only. Every function raises :class:`~guidedbp.errors.ArgumentError` with a message
naming the argument and what was expected.

>>> as_classes([2, 0], 2).tolist()
[2, 0]
>>> pixel_magnitudes(np.array([[[[1.0, -3.0]]]])).tolist()
[[[3.0]]]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from guidedbp.curves import positive_int
from guidedbp.errors import ArgumentError

__all__ = ["Predict", "as_choice", "as_classes", "as_images", "as_maps", "class_scores",
           "constant_maps", "finite_mean", "pixel_magnitudes", "seeded"]

#: A model as the metrics see it: ``(n, H, W, C)`` float32 inputs -> ``(n, classes)``
#: scores (logits or probabilities, as the metric says).
Predict = Callable[[np.ndarray], np.ndarray]


def as_images(images, name: str = "inputs") -> np.ndarray:
    """``images`` as a finite float64 ``(N, H, W, C)`` array.

    >>> as_images(np.zeros((2, 3, 4)))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    guidedbp.errors.ArgumentError: inputs must have shape (N, H, W, C), got (2, 3, 4) ...
    """
    array = np.asarray(images)
    if array.dtype.kind not in "biuf" or array.dtype == np.bool_:
        raise ArgumentError(f"{name} must be a real array, got dtype {array.dtype}")
    if array.ndim != 4 or 0 in array.shape:
        hint = f" (add a channel axis: {name}[..., None])" if array.ndim == 3 else ""
        raise ArgumentError(f"{name} must have shape (N, H, W, C), got {array.shape}{hint}")
    if not np.all(np.isfinite(array)):
        raise ArgumentError(f"{name} must be finite, got NaN or infinite values")
    return array.astype(np.float64)


def as_maps(maps, images: np.ndarray | None = None, name: str = "maps") -> np.ndarray:
    """``maps`` as a finite float64 ``(N, H, W, C)`` array (an ``(N, H, W)`` one gains a
    channel axis), of the images' count, height and width when ``images`` is given."""
    array = np.asarray(maps)
    if array.dtype.kind in "biuf" and array.dtype != np.bool_ and array.ndim == 3:
        array = array[..., None]
    array = as_images(array, name)
    if images is not None and (len(array) != len(images)
                               or array.shape[1:3] != images.shape[1:3]):
        raise ArgumentError(f"{name} has shape {array.shape}; expected one map per image of "
                            f"the images' size: ({len(images)}, {images.shape[1]}, "
                            f"{images.shape[2]}, C)")
    return array


def as_classes(classes, count: int, name: str = "classes", items: str = "images"
               ) -> np.ndarray:
    """``classes`` as int64 ``(count,)`` class indices, each at least 0, one per of the
    ``count`` ``items`` (what the errors call them)."""
    array = np.asarray(classes)
    if array.ndim != 1 or array.dtype.kind not in "iu":
        raise ArgumentError(f"{name} must be a sequence of class indices, got {classes!r:.80}")
    if len(array) != count:
        raise ArgumentError(f"{name} has {len(array)} classes for {count} {items}")
    if np.any(array < 0):
        raise ArgumentError(f"{name} must be >= 0, got {int(array.min())}")
    return array.astype(np.int64)


def as_choice(value: str, choices, name: str) -> str:
    """``value`` when it is one of ``choices`` (a tuple or a dict's keys).

    >>> as_choice("mean", ("max", "mean"), "channels")
    'mean'
    """
    if value not in choices:
        raise ArgumentError(f"{name}={value!r} is not one of {', '.join(choices)}")
    return value


def pixel_magnitudes(maps: np.ndarray) -> np.ndarray:
    """Each pixel's magnitude ``max_c |map|``: ``(N, H, W, C)`` -> ``(N, H, W)``, the
    quantity the renders show and the games rank by (a 3-channel and a 1-channel map of
    the same image then count the same pixels)."""
    return np.max(np.abs(np.asarray(maps, np.float64)), axis=-1)


def constant_maps(maps) -> np.ndarray:
    """Whether each map is constant as the metrics read it: its per-pixel magnitude
    ``max_c |map|`` (:func:`pixel_magnitudes`) takes one value over the whole map
    (``max == min``), an all-zero map included. Such a map singles out no pixel: its
    maximum is pixel (0, 0) by convention, its ranking of the pixels is row-major order,
    its energy share is the mask's area, its ratios are 0/0.

    Args:
        maps: Real ``(N, H, W, C)``.

    Returns:
        Bool ``(N,)``.

    >>> constant_maps(np.array([[[[0.0]]], [[[2.0]]]]) * np.ones((2, 2, 3, 1))).tolist()
    [True, True]
    >>> constant_maps(np.array([[[[1.0], [-1.0]]], [[[1.0], [0.5]]]])).tolist()
    [True, False]
    """
    magnitudes = pixel_magnitudes(maps)
    flat = magnitudes.reshape(len(magnitudes), -1)
    return flat.max(axis=1) == flat.min(axis=1)


def class_scores(predict: Predict, inputs: np.ndarray, classes: np.ndarray,
                 batch_size: int = 64) -> np.ndarray:
    """``predict(inputs)[i, classes[i]]`` for every row, ``batch_size`` rows per call.

    Returns:
        Float64 ``(len(inputs),)``.

    Raises:
        ArgumentError: ``predict`` is not callable or returns another shape; a class is
            out of range.
    """
    if not callable(predict):
        raise ArgumentError(f"predict must be a callable: inputs -> scores, got "
                            f"{type(predict).__name__}")
    batch_size = positive_int(batch_size, "batch_size")
    out = np.empty(len(inputs), np.float64)
    for start in range(0, len(inputs), batch_size):
        chunk = np.asarray(inputs[start : start + batch_size], np.float32)
        result = np.asarray(predict(chunk))
        if result.ndim != 2 or len(result) != len(chunk) or result.dtype.kind not in "biuf":
            raise ArgumentError(f"predict returned shape {result.shape} for {len(chunk)} "
                                f"inputs; expected ({len(chunk)}, classes) scores")
        wanted = classes[start : start + batch_size]
        if np.any(wanted >= result.shape[1]):
            bad = int(wanted[wanted >= result.shape[1]][0])
            raise ArgumentError(f"class {bad} is out of range: the model has "
                                f"{result.shape[1]} classes (0..{result.shape[1] - 1})")
        out[start : start + len(chunk)] = result[np.arange(len(chunk)), wanted]
    return out


def seeded(seed: int, index: int, salt: int = 0) -> np.random.Generator:
    """The random stream of image ``index``: the same whatever the batch it is in."""
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise ArgumentError(f"seed={seed!r} must be a whole number")
    return np.random.default_rng([abs(int(seed)), int(seed < 0), int(index), int(salt)])


def finite_mean(values: Sequence[float] | np.ndarray) -> float:
    """The mean of the finite values (NaN when there are none)."""
    array = np.asarray(values, np.float64)
    finite = array[np.isfinite(array)]
    return float(finite.mean()) if finite.size else float("nan")
