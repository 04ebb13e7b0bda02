"""Turn saliency maps into pictures: pure numpy and Pillow, fully deterministic.

A saliency map here is a real array of shape ``(H, W, C)`` with ``C`` 1 or 3:
the gradient of a class score with respect to the input pixels, as the engine
returns it (float32). Renders that also show the photograph take the original
image as ``uint8`` of shape ``(H, W, 3)``, ``(H, W, 1)`` or ``(H, W)`` and the
SAME ``H`` and ``W``: resizing is the caller's job (``guidedbp.models.preprocess.resize_map``).
The one exception is a larger picture of the same aspect that scales down to the
map's size exactly (maps of a large original are capped at
``guidedbp.models.preprocess.MAX_SHOWN_SIDE``): it is reduced to the map's size first.
Every render returns ``uint8``, ``(H, W, 3)`` or ``(H, W)``, ready to save.
Float to ``uint8`` conversions round to nearest with halves up
(``floor(v * 255 + 0.5)``), so the same input gives the same bytes everywhere.

Memory and speed: renders work in float64 on strips of rows (:data:`STRIP_VALUES`
values at a time), in place in a work array per strip, so a large map costs its render
and a float32 magnitude, not several float64 copies of itself. Maps up to that size are
computed whole, as one strip. A thread keeps its two work arrays for its next render
(up to :data:`KEPT_WORK_VALUES` values each). What float64 would not change is done in
cheaper types: the magnitude of a float32 map in float32 (exact), the colormap and the
blend as uint8 lookup tables built with the float64 formulas. Every pixel is what the
formulas below give, in float64.

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

import functools
import math
import threading

import numpy as np

from guidedbp.render.colormaps import DEFAULT_COLORMAP, colormap_lut
from guidedbp.render.panel import as_rgb

__all__ = [
    "STRIP_VALUES",
    "KEPT_WORK_VALUES",
    "DEFAULT_ALPHA",
    "DEFAULT_CLIP",
    "DEFAULT_RENDERS",
    "RENDERS",
    "NEGATIVE_COLOR",
    "POSITIVE_COLOR",
    "magnitude",
    "render_color",
    "render_gray",
    "render_heatmap",
    "render_overlay",
    "render_signed_overlay",
]

#: Every render name, in the order the CLI lists them.
RENDERS = ("color", "gray", "heatmap", "overlay", "panel")
#: Renders written when the user asks for none (see the module docstring).
DEFAULT_RENDERS = ("color", "overlay")
#: Percentile of the magnitude that maps to full intensity.
DEFAULT_CLIP = 99.0
#: Weight of the heatmap in an overlay.
DEFAULT_ALPHA = 0.5

#: Values rendered at a time: float64 work arrays stay near 16 MB whatever the map's size.
STRIP_VALUES = 1 << 21
#: Work arrays up to this many values (8 MB) are kept for the thread's next render.
KEPT_WORK_VALUES = 1 << 20

#: The signed overlay's colour of positive values (raising the score), and of negative
#: ones: SHAP's red and blue (``shap.plots.colors.red_rgb``, ``blue_rgb``).
POSITIVE_COLOR = (255, 0, 81)
NEGATIVE_COLOR = (0, 139, 251)

_COLOR_SCALE = 0.1  # one standard deviation becomes 0.1 of the intensity range


def _to_uint8(values01: np.ndarray) -> np.ndarray:
    """[0, 1] floats to uint8, round half up; callers have clipped already."""
    return np.clip(np.floor(values01 * 255.0 + 0.5), 0, 255).astype(np.uint8)


_kept = threading.local()  # this thread's work arrays, see _work_array


def _work_array(slot: int, shape: tuple) -> np.ndarray:
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


def _as_float64(values: np.ndarray, slot: int) -> np.ndarray:
    """``values.astype(np.float64)`` in the work array ``slot``."""
    work = _work_array(slot, values.shape)
    np.copyto(work, values, casting="unsafe")
    return work


def _std(centred: np.ndarray) -> np.floating:
    """``centred.std()``: numpy's own steps (``numpy/_core/_methods.py``, ``_var``), with
    its temporary in a work array."""
    count = centred.size
    mean = np.add.reduce(centred, axis=None, keepdims=True)
    mean = np.true_divide(mean, count, out=mean, casting="unsafe", subok=False)
    deviations = _work_array(1, centred.shape)
    np.subtract(centred, mean, out=deviations)
    np.multiply(deviations, deviations, out=deviations)
    return np.sqrt(np.add.reduce(deviations, axis=None) / count)


def _levels_in_place(values01: np.ndarray, out: np.ndarray) -> None:
    """:func:`_to_uint8` of a float64 work array clipped to [0, 1], into the uint8 ``out``
    (broadcast to its shape); ``values01`` is used up. The same operations, in place: a
    fresh array per step cost more than the arithmetic."""
    values01 *= 255.0
    values01 += 0.5
    np.floor(values01, out=values01)  # within [0, 255]: the cast is exact
    out[...] = values01


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


def _strips(shape: tuple) -> list[slice]:
    """Row slices of about :data:`STRIP_VALUES` values each (one slice for a small map)."""
    per_row = max(1, math.prod(shape[1:]))
    step = max(1, STRIP_VALUES // per_row)
    return [slice(top, top + step) for top in range(0, shape[0], step)]


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
    for rows in _strips(values.shape):
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
    ceiling = float(np.percentile(_as_float64(magnitudes, 0), clip, method="linear",
                                  overwrite_input=True))
    if ceiling <= 0.0:
        # A map that is zero above the clip percentile (very sparse) falls back to
        # its maximum, so its few non-zero pixels still show; an all-zero map stays 0.
        ceiling = float(magnitudes.max())
    gray = np.zeros(magnitudes.shape, dtype=np.uint8)
    if ceiling > 0.0:
        for rows in _strips(magnitudes.shape):
            work = _as_float64(magnitudes[rows], 0)
            work /= ceiling
            np.clip(work, 0.0, 1.0, out=work)
            _levels_in_place(work, gray[rows])
    return gray, max(ceiling, 0.0)


def _mean_std(values: np.ndarray, strips: list[slice], factor: float = 1.0
              ) -> tuple[float, float, np.ndarray | None]:
    """The mean of ``values * factor`` and the standard deviation of its difference from
    that mean, in float64; with one strip also that difference, ``values * factor -
    mean`` (float64, the caller's to reuse), else ``None``.

    One strip: numpy's own ``mean`` and ``std``. Several: the same sums, strip by strip.
    """
    def part(rows: slice) -> np.ndarray:
        scaled = _as_float64(values[rows], 0)
        scaled *= factor
        return scaled

    if len(strips) == 1:
        centred = part(strips[0])
        mean = centred.mean()
        centred -= mean
        return mean, _std(centred), centred
    count = values.size
    mean = sum(float(part(rows).sum()) for rows in strips) / count
    # numpy's std of the centred values subtracts their own (almost zero) mean too.
    centred_mean = sum(float((part(rows) - mean).sum()) for rows in strips) / count
    squares = sum(float(np.square(part(rows) - mean - centred_mean).sum()) for rows in strips)
    return mean, math.sqrt(squares / count), None


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
    strips = _strips(values.shape)
    rgb = np.empty((*values.shape[:2], 3), dtype=np.uint8)
    highest, lowest = float(values.max()), float(values.min())
    flat = highest == lowest
    if not flat:
        # No floor on the scale: a power of two (exact) brings the map near 1, so its
        # statistics neither underflow nor depend on its magnitude.
        unit = math.ldexp(1.0, -math.frexp(max(abs(highest), abs(lowest)))[1])
        mean, std, centred = _mean_std(values, strips, unit)
        flat = not std > 0.0
    if flat:
        # A constant map has no contrast; without this a float rounding residue in
        # x - mean would be divided by a ~0 std and blow up to black or white.
        rgb[...] = _to_uint8(np.float64(0.5))
        value = float(values.flat[0])
        return rgb, (value, value, value)
    for rows in strips:
        if centred is not None:  # one strip: the statistics' own work array
            scaled = centred
        else:
            scaled = _as_float64(values[rows], 0)
            scaled *= unit
            scaled -= mean
        scaled /= std
        scaled *= _COLOR_SCALE
        scaled += 0.5
        np.clip(scaled, 0.0, 1.0, out=scaled)
        _levels_in_place(scaled, rgb[rows])  # one channel is broadcast to three
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


def render_overlay(
    saliency: np.ndarray,
    image: np.ndarray,
    alpha: float = DEFAULT_ALPHA,
    cmap: str = DEFAULT_COLORMAP,
    clip: float = DEFAULT_CLIP,
) -> np.ndarray:
    """Blend the heatmap onto the original image.

    ``out = floor((1 - alpha) * image + alpha * heatmap + 0.5)`` per channel.

    Args:
        saliency: Real array of shape ``(H, W, 1)`` or ``(H, W, 3)``.
        image: ``uint8`` array of shape ``(H, W, 3)``, ``(H, W, 1)`` or ``(H, W)``,
            the same ``H`` and ``W`` as ``saliency``; gray is repeated to RGB.
        alpha: Heatmap weight in [0, 1]: 0 gives the image, 1 the heatmap.
        cmap: A name from :func:`guidedbp.render.colormap_names`.
        clip: Percentile in (0, 100] for the heatmap (see :func:`render_gray`).

    Returns:
        ``uint8`` array of shape ``(H, W, 3)``.

    Raises:
        ValueError: If ``image`` is not ``uint8``, has the wrong shape or a size
            other than the map's, or an argument is out of range.

    >>> saliency = np.array([[[0.0], [1.0]]])
    >>> image = np.full((1, 2, 3), 100, np.uint8)
    >>> render_overlay(saliency, image, alpha=0.5, cmap="gray", clip=100.0).tolist()
    [[[50, 50, 50], [178, 178, 178]]]
    """
    alpha = _check_alpha(alpha)
    return _blend(render_heatmap(saliency, cmap=cmap, clip=clip), image, alpha)


def _blend(heat: np.ndarray, image: np.ndarray, alpha: float) -> np.ndarray:
    """``image`` blended into the uint8 ``heat`` (H, W, 3), in place; returns ``heat``.

    Each pixel value is ``floor((1 - alpha) * image + alpha * heat + 0.5)`` in float64,
    looked up in :func:`_blend_table` (both operands are uint8: 65,536 pairs).
    """
    rgb = as_rgb(image, "image", heat.shape[:2])
    if rgb.shape[:2] != heat.shape[:2]:
        raise ValueError(
            f"image has size {rgb.shape[0]}x{rgb.shape[1]} (H x W) but the saliency map "
            f"has {heat.shape[0]}x{heat.shape[1]}; resize one to the other first")
    table = _blend_table(alpha)
    for rows in _strips(heat.shape):  # blended into the heatmap, strip by strip
        pairs = rgb[rows].astype(np.uint16)
        pairs <<= 8
        pairs |= heat[rows]
        np.take(table, pairs, out=heat[rows], mode="clip")  # "clip": no buffered copy
    return heat


@functools.lru_cache(maxsize=8)
def _blend_table(alpha: float) -> np.ndarray:
    """Every blend of two uint8 values, ``(1 - alpha) * image + alpha * heat`` rounded half
    up, at index ``image * 256 + heat``: the float64 operations of a per-pixel blend, once
    per pair."""
    image = np.repeat(np.arange(256, dtype=np.float64), 256)
    heat = np.tile(np.arange(256, dtype=np.float64), 256)
    blended = (1.0 - alpha) * image
    blended += alpha * heat
    table = np.clip(np.floor(blended + 0.5), 0, 255).astype(np.uint8)
    table.flags.writeable = False  # shared by every caller through the cache
    return table


def render_signed_overlay(
    saliency: np.ndarray,
    image: np.ndarray,
    alpha: float = DEFAULT_ALPHA,
    clip: float = DEFAULT_CLIP,
) -> np.ndarray:
    """Lay a signed map over the image: red where it is positive, blue where negative.

    As SHAP draws attributions, over the image in grey (so that no colour of the photo
    reads as a sign): the map's value ``v`` (summed over channels) becomes
    ``t = clip(v / c, -1, 1)``, where ``c`` is the ``clip`` percentile of ``|v|`` (its
    maximum if that is 0), and each channel of a pixel is ``floor((1 - w) * grey + w *
    colour + 0.5)`` with ``grey = 0.299 R + 0.587 G + 0.114 B`` of the image,
    ``w = alpha * |t|`` and ``colour`` :data:`POSITIVE_COLOR` or :data:`NEGATIVE_COLOR`.
    Where the map is 0 the image shows (in grey), so a coarse map (occlusion,
    KernelSHAP, LIME) reads as places on the photo, and its sign stays.

    Args:
        saliency: Real array of shape ``(H, W, 1)`` or ``(H, W, 3)``.
        image: ``uint8`` picture of the same ``H`` and ``W`` (see :func:`render_overlay`).
        alpha: The colour's weight where ``|v| >= c``, in [0, 1].
        clip: Percentile in (0, 100] of ``|v|`` that gets the full weight.

    Returns:
        ``uint8`` array of shape ``(H, W, 3)``.

    Raises:
        ValueError: If ``image`` is not ``uint8``, has the wrong shape or a size other
            than the map's, or an argument is out of range.

    >>> saliency = np.array([[[2.0], [0.0], [-1.0]]])
    >>> image = np.full((1, 3, 3), 100, np.uint8)
    >>> render_signed_overlay(saliency, image, alpha=1.0, clip=100.0).tolist()
    [[[255, 0, 81], [100, 100, 100], [50, 120, 176]]]
    >>> render_signed_overlay(saliency, np.full((1, 3, 3), (200, 0, 0), np.uint8),
    ...                       clip=100.0)[0, 1].tolist()  # red shows as its grey
    [60, 60, 60]
    """
    return _signed_overlay_and_ceiling(saliency, image, alpha, clip)[0]


def _signed_overlay_and_ceiling(saliency: np.ndarray, image: np.ndarray, alpha: float,
                                clip: float) -> tuple[np.ndarray, float]:
    """:func:`render_signed_overlay` and ``c``, the value given the full weight (0.0 for
    an all-zero map)."""
    alpha, clip = _check_alpha(alpha), _check_clip(clip)
    values = _check_saliency(saliency)
    rgb = as_rgb(image, "image", values.shape[:2])
    if rgb.shape[:2] != values.shape[:2]:
        raise ValueError(
            f"image has size {rgb.shape[0]}x{rgb.shape[1]} (H x W) but the saliency map "
            f"has {values.shape[0]}x{values.shape[1]}; resize one to the other first")
    strips = _strips(values.shape)
    magnitudes = np.empty(values.shape[:2])  # |v| in float64: one map, not its sums too
    for rows in strips:
        np.abs(values[rows].sum(axis=2, dtype=np.float64), out=magnitudes[rows])
    ceiling = float(np.percentile(magnitudes, clip, method="linear"))
    if ceiling <= 0.0:  # a sparse map: its maximum, as render_gray does
        ceiling = float(magnitudes.max())
    out = np.empty_like(rgb)
    divisor = ceiling if ceiling > 0.0 else 1.0  # an all-zero map: the grey image
    for rows in strips:
        weight = np.minimum(magnitudes[rows] / divisor, 1.0)[:, :, np.newaxis] * alpha
        positive = values[rows].sum(axis=2, dtype=np.float64)[:, :, np.newaxis] > 0
        colour = np.where(positive, POSITIVE_COLOR, NEGATIVE_COLOR)
        channels = rgb[rows].astype(np.float64)  # elementwise: the same sums on every CPU
        grey = channels[:, :, 0] * 0.299 + channels[:, :, 1] * 0.587 + channels[:, :, 2] * 0.114
        blended = grey[:, :, np.newaxis] * (1.0 - weight) + colour * weight
        out[rows] = np.clip(np.floor(blended + 0.5), 0, 255)
    return out, ceiling
