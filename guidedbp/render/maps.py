"""Turn saliency maps into pictures: pure numpy and Pillow, fully deterministic.

A saliency map here is a real array of shape ``(H, W, C)`` with ``C`` 1 or 3:
the gradient of a class score with respect to the input pixels, as the engine
returns it (float32). Renders that also show the photograph take the original
image as ``uint8`` of shape ``(H, W, 3)``, ``(H, W, 1)`` or ``(H, W)`` and the
SAME ``H`` and ``W``: resizing is the caller's job (``guidedbp.models.resizing.resize_map``).
The one exception is a larger picture of the same aspect that scales down to the
map's size exactly (maps of a large original are capped at
``guidedbp.models.resizing.MAX_SHOWN_SIDE``): it is reduced to the map's size first.
Every render returns ``uint8``, ``(H, W, 3)`` or ``(H, W)``, ready to save.
Float to ``uint8`` conversions round to nearest with halves up
(``floor(v * 255 + 0.5)``), so the same input gives the same bytes everywhere.

Memory and speed: renders work in float64 on strips of rows
(:data:`~guidedbp.render.strips.STRIP_VALUES` values at a time), in place in a work array
per strip, so a large map costs its render and a float32 magnitude, not several float64
copies of itself. Maps up to that size are computed whole, as one strip. A thread keeps
its two work arrays for its next render (up to
:data:`~guidedbp.render.strips.KEPT_WORK_VALUES` values each; :mod:`guidedbp.render.strips`).
What float64 would not change is done in cheaper types: the magnitude of a float32 map in
float32 (exact), the colormap and the blend as uint8 lookup tables built with the float64
formulas. Every pixel is what the formulas below give, in float64.

Renders (:data:`RENDERS`):

- ``color``: the classic guided-backprop picture (Springenberg et al., 2015,
  "Striving for Simplicity: The All Convolutional Net", arXiv:1412.6806), the
  signed gradient normalised per image as in Keras' ``deprocess_image``, but by the
  map's own statistics whatever their magnitude (no ``1e-12`` floor: a map of values
  near ``1e-14`` shows as much contrast as the same map at 1; only a constant map is flat):
  ``clip((x - mean) / std * 0.1 + 0.5, 0, 1)``.
- ``gray``: the magnitude ``max_c |g|`` scaled so its ``clip`` percentile is white.
- ``heatmap``: ``gray`` through a colormap (default ``inferno``).
- ``overlay``: ``heatmap`` blended onto the image.
- ``panel``: original, ``color``, ``gray`` and ``overlay`` side by side, titled,
  with an optional caption line (for example ``"tabby (class 281) p=0.873"``).

:data:`DEFAULT_RENDERS` is ``("color", "overlay")``: ``color`` is the picture the
method is known for and needs nothing but the map, and ``overlay`` answers
"where in my photo?" at the photo's own size. ``panel`` repeats both and adds
text, so it is asked for explicitly; ``gray`` and ``heatmap`` are raw
ingredients for people who post-process.

Colormap data (inferno/viridis/magma/plasma: CC0, matplotlib; cividis:
BSD-style, Battelle/PNNL; turbo: Apache-2.0, Google) is described in
``guidedbp/render/colormaps.py`` and ``guidedbp/render/data/SOURCES.md``.

>>> import numpy as np
>>> from guidedbp.render import render_color, render_gray
>>> render_color(np.zeros((1, 1, 3), np.float32)).tolist()
[[[128, 128, 128]]]
>>> render_gray(np.array([[[0.0], [2.0]]], np.float32), clip=100.0).tolist()
[[0, 255]]
"""

from __future__ import annotations

import math

import numpy as np

from guidedbp.render.colormaps import DEFAULT_COLORMAP, colormap_lut
from guidedbp.render.strips import (
    as_float64,
    levels_in_place,
    mean_std,
    row_strips,
    to_uint8,
)

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_CLIP",
    "DEFAULT_RENDERS",
    "RENDERS",
    "magnitude",
    "render_color",
    "render_gray",
    "render_heatmap",
]

#: Every render name, in the order the CLI lists them.
RENDERS = ("color", "gray", "heatmap", "overlay", "panel")
#: Renders written when the user asks for none (see the module docstring).
DEFAULT_RENDERS = ("color", "overlay")
#: Percentile of the magnitude that maps to full intensity.
DEFAULT_CLIP = 99.0
#: Weight of the heatmap in an overlay.
DEFAULT_ALPHA = 0.5

_COLOR_SCALE = 0.1  # one standard deviation becomes 0.1 of the intensity range


