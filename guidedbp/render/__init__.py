"""Render saliency maps as pictures; numpy and Pillow only, never TensorFlow.

Every function takes a saliency map of shape ``(H, W, 1)`` or ``(H, W, 3)``
(and, for overlays and panels, the original ``uint8`` image of the same size)
and returns a ``uint8`` array ready to save. The same input gives the same
pixels on every run and machine. See :mod:`guidedbp.render.maps` for the
renders of the map alone, :mod:`guidedbp.render.overlays` for those over the image,
:mod:`guidedbp.render.strips` for the float64 work in strips of rows that keeps
their memory bounded, :mod:`guidedbp.render.columns` for renders by name and as panel
columns with their scales, :mod:`guidedbp.render.panel` for panels and
:mod:`guidedbp.render.colormaps` for the colormaps and their sources and
licences.

>>> import numpy as np
>>> from guidedbp.render import DEFAULT_RENDERS, render
>>> DEFAULT_RENDERS
('color', 'overlay')
>>> render("color", np.zeros((2, 2, 3), np.float32)).shape
(2, 2, 3)
"""

from guidedbp.render.colormaps import (
    COLORMAPS,
    DEFAULT_COLORMAP,
    apply_colormap,
    colormap_lut,
    colormap_names,
)
from guidedbp.render.columns import COLUMN_RENDERS, render, render_column
from guidedbp.render.maps import (
    DEFAULT_ALPHA,
    DEFAULT_CLIP,
    DEFAULT_RENDERS,
    RENDERS,
    magnitude,
    render_color,
    render_gray,
    render_heatmap,
)
from guidedbp.render.marks import MATCHED_BOX, TARGET_BOX
from guidedbp.render.overlays import render_overlay, render_signed_overlay
from guidedbp.render.panel import (
    DEFAULT_TILE,
    MAX_TILE,
    MIN_TILE,
    PANEL_COLUMNS,
    PANEL_GAP,
    PANEL_MARGIN,
    PANEL_ROW_GAP,
    Box,
    Column,
    Scale,
    render_panel,
)

#: The version of the pictures' drawing, a small integer bumped when a release changes
#: how a map or panel is drawn (layout, colours, captions): part of each manifest record's
#: ``made_by``, so ``--skip-existing`` redraws what an earlier version drew.
DRAWING_VERSION = 1

__all__ = [
    "DRAWING_VERSION",
    "COLORMAPS",
    "COLUMN_RENDERS",
    "DEFAULT_ALPHA",
    "DEFAULT_CLIP",
    "DEFAULT_COLORMAP",
    "DEFAULT_RENDERS",
    "DEFAULT_TILE",
    "MAX_TILE",
    "MIN_TILE",
    "PANEL_COLUMNS",
    "PANEL_GAP",
    "PANEL_MARGIN",
    "PANEL_ROW_GAP",
    "MATCHED_BOX",
    "TARGET_BOX",
    "Box",
    "Column",
    "Scale",
    "RENDERS",
    "apply_colormap",
    "colormap_lut",
    "colormap_names",
    "magnitude",
    "render",
    "render_color",
    "render_gray",
    "render_column",
    "render_heatmap",
    "render_overlay",
    "render_panel",
    "render_signed_overlay",
]
