"""The picture of a failed map comparison: baseline | current | |difference|.

What ``guidedbp check --baseline`` and the pytest plugin's ``saliency_regression`` write
for a map that drifted from its baseline. Pure numpy and Pillow, like the panels.

>>> import numpy as np
>>> stored = np.zeros((4, 4, 1)); stored[0, 0] = 1.0
>>> moved = np.zeros((4, 4, 1)); moved[3, 3] = 1.0
>>> difference_levels(stored, moved)[[0, 3, 1], [0, 3, 1]].tolist()
[255, 255, 0]
"""

from __future__ import annotations

import numpy as np

from guidedbp.render.colormaps import DEFAULT_COLORMAP, colormap_lut
from guidedbp.render.columns import render_column
from guidedbp.render.maps import render_gray
from guidedbp.render.panel import DEFAULT_TILE, Column, Scale, render_panel

__all__ = ["DIFF_COLUMNS", "difference_levels", "render_difference"]

#: What the three columns of a diff picture are, for messages that point at one.
DIFF_COLUMNS = "baseline | current | |difference|"


def _as_map(values, what: str) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim == 2:
        array = array[:, :, np.newaxis]
    if array.ndim != 3 or array.shape[2] not in (1, 3):
        raise ValueError(f"{what} must have shape (H, W), (H, W, 1) or (H, W, 3), got "
                         f"shape {np.shape(values)}")
    return array


def difference_levels(baseline, current) -> np.ndarray:
    """``|gray(baseline) - gray(current)|``, ``uint8`` ``(H, W)``.

    Both maps are first drawn as the ``gray`` render normalises them (0..255 up to
    their 99th percentile of magnitude), so the difference does not depend on the maps'
    scales: a map that only grew ten times has no difference.

    Raises:
        ValueError: For maps of other shapes than ``(H, W)``, ``(H, W, 1)`` or
            ``(H, W, 3)``, of different sizes, or that ``render_gray`` refuses (NaN).
    """
    stored, now = _as_map(baseline, "baseline"), _as_map(current, "current")
    if stored.shape[:2] != now.shape[:2]:
        raise ValueError(f"the maps differ in size: baseline {stored.shape[:2]}, "
                         f"current {now.shape[:2]}")
    return np.abs(render_gray(stored).astype(np.int16)
                  - render_gray(now).astype(np.int16)).astype(np.uint8)


def render_difference(baseline, current, *, explained: str = "", caption: str | None = None,
                      cmap: str = DEFAULT_COLORMAP, tile: int | None = DEFAULT_TILE) -> np.ndarray:
    """A panel of three columns: the baseline's and the current map's ``heatmap``
    (with their colorbars), and :func:`difference_levels` drawn with the same colormap
    from 0 (no change) to 1 (the whole range).

    Args:
        baseline, current: Real maps of one size, ``(H, W)``, ``(H, W, 1)`` or
            ``(H, W, 3)`` (magnitudes or signed maps: both are drawn by magnitude).
        explained: What the maps explain, e.g. ``"class 0 (circle)"``: added to the
            first two titles (``"baseline: class 0 (circle)"``).
        caption: Text above the panel.
        cmap: Colormap of the three columns.
        tile: Panel tile size (see :func:`~guidedbp.render.render_panel`).

    Returns:
        ``uint8`` RGB picture.

    Raises:
        ValueError: As :func:`difference_levels`, or for a bad ``cmap`` or ``tile``.
    """
    levels = difference_levels(baseline, current)
    table = colormap_lut(cmap)
    suffix = f": {explained}" if explained else ""
    return render_panel([
        render_column("heatmap", _as_map(baseline, "baseline"), title=f"baseline{suffix}",
                      cmap=cmap),
        render_column("heatmap", _as_map(current, "current"), title=f"current{suffix}",
                      cmap=cmap),
        Column("|difference|", table[levels], Scale(table, ("0", "1"))),
    ], caption=caption, tile=tile)