def _check_saliency(saliency: np.ndarray) -> np.ndarray:
    """Validate a saliency map and return it as a real (H, W, C) array, not copied."""
    array = np.asarray(saliency)
    if array.ndim != 3 or array.shape[2] not in (1, 3):
        raise ValueError(
            f"saliency map must have shape (H, W, 1) or (H, W, 3), got shape {array.shape}")
    if array.dtype.kind not in "biuf":
        raise ValueError(f"saliency map must be a real array, got dtype {array.dtype}")
    if array.shape[0] == 0 or array.shape[1] == 0:
        raise ValueError(f"saliency map must not be empty, got shape {array.shape}")
    # NaN propagates through min and max, an infinity is one of them: no mask needed.
    if array.dtype.kind == "f" and not (np.isfinite(array.min()) and np.isfinite(array.max())):
        raise ValueError("saliency map must be finite, got NaN or infinite values")
    return array


def _real_or_nan(value: object) -> float:
    """``float(value)`` for a real number; NaN (fails every range check) otherwise."""
    if isinstance(value, (bool, np.bool_)):
        return math.nan
    if isinstance(value, (int, float, np.integer, np.floating)):
        return float(value)
    return math.nan


def _check_clip(clip: float) -> float:
    value = _real_or_nan(clip)
    if not (0.0 < value <= 100.0):  # NaN fails too
        raise ValueError(f"clip must be a percentile in (0, 100], got {clip!r}")
    return value


def _check_alpha(alpha: float) -> float:
    value = _real_or_nan(alpha)
    if not (0.0 <= value <= 1.0):
        raise ValueError(f"alpha must be a number in [0, 1], got {alpha!r}")
    return value


def magnitude(saliency: np.ndarray) -> np.ndarray:
    """Per-pixel gradient magnitude: the largest absolute value over channels.

    Args:
        saliency: Real array of shape ``(H, W, 1)`` or ``(H, W, 3)``.

    Returns:
        ``float32`` array of shape ``(H, W)``.

    Raises:
        ValueError: If ``saliency`` has the wrong shape or dtype, is empty, or is
            not finite.

    >>> magnitude(np.array([[[1.0, -3.0, 2.0]]])).tolist()
    [[3.0]]
    """
    return _magnitude(_check_saliency(saliency), np.float32)


def _magnitude(values: np.ndarray, dtype) -> np.ndarray:
    """``max_c |values|`` as ``dtype``, strip by strip.

    Computed in float32 where that holds ``values`` exactly (``abs`` and ``max`` are
    exact), else in float64, and channel by channel: the same numbers as float64 all
    through, without a float64 copy of the map.
    """
    work = np.float32 if np.can_cast(values.dtype, np.float32, "safe") else np.float64
    out = np.empty(values.shape[:2], dtype=dtype)
    for rows in row_strips(values.shape):
        strip = values[rows].astype(work, copy=False)
        largest = np.abs(strip[:, :, 0])
        if strip.shape[2] > 1:
            channel = np.empty_like(largest)
            for index in range(1, strip.shape[2]):
                np.maximum(largest, np.abs(strip[:, :, index], out=channel), out=largest)
        out[rows] = largest
    return out


def _gray_levels(saliency: np.ndarray, clip: float) -> np.ndarray:
    """``floor(m * 255 + 0.5)`` of the magnitude ``m`` divided by its ``clip`` percentile
    and clipped to [0, 1], as uint8 (H, W)."""
    return _gray_and_ceiling(saliency, clip)[0]


def _gray_and_ceiling(saliency: np.ndarray, clip: float) -> tuple[np.ndarray, float]:
    """:func:`_gray_levels` and the magnitude shown as white (0.0 for an all-zero map)."""
    clip = _check_clip(clip)
    values = _check_saliency(saliency)
    # Kept exact: float32 holds the magnitude of float32 (and smaller) maps exactly.
    exact = np.float32 if np.can_cast(values.dtype, np.float32, "safe") else np.float64
    magnitudes = _magnitude(values, exact)
    ceiling = float(np.percentile(as_float64(magnitudes, 0), clip, method="linear",
                                  overwrite_input=True))
    if ceiling <= 0.0:
        # A map that is zero above the clip percentile (very sparse) falls back to
        # its maximum, so its few non-zero pixels still show; an all-zero map stays 0.
        ceiling = float(magnitudes.max())
    gray = np.zeros(magnitudes.shape, dtype=np.uint8)
    if ceiling > 0.0:
        for rows in row_strips(magnitudes.shape):
            work = as_float64(magnitudes[rows], 0)
            work /= ceiling
            np.clip(work, 0.0, 1.0, out=work)
            levels_in_place(work, gray[rows])
    return gray, max(ceiling, 0.0)



