"""Explanations as matplotlib figures, for notebooks and papers (the ``plot`` extra).

A figure shows the picture, then one column per method, each with its own colorbar:

- a *signed* map (a gradient: the method's record has ``signed=True``) is summed over
  its channels and drawn with the diverging :data:`SIGNED_COLORMAP`, white at zero,
  between ``-v`` and ``+v``, where ``v`` is the ``clip`` percentile of its absolute value;
- a *magnitude* map (a class activation map such as ``gradcam``) is ``max_c |map|``,
  as the ``gray``, ``heatmap`` and ``overlay`` renders take it, drawn with ``cmap`` (the
  same 256-entry table as those renders) between 0 and its ``clip`` percentile.

If the percentile is 0 (a very sparse map), the maximum is used, as the renders do.
The suptitle is the panel's caption, e.g. ``"circle (class 0) p=0.998"``.

:func:`plot_curves` draws an image's deletion or insertion curves (one line per
method, its AUC in the legend), as ``guidedbp evaluate --plot-curves`` writes them.

Figures are :class:`matplotlib.figure.Figure` objects made without pyplot: no global
state, no GUI backend, and a notebook shows one as it shows any figure.
:func:`figure_bytes` writes PDF, SVG or PNG identically on every run, each marked as
guidedbp's (:func:`is_own_figure` recognises the mark without importing matplotlib).

The package's parts: :mod:`guidedbp.plot.files` (figure files), :mod:`guidedbp.plot.curves`
(the games' curves); what they share is in ``_common``.

matplotlib is imported only inside the functions that draw, so ``import guidedbp.plot``
works without it; drawing without it raises :class:`PlotUnavailable`.

>>> import guidedbp, guidedbp.plot
>>> result = guidedbp.explain_image("demo", "sample_images/shapes/circle_0.png",
...                                 methods="guided,gradcam")  # doctest: +SKIP
>>> figure = guidedbp.plot.plot(result)  # doctest: +SKIP
>>> figure.axes[0].get_title(), figure.axes[1].get_title()  # doctest: +SKIP
('image', 'guided')
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from guidedbp.engine.methods import method
from guidedbp.errors import ArgumentError
from guidedbp.plot._common import (
    FONT_SIZE,
    INSTALL_HINT,
    PlotUnavailable,
    freeze_layout,
    positive,
    require_matplotlib,
)
from guidedbp.plot.curves import plot_curves
from guidedbp.plot.files import FIGURE_FORMATS, figure_bytes, is_own_figure, is_whole_figure
from guidedbp.render.colormaps import COLORMAPS, DEFAULT_COLORMAP, colormap_lut
from guidedbp.render.maps import DEFAULT_CLIP
from guidedbp.render.options import OUTPUT_SIZES
from guidedbp.render.panel import _as_rgb

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "FIGURE_FORMATS",
    "INSTALL_HINT",
    "SIGNED_COLORMAP",
    "PlotUnavailable",
    "draw",
    "figure_bytes",
    "is_own_figure",
    "is_whole_figure",
    "plot",
    "plot_curves",
    "require_matplotlib",
]

#: The diverging colormap of signed maps (matplotlib's; red is positive).
SIGNED_COLORMAP = "RdBu_r"
_PICTURE_TITLE = "image"


@dataclass(frozen=True)
class _Column:
    """One method's column: the 2-D array drawn and how it is scaled."""

    name: str
    values: np.ndarray  # (H, W) float64
    signed: bool
    limit: float  # the colour scale's top; a signed one also goes down to -limit
    channels: int  # how many channels were reduced to one

    @property
    def note(self) -> str:
        """What the column shows, in a few words (written under it)."""
        if self.signed:
            return "gradient, sum over channels" if self.channels > 1 else "gradient"
        return "magnitude, max |\u00b7| over channels" if self.channels > 1 else "magnitude"


