"""The regions KernelSHAP and LIME hide: the cells of a regular grid, or SLIC superpixels
(Achanta et al., 2012) from scikit-image, an optional dependency (the ``segments``
extra), imported only when asked for.
"""

from __future__ import annotations

import numpy as np

from guidedbp._extras import needs
from guidedbp.errors import ArgumentError

#: SLIC's compactness, on Lab colours (or other channels scaled to 0..100): scikit-image's
#: default, its advice for Lab images.
SLIC_COMPACTNESS = 10.0


def grid_cells(size: int, grid: int) -> np.ndarray:
    """The cell (0 to ``grid - 1``) of each of ``size`` pixels along a side: equal runs,
    the longer ones last when ``grid`` does not divide ``size``.

    >>> grid_cells(8, 3)
    array([0, 0, 0, 1, 1, 1, 2, 2])
    """
    return (np.arange(size) * grid) // size


def segments(height: int, width: int, grid: int) -> np.ndarray:
    """int ``(H, W)``: each pixel's superpixel, the cells of a ``grid`` x ``grid`` grid
    numbered row by row."""
    return grid_cells(height, grid)[:, None] * grid + grid_cells(width, grid)[None, :]


def require_slic():
    """scikit-image's ``slic``.

    Raises:
        ArgumentError: scikit-image is not installed (one line naming the extra).
    """
    try:
        from skimage.segmentation import slic
    except ImportError:
        raise ArgumentError(needs("segments='slic'", "segments")) from None
    return slic


def slic_segments(image: np.ndarray, count: int) -> np.ndarray:
    """int ``(H, W)``: ``image``'s SLIC superpixels (Achanta et al., 2012), about ``count``
    of them, numbered 0, 1, ... in order of their first pixel (row by row).

    ``image`` is in the model's input space, whatever its preprocessing: it is scaled
    to ``[0, 1]`` by its own minimum and maximum, then segmented in Lab colours when it
    has 3 channels (scikit-image's default), else on its channels scaled to ``0..100``,
    with compactness :data:`SLIC_COMPACTNESS`. Deterministic: SLIC starts from a regular
    grid of centres.
    """
    low, high = float(image.min()), float(image.max())
    scaled = (image.astype(np.float64) - low) / (high - low) if high > low \
        else np.zeros(image.shape, np.float64)
    lab = image.shape[-1] == 3
    slic = require_slic()
    labels = slic(scaled if lab else scaled * 100.0, n_segments=count,
                  compactness=SLIC_COMPACTNESS, start_label=0, channel_axis=-1,
                  convert2lab=lab)
    found, first = np.unique(labels, return_index=True)  # renumber by first pixel
    rank = np.empty(len(found), np.int64)
    rank[np.argsort(first)] = np.arange(len(found))
    return rank[np.searchsorted(found, labels)]