def render_color(saliency: np.ndarray) -> np.ndarray:
    """Render the signed gradient as the classic guided-backprop colour picture.

    Each value becomes ``clip((x - mean) / std * 0.1 + 0.5, 0, 1)``,
    with the mean and standard deviation taken over the whole map (all pixels
    and channels), then ``floor(v * 255 + 0.5)``. Zero gradient is mid-gray. The
    map is first scaled by the power of two that brings its largest magnitude into
    [0.5, 1), which is exact: a map and the same map times any power of two give the
    same bytes, however small (1e-14) or large its values.

    Args:
        saliency: Real array of shape ``(H, W, 1)`` or ``(H, W, 3)``; a single
            channel is repeated to three.

    Returns:
        ``uint8`` array of shape ``(H, W, 3)``. A constant map (all zeros
        included) gives uniform 128.

    Raises:
        ValueError: If ``saliency`` has the wrong shape or dtype, is empty, or is
            not finite.

    >>> render_color(np.array([[[1.0], [-1.0]]])).reshape(2, 3).tolist()
    [[153, 153, 153], [102, 102, 102]]
    """
    return _color_and_range(saliency)[0]


def _color_and_range(saliency: np.ndarray) -> tuple[np.ndarray, tuple[float, float, float]]:
    """:func:`render_color` and the values shown as black, mid-gray and white: the mean
    minus, plus and plus five standard deviations (a constant map: its value thrice)."""
    values = _check_saliency(saliency)
    strips = row_strips(values.shape)
    rgb = np.empty((*values.shape[:2], 3), dtype=np.uint8)
    highest, lowest = float(values.max()), float(values.min())
    flat = highest == lowest
    if not flat:
        # No floor on the scale: a power of two (exact) brings the map near 1, so its
        # statistics neither underflow nor depend on its magnitude.
        unit = math.ldexp(1.0, -math.frexp(max(abs(highest), abs(lowest)))[1])
        mean, std, centred = mean_std(values, strips, unit)
        flat = not std > 0.0
    if flat:
        # A constant map has no contrast; without this a float rounding residue in
        # x - mean would be divided by a ~0 std and blow up to black or white.
        rgb[...] = to_uint8(np.float64(0.5))
        value = float(values.flat[0])
        return rgb, (value, value, value)
    for rows in strips:
        if centred is not None:  # one strip: the statistics' own work array
            scaled = centred
        else:
            scaled = as_float64(values[rows], 0)
            scaled *= unit
            scaled -= mean
        scaled /= std
        scaled *= _COLOR_SCALE
        scaled += 0.5
        np.clip(scaled, 0.0, 1.0, out=scaled)
        levels_in_place(scaled, rgb[rows])  # one channel is broadcast to three
    reach = 0.5 / _COLOR_SCALE * std  # from mid-gray to white
    return rgb, ((mean - reach) / unit, mean / unit, (mean + reach) / unit)


def render_gray(saliency: np.ndarray, clip: float = DEFAULT_CLIP) -> np.ndarray:
    """Render the gradient magnitude as a grayscale image.

    The magnitude (:func:`magnitude`) is divided by its ``clip`` percentile
    (``numpy.percentile``, linear method) and clipped to [0, 1], so values at or
    above the percentile are white. If that percentile is 0 but the map is not,
    the maximum is used instead.

    Args:
        saliency: Real array of shape ``(H, W, 1)`` or ``(H, W, 3)``.
        clip: Percentile in (0, 100] that maps to 255.

    Returns:
        ``uint8`` array of shape ``(H, W)``; all zeros for an all-zero map.

    Raises:
        ValueError: If ``clip`` is outside (0, 100] or ``saliency`` is invalid.

    >>> render_gray(np.array([[[0.0], [1.0], [2.0], [3.0], [4.0]]]), clip=75.0).tolist()
    [[0, 85, 170, 255, 255]]
    """
    return _gray_levels(saliency, clip)


def render_heatmap(
    saliency: np.ndarray, cmap: str = DEFAULT_COLORMAP, clip: float = DEFAULT_CLIP
) -> np.ndarray:
    """Render the gradient magnitude through a colormap.

    Pixel ``(y, x)`` is entry ``render_gray(saliency, clip)[y, x]`` of the
    colormap's 256-entry table.

    Args:
        saliency: Real array of shape ``(H, W, 1)`` or ``(H, W, 3)``.
        cmap: A name from :func:`guidedbp.render.colormap_names`.
        clip: Percentile in (0, 100] that maps to the colormap's last entry.

    Returns:
        ``uint8`` array of shape ``(H, W, 3)``.

    Raises:
        ValueError: If ``cmap`` is unknown, ``clip`` is outside (0, 100] or
            ``saliency`` is invalid.

    >>> render_heatmap(np.array([[[0.0], [1.0]]]), "viridis", clip=100.0).tolist()
    [[[68, 1, 84], [253, 231, 37]]]
    """
    table = colormap_lut(cmap)  # an unknown name fails before any work
    return np.take(table, _gray_levels(saliency, clip), axis=0)