def plot(
    result,
    *,
    methods: str | Sequence[str] | None = None,
    cmap: str = DEFAULT_COLORMAP,
    clip: float = DEFAULT_CLIP,
    size: str = "original",
    figsize: tuple[float, float] | None = None,
) -> Figure:
    """Draw one image's explanation: the picture, then a column per method.

    Args:
        result: What :func:`guidedbp.explain_image` returns (any object with ``image``,
            ``fitted``, ``maps``, ``original_maps()``, ``target``, ``label`` and
            ``probability`` will do).
        methods: The methods to show, in order (``"guided,gradcam"`` or a sequence);
            ``None`` shows all of the result's.
        cmap: Colormap of magnitude maps, one of :data:`guidedbp.render.COLORMAPS`.
        clip: Percentile in (0, 100] of each map's absolute value that ends its colour
            scale (see the module docstring).
        size: ``"original"`` (the picture at its own size, maps mapped back onto it)
            or ``"model"`` (the picture as the model saw it, maps as computed).
        figsize: ``(width, height)`` in inches; ``None`` sizes columns 3 inches wide.

    Returns:
        The figure (see :func:`draw`).

    Raises:
        PlotUnavailable: Without matplotlib.
        ArgumentError: A result without maps, a method it does not hold, a bad
            ``size``, ``cmap``, ``clip`` or ``figsize``.

    >>> import guidedbp
    >>> result = guidedbp.explain_image("demo", "sample_images/shapes/circle_0.png",
    ...                                 methods="guided,gradcam")  # doctest: +SKIP
    >>> plot(result).get_suptitle()  # doctest: +SKIP
    'circle (class 0) p=1.000'
    """
    require_matplotlib()
    if size not in OUTPUT_SIZES:
        raise ArgumentError(f"size={size!r} is not one of {', '.join(OUTPUT_SIZES)}")
    if figsize is not None and not (isinstance(figsize, (tuple, list)) and len(figsize) == 2
                                    and all(positive(side) for side in figsize)):
        raise ArgumentError(f"figsize={figsize!r} must be (width, height) in inches, "
                            "both positive")
    missing = [name for name in ("image", "fitted", "maps", "original_maps", "target",
                                 "probability", "label") if not hasattr(result, name)]
    if missing:
        raise ArgumentError(f"result must be what guidedbp.explain_image returns; a "
                            f"{type(result).__name__} has no {', '.join(missing)}")
    if size == "original":
        picture, maps = result.image, result.original_maps()
    else:
        picture, maps = result.fitted, result.maps
    return _draw(picture, _select(maps, methods), _caption(result), cmap, clip, 3.0,
                 None if figsize is None else tuple(float(side) for side in figsize))


def _select(maps: Mapping[str, np.ndarray], methods) -> dict[str, np.ndarray]:
    if methods is None:
        return dict(maps)
    names = methods.split(",") if isinstance(methods, str) else list(methods)
    names = [str(name).strip() for name in names if str(name).strip()]
    unknown = [name for name in names if name not in maps]
    if unknown or not names:
        raise ArgumentError(f"methods={methods!r}: choose from the result's methods, "
                            f"{', '.join(maps) or 'none'}")
    return {name: maps[name] for name in dict.fromkeys(names)}


def _caption(result) -> str:
    """The panel's caption: ``"circle (class 0) p=0.998"``, or ``"class 3 p=0.500"``."""
    target, label = int(result.target), result.label
    named_class = f"{label} (class {target})" if label else f"class {target}"
    return f"{named_class} p={float(result.probability):.3f}"


