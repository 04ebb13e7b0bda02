"""Matplotlib figures of pictures and maps, and the files they are written to.

:func:`~guidedbp.figures.draw.draw` draws a picture and its maps, each with a
colorbar; :func:`~guidedbp.figures.files.figure_bytes` writes a figure as PDF, SVG or
PNG, the same bytes on every run and marked as guidedbp's
(:func:`~guidedbp.figures.files.is_own_figure` recognises the mark without matplotlib).

A room below the pipeline and the clients, beside ``render`` and ``io``: the pipeline
writes figures (``explain --figure``) and :mod:`guidedbp.plot` draws them for
notebooks, and neither imports the other. ``render`` stays numpy and Pillow only:
matplotlib (the ``plot`` extra) is imported here, and only inside the functions that
draw, so ``import guidedbp.figures`` works without it (:class:`PlotUnavailable` then).
"""

from guidedbp.figures.common import INSTALL_HINT, PlotUnavailable, require_matplotlib
from guidedbp.figures.draw import SIGNED_COLORMAP, draw
from guidedbp.figures.files import FIGURE_FORMATS, figure_bytes, is_own_figure, is_whole_figure

__all__ = [
    "FIGURE_FORMATS",
    "INSTALL_HINT",
    "SIGNED_COLORMAP",
    "PlotUnavailable",
    "draw",
    "figure_bytes",
    "is_own_figure",
    "is_whole_figure",
    "require_matplotlib",
]
