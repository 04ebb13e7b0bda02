"""The renders laid over the photograph: the heatmap blended in, and a signed map in red and
blue (see :mod:`guidedbp.render.maps` for the renders of the map alone and the rules
every render keeps: uint8 out, the same bytes everywhere, memory bounded by strips).

>>> import numpy as np
>>> render_overlay(np.zeros((1, 1, 1)), np.full((1, 1, 3), 200, np.uint8), cmap="gray",
...                alpha=0.5).tolist()
[[[100, 100, 100]]]
"""

from __future__ import annotations

import functools

import numpy as np

from guidedbp.render.colormaps import DEFAULT_COLORMAP
from guidedbp.render.maps import (
    DEFAULT_ALPHA,
    DEFAULT_CLIP,
    _check_alpha,
    _check_clip,
    _check_saliency,
    render_heatmap,
)
from guidedbp.render.panel import as_rgb
from guidedbp.render.strips import row_strips

__all__ = ["NEGATIVE_COLOR", "POSITIVE_COLOR", "render_overlay", "render_signed_overlay"]

#: The signed overlay's colour of positive values (raising the score), and of negative
#: ones: SHAP's red and blue (``shap.plots.colors.red_rgb``, ``blue_rgb``).
POSITIVE_COLOR = (255, 0, 81)
NEGATIVE_COLOR = (0, 139, 251)


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
    for rows in row_strips(heat.shape):  # blended into the heatmap, strip by strip
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
    strips = row_strips(values.shape)
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