def draw(
    picture: np.ndarray,
    maps: Mapping[str, np.ndarray],
    title: str,
    *,
    cmap: str = DEFAULT_COLORMAP,
    clip: float = DEFAULT_CLIP,
    column_width: float = 3.0,
) -> Figure:
    """Draw a picture and its maps side by side, each map with a colorbar.

    Signed maps (gradients) of several channels are summed over the channels: one
    signed value per pixel, positive where raising the pixel's channels together
    raises the class score. Magnitude maps are ``max_c |map|``. See the module
    docstring for the colours and limits.

    Args:
        picture: ``uint8`` ``(H, W)``, ``(H, W, 1)`` or ``(H, W, 3)``; a larger picture
            of the same aspect that scales down to exactly ``(H, W)`` is reduced first
            (as the PNG renders do for maps capped at the largest shown size).
        maps: Method name -> real, finite map of shape ``(H, W)``, ``(H, W, 1)`` or
            ``(H, W, 3)``, left to right. Names are those of
            :data:`guidedbp.METHODS`: their records say which maps are signed.
        title: The figure's title (the suptitle).
        cmap: Colormap of magnitude maps, one of :data:`guidedbp.render.COLORMAPS`.
        clip: Percentile in (0, 100] of each map's absolute value that ends its scale.
        column_width: Width of each column in inches.

    Returns:
        A :class:`matplotlib.figure.Figure` whose ``axes`` are ``1 + len(maps)`` image
        axes: the picture titled ``"image"``, then each map titled with its method's
        name, its colorbar inset at its right (``axis.images[0].colorbar``). The layout
        is computed once and then fixed, so that every save draws the same positions.

    Raises:
        PlotUnavailable: Without matplotlib.
        ArgumentError: An unknown method, an empty ``maps``, a map or picture of the
            wrong shape, dtype or size, or a bad ``cmap``, ``clip``, ``column_width``.

    >>> import numpy as np
    >>> figure = draw(np.zeros((4, 4), np.uint8),
    ...               {"gradcam": np.arange(16.0).reshape(4, 4, 1)}, "class 0 p=1.000")
    >>> [axis.get_title() for axis in figure.axes[:2]], figure.get_suptitle()
    (['image', 'gradcam'], 'class 0 p=1.000')
    """
    require_matplotlib()
    return _draw(picture, maps, title, cmap, clip, column_width, None)


def _draw(picture, maps, title, cmap, clip, column_width, figsize) -> Figure:
    """:func:`draw`, checking its arguments; ``figsize`` replaces the one made of
    ``column_width``."""
    clip = _check_clip(clip)
    if not isinstance(title, str):
        raise ArgumentError(f"title must be a string, got {type(title).__name__}")
    if not positive(column_width):
        raise ArgumentError(f"column_width={column_width!r} must be a positive number "
                            "of inches")
    if not isinstance(maps, Mapping) or not maps:
        raise ArgumentError(f"maps must map method names to maps, got {maps!r:.60}")
    sequential = _sequential_colormap(cmap)
    columns = [_column(name, values, clip) for name, values in maps.items()]
    sizes = {column.values.shape for column in columns}
    if len(sizes) != 1:
        raise ArgumentError("maps must all have the same size, got " + ", ".join(
            f"{column.name} {column.values.shape[0]}x{column.values.shape[1]}"
            for column in columns))
    (size,) = sizes
    try:
        rgb = _as_rgb(picture, "picture", size)
    except ValueError as error:
        raise ArgumentError(str(error)) from None
    if rgb.shape[:2] != size:
        raise ArgumentError(f"picture has size {rgb.shape[0]}x{rgb.shape[1]} (H x W) but the "
                            f"maps have {size[0]}x{size[1]}; resize one to the other first")
    if figsize is None:
        height, width = size
        # Each column has the picture's aspect, plus room for titles and colorbar ticks.
        figsize = (column_width * (1 + len(columns)) + 0.6 * len(columns),
                   column_width * min(height / width, 3.0) + 0.7)
    return _figure(rgb, columns, title, sequential, figsize)


def _check_clip(clip) -> float:
    if not positive(clip) or float(clip) > 100.0:
        raise ArgumentError(f"clip={clip!r} must be a percentile in (0, 100]")
    return float(clip)


def _sequential_colormap(cmap):
    """guidedbp's own table for ``cmap``, so figures match the PNG renders' colours."""
    from matplotlib.colors import ListedColormap

    if not isinstance(cmap, str) or cmap not in COLORMAPS:
        raise ArgumentError(f"cmap={cmap!r} is not one of {', '.join(COLORMAPS)}")
    return ListedColormap(colormap_lut(cmap) / 255.0, name=cmap)


