"""Deletion and insertion curves as a figure: :func:`plot_curves`, as ``guidedbp evaluate
--plot-curves`` writes them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from guidedbp.curves import GAMES, auc, fractions
from guidedbp.errors import ArgumentError
from guidedbp.figures.common import FONT_SIZE, freeze_layout, positive, require_matplotlib

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: How each game's x axis is labelled.
_CURVE_AXES = {
    "deletion": "share of pixels deleted, most salient first",
    "insertion": "share of pixels inserted, most salient first",
}
_CURVE_MARKERS = 40  # curves with fewer points than this show a marker at each one


def plot_curves(
    curves: Mapping[str, np.ndarray],
    title: str,
    *,
    game: str = "deletion",
    figsize: tuple[float, float] = (7.5, 4.0),
) -> Figure:
    """Draw one image's deletion or insertion curves, a line per method.

    The x axis is the share of pixels perturbed (``0, 1/steps, ..., 1``), the y axis
    the explained class's probability; each legend entry gives the method's area under
    its curve (:func:`guidedbp.curves.auc`): lower is better for
    deletion, higher for insertion.

    Args:
        curves: Method name (any label) -> real, finite ``(steps + 1,)`` probabilities,
            all of one length, at least 2 points; drawn in this order.
        title: The axes' title (left-aligned), e.g. ``"cat.jpg: tabby (class 281)"``.
        game: ``"deletion"`` or ``"insertion"``: which game the curves are of.
        figsize: ``(width, height)`` in inches.

    Returns:
        A figure with one axes: a line per method, and a legend at its right
        (``axes.get_legend()``) that labels each ``"NAME  AUC 0.123"``.

    Raises:
        PlotUnavailable: Without matplotlib.
        ArgumentError: An empty ``curves``, curves of other shapes or lengths, a bad
            ``game``, ``title`` or ``figsize``.

    >>> figure = plot_curves({"guided": np.array([1.0, 0.5, 0.0]),
    ...                       "gradcam": np.array([1.0, 0.0, 0.0])}, "class 0")
    >>> [text.get_text() for text in figure.axes[0].get_legend().get_texts()]
    ['guided  AUC 0.500', 'gradcam  AUC 0.250']
    """
    require_matplotlib()
    if game not in GAMES:
        raise ArgumentError(f"game={game!r} is not one of {', '.join(GAMES)}")
    if not isinstance(title, str):
        raise ArgumentError(f"title must be a string, got {type(title).__name__}")
    if not (isinstance(figsize, (tuple, list)) and len(figsize) == 2
            and all(positive(side) for side in figsize)):
        raise ArgumentError(f"figsize={figsize!r} must be (width, height) in inches, "
                            "both positive")
    if not isinstance(curves, Mapping) or not curves:
        raise ArgumentError(f"curves must map method names to curves, got {curves!r:.60}")
    lines = {}
    for name, values in curves.items():
        try:
            area = auc(values)
        except ArgumentError as error:
            raise ArgumentError(f"curves[{name!r}]: {error}") from None
        lines[str(name)] = (np.asarray(values, np.float64), area)
    lengths = {len(values) for values, _ in lines.values()}
    if len(lengths) != 1:
        raise ArgumentError("curves must all have the same length, got " + ", ".join(
            f"{name} {len(values)}" for name, (values, _) in lines.items()))
    x = fractions(lengths.pop() - 1)
    return _curve_figure(x, lines, title, game, tuple(float(side) for side in figsize))


def _curve_figure(x: np.ndarray, lines: dict, title: str, game: str,
                  figsize: tuple[float, float]) -> Figure:
    import matplotlib.style
    from matplotlib.figure import Figure

    with matplotlib.style.context("default"), matplotlib.rc_context({"font.size": FONT_SIZE}):
        figure = Figure(figsize=figsize, layout="constrained")
        axis = figure.subplots()
        marker = "o" if len(x) < _CURVE_MARKERS else None
        for index, (name, (values, area)) in enumerate(lines.items()):
            # Ten colours, then the same colours dashed, then dotted.
            style = ("-", "--", ":", "-.")[index // 10 % 4]
            axis.plot(x, values, marker=marker, markersize=3.5, linewidth=1.6, linestyle=style,
                      label=f"{name}  AUC {area:.3f}")
        axis.set_xlim(-0.015, 1.015)  # room for the end markers
        axis.set_ylim(-0.02, 1.02)
        axis.set_xlabel(_CURVE_AXES[game])
        axis.set_ylabel("probability of the explained class")
        axis.grid(True, linewidth=0.5, alpha=0.4)
        better = "lower" if game == "deletion" else "higher"
        # From the left edge, so that a long title may run on above the legend.
        axis.set_title(title, loc="left")
        # Beside the axes, not on them: with many methods a legend inside hides curves.
        axis.legend(title=f"{game} ({better} AUC is better)", fontsize=FONT_SIZE - 1,
                    title_fontsize=FONT_SIZE - 1, loc="upper left",
                    bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
        freeze_layout(figure)
    return figure
