"""The figures of :mod:`guidedbp.plot`: a result's picture and maps checked, and drawn as
rows of axes (the picture, then one column per method, each map with its colorbar).
Imports no matplotlib until asked."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from guidedbp.engine.methods import method
from guidedbp.errors import ArgumentError
from guidedbp.plot._common import FONT_SIZE, freeze_layout, positive
from guidedbp.render.colormaps import COLORMAPS, colormap_lut
from guidedbp.render.options import OUTPUT_SIZES
from guidedbp.render.panel import _as_rgb

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: The diverging colormap of signed maps (matplotlib's; red is positive).
SIGNED_COLORMAP = "RdBu_r"

_PICTURE_TITLE = "image"


@dataclass(frozen=True)
class _Row:
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


def _check_figsize(figsize) -> None:
    if figsize is not None and not (isinstance(figsize, (tuple, list)) and len(figsize) == 2
                                    and all(positive(side) for side in figsize)):
        raise ArgumentError(f"figsize={figsize!r} must be (width, height) in inches, "
                            "both positive")


def _picture_and_maps(result, size: str, what: str = "result"):
    """The picture and the maps of ``result`` at ``size`` (``"original"`` or ``"model"``)."""
    if size not in OUTPUT_SIZES:
        raise ArgumentError(f"size={size!r} is not one of {', '.join(OUTPUT_SIZES)}")
    missing = [name for name in ("image", "fitted", "maps", "original_maps", "target",
                                 "probability", "label") if not hasattr(result, name)]
    if missing:
        raise ArgumentError(f"{what} must be what guidedbp.explain_image returns; a "
                            f"{type(result).__name__} has no {', '.join(missing)}")
    if size == "original":
        return result.image, result.original_maps()
    return result.fitted, result.maps


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


def _fit_picture(picture, columns: list[_Column]) -> np.ndarray:
    """The picture as RGB at the maps' size (reduced when it is larger, same aspect)."""
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
    return rgb


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
    return _grid([_Row(rgb, columns)], title, sequential, figsize)


def _grid(rows: list[_Row], title: str | None, sequential,
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