def _column(name: str, values, clip: float) -> _Column:
    signed = method(name).signed  # an unknown name raises, listing the known ones
    array = np.asarray(values)
    if array.ndim == 2:
        array = array[:, :, np.newaxis]
    if array.ndim != 3 or array.shape[2] not in (1, 3) or 0 in array.shape:
        raise ArgumentError(f"maps[{name!r}] must have shape (H, W), (H, W, 1) or (H, W, 3), "
                            f"got shape {np.shape(values)}")
    if array.dtype.kind not in "biuf":
        raise ArgumentError(f"maps[{name!r}] must be a real array, got dtype {array.dtype}")
    array = array.astype(np.float64)
    if not np.all(np.isfinite(array)):
        raise ArgumentError(f"maps[{name!r}] must be finite, got NaN or infinite values")
    drawn = array.sum(axis=2) if signed else np.abs(array).max(axis=2)
    return _Column(name, drawn, signed, _limit(np.abs(drawn), clip), array.shape[2])


def _limit(magnitudes: np.ndarray, clip: float) -> float:
    """The ``clip`` percentile of ``magnitudes``; their maximum where that is 0 (as the
    renders do), and 1 for an all-zero map (any scale shows it)."""
    limit = float(np.percentile(magnitudes, clip, method="linear"))
    if limit <= 0.0:
        limit = float(magnitudes.max())
    return limit if limit > 0.0 else 1.0


def _figure(rgb: np.ndarray, columns: list[_Column], title: str, sequential,
            figsize: tuple[float, float]) -> Figure:
    import matplotlib.style
    from matplotlib.colors import Normalize
    from matplotlib.figure import Figure

    # The library's defaults, not the notebook's style: a figure looks (and saves) the
    # same in every session.
    with matplotlib.style.context("default"), matplotlib.rc_context({"font.size": FONT_SIZE}):
        figure = Figure(figsize=figsize, layout="constrained")
        figure.get_layout_engine().set(w_pad=0.04, h_pad=0.04, wspace=0.06)
        axes = figure.subplots(1, 1 + len(columns), squeeze=False)[0]
        _show(axes[0], rgb, _PICTURE_TITLE)
        bars = []
        for axis, column in zip(axes[1:], columns):
            if column.signed:
                norm = Normalize(vmin=-column.limit, vmax=column.limit)
                colormap = SIGNED_COLORMAP
            else:
                norm = Normalize(vmin=0.0, vmax=column.limit)
                colormap = sequential
            image = _show(axis, column.values, column.name, cmap=colormap, norm=norm)
            bars.append((axis, image, column))
        for axis, image, column in bars:
            _colorbar(figure, axis, image, column)
        figure.suptitle(title, fontsize=FONT_SIZE + 2)
        freeze_layout(figure)
    return figure


def _show(axis, values: np.ndarray, title: str, **style):
    image = axis.imshow(values, **style)
    axis.set_title(title)
    axis.set_xticks([])
    axis.set_yticks([])
    return image


def _colorbar(figure, axis, image, column: _Column) -> None:
    low, high = image.norm.vmin, image.norm.vmax
    below = column.signed and float(column.values.min()) < low
    above = float(column.values.max()) > high
    extend = {(True, True): "both", (True, False): "min", (False, True): "max"}.get(
        (below, above), "neither")
    # An inset beside the picture is exactly as tall as it, whatever the aspect.
    holder = axis.inset_axes([1.04, 0.0, 0.06, 1.0])
    bar = figure.colorbar(image, cax=holder, extend=extend)
    bar.ax.tick_params(labelsize=FONT_SIZE - 2)
    bar.formatter.set_powerlimits((-2, 3))
    # Under the map, not along the bar: a wide picture's bar is too short for words.
    axis.set_xlabel(column.note, fontsize=FONT_SIZE - 1)
