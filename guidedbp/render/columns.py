"""Renders by name, and as the columns of a panel with the scales that say what their
colours mean: :func:`render` (one of :data:`~guidedbp.render.maps.RENDERS`, the ``panel``
included) and :func:`render_column`. Pure numpy and Pillow, as :mod:`.maps` is.

The ``color`` render's scale shows its own colours: a map of one channel is grey from
black to white; a map of three channels has a stripe per channel (red, green, blue: that
channel from its lowest to its highest level, the others at mid-grey), the colours its
pixels take where one channel stands out. Its legend says what lighter and darker mean.

>>> import numpy as np
>>> column = render_column("color", np.array([[[-1.0], [1.0]]]))
>>> column.picture[0, :, 0].tolist(), column.scale.legend
([102, 153], 'lighter than grey raises the score, darker lowers it')
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from guidedbp._text import did_you_mean
from guidedbp.render.colormaps import DEFAULT_COLORMAP, colormap_lut
from guidedbp.render.maps import (
    DEFAULT_ALPHA,
    DEFAULT_CLIP,
    RENDERS,
    _check_alpha,
    _check_clip,
    _color_and_range,
    _gray_and_ceiling,
    render_color,
    render_gray,
    render_heatmap,
)
from guidedbp.render.marks import _boxed
from guidedbp.render.overlays import (
    NEGATIVE_COLOR,
    POSITIVE_COLOR,
    _blend,
    _signed_overlay_and_ceiling,
    render_overlay,
)
from guidedbp.render.panel import DEFAULT_TILE, Column, Scale, as_rgb, render_panel

__all__ = ["COLUMN_RENDERS", "color_scale", "render", "render_column", "signed_colors"]

#: What :func:`render_column` draws: the renders but ``panel``, and ``signed-overlay``
#: (:func:`~guidedbp.render.overlays.render_signed_overlay`, for a comparison panel's coarse
#: signed maps).
COLUMN_RENDERS = ("color", "gray", "heatmap", "overlay", "signed-overlay")

#: The legends of the colour scales: what lighter and darker mean, and the hues of a
#: map of three channels (a hue: one channel stands out).
COLOR_LEGEND = "lighter than grey raises the score, darker lowers it"
OFF_CENTRE_LEGEND = "lighter than grey: above the map's mean, darker: below it"
HUES_LEGEND = "; channel by channel, red, green, blue {} and cyan, magenta, yellow {}"
SIGNED_LEGEND = "on the image in grey: red raises the score, blue lowers it"


def render(
    name: str,
    saliency: np.ndarray,
    image: np.ndarray | None = None,
    *,
    cmap: str = DEFAULT_COLORMAP,
    clip: float = DEFAULT_CLIP,
    alpha: float = DEFAULT_ALPHA,
    caption: str | None = None,
    tile: int | None = DEFAULT_TILE,
    caveats: Sequence[str] = (),
    outline: np.ndarray | None = None,
    reference: np.ndarray | None = None,
    boxes: Sequence = (),
) -> np.ndarray:
    """Make one of :data:`RENDERS` by name.

    ``panel`` shows ``original`` (when ``image`` is given), ``reference`` (when given),
    ``color``, ``gray`` and ``overlay`` (when ``image`` is given) side by side in tiles
    of ``tile`` pixels, with ``caption`` above and a colorbar under each map
    (:func:`~guidedbp.render.render_panel`).

    Args:
        name: One of :data:`RENDERS`.
        saliency: Real array of shape ``(H, W, 1)`` or ``(H, W, 3)``.
        image: ``uint8`` picture of the same ``H`` and ``W``; required by
            ``overlay``, optional for ``panel``, ignored otherwise.
        cmap: Colormap for ``heatmap``, ``overlay`` and ``panel``.
        clip: Magnitude percentile for ``gray``, ``heatmap``, ``overlay``, ``panel``.
        alpha: Heatmap weight for ``overlay`` and ``panel``.
        caption: Caption for ``panel``; ignored otherwise.
        caveats: Lines drawn under the caption of a ``panel`` (see
            :func:`~guidedbp.render.render_panel`); ignored otherwise.
        tile: Tile size for ``panel`` (``None``: the map's own size); ignored otherwise.
        outline: For ``panel``: a region, bool ``(H, W)`` of the map's size, outlined on
            the original (:class:`~guidedbp.render.Column`); ignored otherwise.
        reference: For ``panel``: a ``uint8`` picture of height ``H`` (what a similarity
            compares with), shown after the original; ignored otherwise.
        boxes: :class:`~guidedbp.render.Box` items in the map's pixels, drawn over the
            render (for ``panel``: over the original and each map), a ``gray`` render
            then made RGB.

    Returns:
        The render, ``uint8`` ``(H, W)`` for ``gray`` (RGB with ``boxes``) and RGB
        otherwise.

    Raises:
        ValueError: If ``name`` is unknown, ``overlay`` has no image, or any
            render function rejects its arguments.

    >>> render("gray", np.array([[[0.0], [4.0]]]), clip=100.0).tolist()
    [[0, 255]]
    """
    boxes = tuple(boxes)
    if name in ("color", "gray", "heatmap", "overlay"):
        if name == "color":
            picture = render_color(saliency)
        elif name == "gray":
            picture = render_gray(saliency, clip=clip)
        elif name == "heatmap":
            picture = render_heatmap(saliency, cmap=cmap, clip=clip)
        else:
            if image is None:
                raise ValueError("render 'overlay' needs the original image, got image=None")
            picture = render_overlay(saliency, image, alpha=alpha, cmap=cmap, clip=clip)
        return _boxed(as_rgb(picture, "render"), boxes) if boxes else picture
    if name == "panel":
        if image is not None:  # reduced once, if it is larger than the map
            image = as_rgb(image, "image", np.shape(saliency)[:2])
        columns = [Column("original", image, outline=outline, boxes=boxes)] \
            if image is not None else []
        if reference is not None:
            columns.append(Column("reference", reference))
        columns += [replace(render_column(name, saliency, image, cmap=cmap, clip=clip,
                                          alpha=alpha), boxes=boxes)
                    for name in ("color", "gray", "overlay") if image is not None or
                    name != "overlay"]
        return render_panel(columns, caption=caption, tile=tile, caveats=caveats)
    hint = did_you_mean(name, RENDERS)
    raise ValueError(f"unknown render {name!r}{f' ({hint})' if hint else ''}; expected one "
                     f"of: {', '.join(RENDERS)}")


def render_column(
    name: str,
    saliency: np.ndarray,
    image: np.ndarray | None = None,
    *,
    title: str | None = None,
    cmap: str = DEFAULT_COLORMAP,
    clip: float = DEFAULT_CLIP,
    alpha: float = DEFAULT_ALPHA,
) -> Column:
    """One render as a panel :class:`~guidedbp.render.panel.Column`, with its scale.

    The scale says which values the colours stand for: for ``color``, from the mean
    minus five standard deviations (black) through the mean (mid-grey) to the mean plus
    five (white), one stripe per channel of the map (see the module's docstring), with
    a legend; for ``gray``, ``heatmap`` and ``overlay``, the ramp or colormap from 0 to
    the ``clip`` percentile of the magnitude (and above); for ``signed-overlay``, blue
    through white to red, from minus to plus the ``clip`` percentile of ``|v|``
    (:func:`~guidedbp.render.overlays.render_signed_overlay`), with a legend.

    Args:
        name: One of :data:`COLUMN_RENDERS`.
        saliency, image, cmap, clip, alpha: As for :func:`render`.
        title: The column's title; default ``name``.

    Returns:
        A :class:`~guidedbp.render.panel.Column` whose picture is ``render(name, ...)``
        as RGB.

    >>> column = render_column("gray", np.array([[[0.0], [4.0]]]), clip=100.0)
    >>> column.picture[0, :, 0].tolist(), column.scale.labels
    ([0, 255], ('0', '4 (p100)'))
    """
    title = name if title is None else title
    if name == "color":
        picture, (low, mean, high) = _color_and_range(saliency)
        return Column(title, picture, color_scale(np.shape(saliency)[2], low, mean, high))
    if name == "signed-overlay":
        if image is None:
            raise ValueError("render 'signed-overlay' needs the original image, got image=None")
        picture, ceiling = _signed_overlay_and_ceiling(saliency, image, alpha, clip)
        top = f"{_number(ceiling)} (p{_number(_check_clip(clip))})"
        return Column(title, picture, Scale(signed_colors(), (
            _number(-ceiling), "0", top), SIGNED_LEGEND))
    if name not in ("gray", "heatmap", "overlay"):
        raise ValueError(f"render {name!r} has no column; expected one of: "
                         f"{', '.join(COLUMN_RENDERS)}")
    gray, ceiling = _gray_and_ceiling(saliency, clip)
    labels = ("0", f"{_number(ceiling)} (p{_number(_check_clip(clip))})")
    if name == "gray":
        return Column(title, np.repeat(gray[:, :, np.newaxis], 3, axis=2),
                      Scale(_grey_ramp(), labels))
    table = colormap_lut(cmap)
    if name == "heatmap":
        return Column(title, np.take(table, gray, axis=0), Scale(table, labels))
    if image is None:
        raise ValueError("render 'overlay' needs the original image, got image=None")
    # The heatmap of the levels already computed: the percentile is taken once.
    return Column(title, _blend(np.take(table, gray, axis=0), image, _check_alpha(alpha)),
                  Scale(table, labels))


def color_scale(channels: int, low: float, mean: float, high: float) -> Scale:
    """The scale of a ``color`` render of a map of ``channels`` channels whose black,
    mid-grey and white stand for ``low``, ``mean`` and ``high``.

    Its colours are the render's own: level ``i`` of a channel is entry ``i``. One
    channel: the grey ramp. Three: a stripe per channel, red, green and blue in turn,
    that channel at ``i`` and the two others at mid-grey (128, the mean), so its left
    ends are cyan, magenta and yellow and its right ends red, green and blue. The legend
    says that lighter raises the score only where the mean is about 0 (within a tenth of
    a standard deviation), as a gradient's is; otherwise that it is above the mean.

    >>> scale = color_scale(3, -5.0, 0.0, 5.0)
    >>> scale.colors.shape, scale.colors[1, 0].tolist(), scale.colors[1, 255].tolist()
    ((3, 256, 3), [128, 0, 128], [128, 255, 128])
    """
    labels = (_number(low), _number(mean), _number(high))
    centred = abs(mean) <= (high - mean) / 50  # 0.1 std: mid-grey within 3 levels of 0
    legend = COLOR_LEGEND if centred else OFF_CENTRE_LEGEND
    if channels == 1:
        return Scale(_grey_ramp(), labels, legend)
    stripes = np.full((3, 256, 3), 128, np.uint8)
    for channel in range(3):
        stripes[channel, :, channel] = np.arange(256)
    above, below = ("raise it", "lower it") if centred else ("above", "below")
    return Scale(stripes, labels, legend + HUES_LEGEND.format(above, below))


def signed_colors() -> np.ndarray:
    """The signed overlay's scale, ``(256, 3)``: its colours at their full weight over
    white, entry ``i`` for ``t = (2i - 255) / 255`` (blue at -1, white near 0, red at 1)."""
    weight = np.abs(np.arange(256, dtype=np.float64) * 2 - 255)[:, np.newaxis] / 255
    colour = np.where(np.arange(256)[:, np.newaxis] >= 128, POSITIVE_COLOR, NEGATIVE_COLOR)
    return np.floor(255 * (1 - weight) + colour * weight + 0.5).astype(np.uint8)


def _grey_ramp() -> np.ndarray:
    return np.repeat(np.arange(256, dtype=np.uint8)[:, np.newaxis], 3, axis=1)


def _number(value: float) -> str:
    """A tick label: three significant digits, no trailing zeros, no ``-0``."""
    text = f"{value:.3g}"
    return "0" if text in ("0", "-0") else text
