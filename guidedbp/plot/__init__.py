"""Explanations as matplotlib figures, for notebooks and papers (the ``plot`` extra).

A figure shows the picture, then one column per method, each with its own colorbar:

- a *signed* map (a gradient: the method's record has ``signed=True``) is summed over
  its channels and drawn with the diverging :data:`SIGNED_COLORMAP`, white at zero,
  between ``-v`` and ``+v``, where ``v`` is the ``clip`` percentile of its absolute value;
- a *magnitude* map (a class activation map such as ``gradcam``) is ``max_c |map|``,
  as the ``gray``, ``heatmap`` and ``overlay`` renders take it, drawn with ``cmap`` (the
  same 256-entry table as those renders) between 0 and its ``clip`` percentile.

If the percentile is 0 (a very sparse map), the maximum is used, as the renders do;
there is no other floor, so a map of values near ``1e-14`` is drawn as the same map at 1.
The suptitle is the panel's caption, e.g. ``"circle (class 0) p=0.998"`` (``" · gradcam
at conv_1"`` after it: the class activation maps' layer, where the result names it), followed by
one line per caveat of the result (``"\u26a0 guided = plain gradient: the model has no
guided activation"``; see :mod:`guidedbp.caveats`).

:func:`compare` draws several results as a grid, one row per image or class and one
column per method, each row as :func:`plot` draws it.

:func:`plot_curves` draws an image's deletion or insertion curves (one line per
method, its AUC in the legend), as ``guidedbp evaluate --plot-curves`` writes them.

Figures are :class:`matplotlib.figure.Figure` objects made without pyplot: no global
state, no GUI backend, and a notebook shows one as it shows any figure.
:func:`figure_bytes` writes PDF, SVG or PNG identically on every run, each marked as
guidedbp's (:func:`is_own_figure` recognises the mark without importing matplotlib).

The package's parts: :mod:`guidedbp.plot.curves` (the games' curves) and ``_results``
(what a figure reads from a result). Drawing pictures and maps and writing figure files
live in :mod:`guidedbp.figures`, which the pipeline shares (``explain --figure``);
:func:`draw`, :func:`figure_bytes` and the rest are re-exported here.

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

from collections.abc import Sequence
from typing import TYPE_CHECKING

from guidedbp.errors import ArgumentError
from guidedbp.figures import (
    FIGURE_FORMATS,
    INSTALL_HINT,
    SIGNED_COLORMAP,
    PlotUnavailable,
    draw,
    figure_bytes,
    is_own_figure,
    is_whole_figure,
    require_matplotlib,
)
from guidedbp.figures.draw import (
    Row,
    build_figure,
    check_clip,
    check_figsize,
    draw_grid,
    fit_picture,
    map_column,
    sequential_colormap,
)
from guidedbp.plot._results import _caption, _picture_and_maps, _select
from guidedbp.plot.curves import plot_curves
from guidedbp.render.colormaps import DEFAULT_COLORMAP
from guidedbp.render.maps import DEFAULT_CLIP

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
    "compare",
    "plot",
    "plot_curves",
    "require_matplotlib",
]


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
    check_figsize(figsize)
    picture, maps = _picture_and_maps(result, size)
    maps = _select(maps, methods)
    caveats = [caveat.line for caveat in getattr(result, "caveats", ())
               if any(caveat.concerns(name) for name in maps)]
    return build_figure(picture, maps, _caption(result, maps), cmap, clip, 3.0,
                        None if figsize is None else tuple(float(side) for side in figsize),
                        caveats)


def compare(
    results: Sequence,
    *,
    methods: str | Sequence[str] | None = None,
    cmap: str = DEFAULT_COLORMAP,
    clip: float = DEFAULT_CLIP,
    size: str = "original",
    title: str | None = None,
    figsize: tuple[float, float] | None = None,
) -> Figure:
    """Draw several explanations as a grid: one row per result, one column per method.

    Each row is what :func:`plot` draws for that result (the same picture, the same
    values and colour limits for each map, each map with its own colorbar): the
    results may be of several images, or of one image for several classes
    (``explain_image(..., target=...)`` once per class). The method names title the
    top row; each row's picture is labelled, on its left, with the image's file name
    and the class explained with its probability, and, under it, with the result's
    caveats.

    Args:
        results: What :func:`guidedbp.explain_image` returns, one per row (duck-typed
            as for :func:`plot`).
        methods: The columns, in order (``"guided,gradcam"`` or a sequence); ``None``:
            the methods of the results, which must then hold the same ones.
        cmap, clip, size: As for :func:`plot`.
        title: The figure's title (suptitle); ``None``: none.
        figsize: ``(width, height)`` in inches; ``None`` sizes columns 3 inches wide.

    Returns:
        A :class:`matplotlib.figure.Figure` whose first ``len(results) * (1 + methods)``
        axes are the grid, row by row (picture, then each method); the colorbars are
        insets of their maps.

    Raises:
        PlotUnavailable: Without matplotlib.
        ArgumentError: No results, a result without maps or without one of
            ``methods``, results with different methods (and ``methods=None``), or a
            bad ``size``, ``cmap``, ``clip`` or ``figsize``.

    >>> import guidedbp
    >>> circle = "sample_images/shapes/circle_0.png"
    >>> results = [guidedbp.explain_image("demo", circle, target=name,
    ...                                   methods="guided,gradcam")
    ...            for name in ("circle", "square")]  # doctest: +SKIP
    >>> figure = compare(results)  # doctest: +SKIP
    >>> [axis.get_title() for axis in figure.axes[:3]]  # doctest: +SKIP
    ['image', 'guided', 'gradcam']
    """
    require_matplotlib()
    check_figsize(figsize)
    if title is not None and not isinstance(title, str):
        raise ArgumentError(f"title must be a string or None, got {type(title).__name__}")
    if hasattr(results, "maps"):  # one result: a grid of one row
        results = [results]
    if isinstance(results, (str, bytes)) or not isinstance(results, Sequence) or not results:
        raise ArgumentError(f"results must be a non-empty sequence of what "
                            f"guidedbp.explain_image returns, got {results!r:.60}")
    clip = check_clip(clip)
    sequential = sequential_colormap(cmap)
    rows = []
    for index, result in enumerate(results):
        picture, maps = _picture_and_maps(result, size, f"results[{index}]")
        try:
            maps = _select(maps, methods)
        except ArgumentError as error:
            raise ArgumentError(f"results[{index}]: {error}") from None
        if rows and list(maps) != [column.name for column in rows[0].columns]:
            raise ArgumentError(
                f"results[{index}] holds the methods {', '.join(maps)}, results[0] "
                f"{', '.join(column.name for column in rows[0].columns)}: choose the "
                "columns with methods=")
        columns = [map_column(name, values, clip) for name, values in maps.items()]
        rows.append(Row(fit_picture(picture, columns), columns, _row_label(result, maps),
                        _caveat_lines(result, maps)))
    if figsize is None:
        count = len(rows[0].columns)
        figsize = (3.0 * (1 + count) + 0.6 * count + 0.4,
                   sum(3.0 * min(row.picture.shape[0] / row.picture.shape[1], 3.0) + 0.8
                       for row in rows) + (0.4 if title else 0.0))
    else:
        figsize = tuple(float(side) for side in figsize)
    return draw_grid(rows, title, sequential, figsize)


def _row_label(result, maps=()) -> str:
    """``"circle_0.png\ncircle (class 0) p=0.998"``: the file (when the result has a
    ``path``) and the caption (with the layer of the class activation maps among
    ``maps``)."""
    import os

    path = getattr(result, "path", None)
    caption = _caption(result, maps)
    return f"{os.path.basename(os.fspath(path))}\n{caption}" if path else caption


def _caveat_lines(result, maps) -> str:
    """The result's caveats that concern ``maps``, wrapped to a column's width."""
    import textwrap

    lines = [caveat.line for caveat in getattr(result, "caveats", ())
             if any(caveat.concerns(name) for name in maps)]
    return "\n".join(wrapped for line in lines
                     for wrapped in textwrap.wrap(f"\u26a0 {line}", 36))
