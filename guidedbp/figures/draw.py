"""Pictures and maps drawn as matplotlib figures: :func:`draw` (one row), and the parts
:mod:`guidedbp.plot` assembles into grids (:class:`Row`, :func:`map_column`,
:func:`draw_grid`): the picture, then one column per method, each map with its
colorbar. Imports no matplotlib until asked."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from guidedbp.engine.methods.registry import method
from guidedbp.errors import ArgumentError
from guidedbp.figures.common import FONT_SIZE, freeze_layout, positive, require_matplotlib
from guidedbp.render.colormaps import COLORMAPS, DEFAULT_COLORMAP, colormap_lut
from guidedbp.render.maps import DEFAULT_CLIP
from guidedbp.render.panel import as_rgb

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: The diverging colormap of signed maps (matplotlib's; red is positive).
SIGNED_COLORMAP = "RdBu_r"

_PICTURE_TITLE = "image"


@dataclass(frozen=True)
class Row:
    """One row of a figure: the picture, its maps' columns and the words beside them."""

    picture: np.ndarray  # uint8 (H, W, 3)
    columns: list
    label: str = ""  # left of the picture
    note: str = ""  # under the picture: the caveats


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


def check_figsize(figsize) -> None:
    if figsize is not None and not (isinstance(figsize, (tuple, list)) and len(figsize) == 2
                                    and all(positive(side) for side in figsize)):
        raise ArgumentError(f"figsize={figsize!r} must be (width, height) in inches, "
                            "both positive")


def fit_picture(picture, columns: list[_Column]) -> np.ndarray:
    """The picture as RGB at the maps' size (reduced when it is larger, same aspect)."""
    sizes = {column.values.shape for column in columns}
    if len(sizes) != 1:
        raise ArgumentError("maps must all have the same size, got " + ", ".join(
            f"{column.name} {column.values.shape[0]}x{column.values.shape[1]}"
            for column in columns))
    (size,) = sizes
    try:
        rgb = as_rgb(picture, "picture", size)
    except ValueError as error:
        raise ArgumentError(str(error)) from None
    if rgb.shape[:2] != size:
        raise ArgumentError(f"picture has size {rgb.shape[0]}x{rgb.shape[1]} (H x W) but the "
                            f"maps have {size[0]}x{size[1]}; resize one to the other first")
    return rgb


def check_clip(clip) -> float:
    if not positive(clip) or float(clip) > 100.0:
        raise ArgumentError(f"clip={clip!r} must be a percentile in (0, 100]")
    return float(clip)


def sequential_colormap(cmap):
    """guidedbp's own table for ``cmap``, so figures match the PNG renders' colours."""
    from matplotlib.colors import ListedColormap

    if not isinstance(cmap, str) or cmap not in COLORMAPS:
        raise ArgumentError(f"cmap={cmap!r} is not one of {', '.join(COLORMAPS)}")
    return ListedColormap(colormap_lut(cmap) / 255.0, name=cmap)


def map_column(name: str, values, clip: float) -> _Column:
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
    return draw_grid([Row(rgb, columns)], title, sequential, figsize)


def draw_grid(rows: list[Row], title: str | None, sequential,
              figsize: tuple[float, float]) -> Figure:
    """The rows under one another; the titles on the top row only."""
    import matplotlib.style
    from matplotlib.figure import Figure

    # The library's defaults, not the notebook's style: a figure looks (and saves) the
    # same in every session.
    with matplotlib.style.context("default"), matplotlib.rc_context({"font.size": FONT_SIZE}):
        # "compressed": fixed-aspect pictures packed together, not spread over a figure
        # wider than they need (which left a blank gap between the columns).
        figure = Figure(figsize=figsize, layout="compressed")
        figure.get_layout_engine().set(w_pad=0.04, h_pad=0.04, wspace=0.06)
        grid = figure.subplots(len(rows), 1 + len(rows[0].columns), squeeze=False)
        bars = []
        for number, (row, axes) in enumerate(zip(rows, grid)):
            top = number == 0
            _show(axes[0], row.picture, _PICTURE_TITLE if top else "")
            axes[0].set_ylabel(row.label)
            axes[0].set_xlabel(row.note, fontsize=FONT_SIZE - 1)
            for axis, column in zip(axes[1:], row.columns):
                image = _show_map(axis, column, sequential, column.name if top else "")
                bars.append((axis, image, column))
        for axis, image, column in bars:
            _colorbar(figure, axis, image, column)
        if title is not None:
            figure.suptitle(title, fontsize=FONT_SIZE + 2)
        freeze_layout(figure)
    return figure


def _show_map(axis, column: _Column, sequential, title: str):
    """A map on ``axis``: signed ones diverging around 0, magnitudes from 0."""
    from matplotlib.colors import Normalize

    if column.signed:
        return _show(axis, column.values, title, cmap=SIGNED_COLORMAP,
                     norm=Normalize(vmin=-column.limit, vmax=column.limit))
    return _show(axis, column.values, title, cmap=sequential,
                 norm=Normalize(vmin=0.0, vmax=column.limit))


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


def draw(
    picture: np.ndarray,
    maps: Mapping[str, np.ndarray],
    title: str,
    *,
    cmap: str = DEFAULT_COLORMAP,
    clip: float = DEFAULT_CLIP,
    column_width: float = 3.0,
    caveats: Sequence[str] = (),
) -> Figure:
    """Draw a picture and its maps side by side, each map with a colorbar.

    Signed maps (gradients) of several channels are summed over the channels: one
    signed value per pixel, positive where raising the pixel's channels together
    raises the class score. Magnitude maps are ``max_c |map|``. See
    :mod:`guidedbp.plot` for the colours and limits.

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
        caveats: Sentences that make the maps less meaningful (a
            :attr:`guidedbp.caveats.Caveat.line` each), one line each under the title,
            after a warning sign.

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
    return build_figure(picture, maps, title, cmap, clip, column_width, None, caveats)


def build_figure(picture, maps, title, cmap, clip, column_width, figsize,
                 caveats=()) -> Figure:
    """:func:`draw` once matplotlib is known to be there, checking its arguments;
    ``figsize`` (inches, or None) replaces the one made of ``column_width``."""
    clip = check_clip(clip)
    if not isinstance(title, str):
        raise ArgumentError(f"title must be a string, got {type(title).__name__}")
    if isinstance(caveats, str) or not all(isinstance(line, str) for line in caveats):
        raise ArgumentError(f"caveats must be a sequence of strings, got {caveats!r:.60}")
    # Under the title, where a reader cannot miss them: the figure is not an ordinary one.
    title = "\n".join([title, *(f"\u26a0 {line}" for line in caveats)]).strip("\n")
    if not positive(column_width):
        raise ArgumentError(f"column_width={column_width!r} must be a positive number "
                            "of inches")
    if not isinstance(maps, Mapping) or not maps:
        raise ArgumentError(f"maps must map method names to maps, got {maps!r:.60}")
    sequential = sequential_colormap(cmap)
    columns = [map_column(name, values, clip) for name, values in maps.items()]
    rgb = fit_picture(picture, columns)
    size = rgb.shape[:2]
    if figsize is None:
        height, width = size
        # Each column has the picture's aspect, plus room for titles and colorbar ticks.
        figsize = (column_width * (1 + len(columns)) + 0.6 * len(columns),
                   column_width * min(height / width, 3.0) + 0.7 + 0.2 * len(caveats))
    return _figure(rgb, columns, title, sequential, figsize)
