"""What every part of :mod:`guidedbp.figures` shares: matplotlib's presence, the font size,
a frozen layout and argument checks. Imports no matplotlib until asked."""

from __future__ import annotations

import numpy as np

from guidedbp._extras import install
from guidedbp.errors import GuidedbpError

#: What to run when matplotlib is missing.
INSTALL_HINT = install("plot")
FONT_SIZE = 10.0
_LAYOUT_PASSES = 3  # constrained layout settles within these (colorbar ticks may move once)


class PlotUnavailable(GuidedbpError):
    """Figures were asked for, but matplotlib cannot be imported."""


def require_matplotlib() -> None:
    """Import matplotlib, or say how to install it.

    Raises:
        PlotUnavailable: One line with the install command, when matplotlib cannot be
            imported.

    >>> require_matplotlib()  # with the plot extra installed
    """
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PlotUnavailable(f"figures need matplotlib: {INSTALL_HINT}") from None


def positive(value) -> bool:
    """Whether ``value`` is a finite real number above 0 (not a bool)."""
    return (isinstance(value, (int, float, np.integer, np.floating))
            and not isinstance(value, (bool, np.bool_)) and 0 < float(value) < float("inf"))


def freeze_layout(figure) -> None:
    """Lay the figure out now, then keep that layout.

    Constrained layout starts from the axes' current positions, so a figure saved twice
    would move by a hair between the saves (and its files would differ). Laid out here,
    a few times over, then fixed, every save and every format draws the same positions.
    """
    for _ in range(_LAYOUT_PASSES):
        figure.draw_without_rendering()
    figure.set_layout_engine("none")
