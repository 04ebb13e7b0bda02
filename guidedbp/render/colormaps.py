"""Colormaps as 256-entry lookup tables shipped with the package.

Each colormap is a ``uint8`` array of shape ``(256, 3)`` in
``guidedbp/render/data/colormaps.npz``; entry 0 is the colour of 0.0 and entry
255 the colour of 1.0. A value ``v`` in [0, 1] takes entry ``floor(v * 255 + 0.5)``
(round to nearest, halves up): exact indexing, no interpolation.

Sources and licences (details and the verbatim notices in ``data/SOURCES.md``):

- ``inferno``, ``viridis``, ``magma``, ``plasma``: Nathaniel J. Smith,
  Stéfan van der Walt and Eric Firing, from matplotlib's ``_cm_listed.py``;
  CC0 1.0 (public domain dedication).
- ``cividis``: Nuñez, Anderton and Renslow (PNNL), PLoS ONE 13(7), 2018, from
  matplotlib's ``_cm_listed.py``; BSD-style licence, (c) 2017 Battelle
  Memorial Institute.
- ``turbo``: Anton Mikhailov, Google, 2019; Apache-2.0, (c) 2019 Google LLC.
  Identical to Google's published ``turbo_srgb_bytes`` table.
- ``gray``: the identity ramp, made here.

The tables are read on first use and cached; importing this module reads no file.

>>> import numpy as np
>>> from guidedbp.render import apply_colormap, colormap_lut
>>> colormap_lut("viridis")[0].tolist()
[68, 1, 84]
>>> apply_colormap(np.array([[0.0, 1.0]]), "gray").tolist()
[[[0, 0, 0], [255, 255, 255]]]
"""

from __future__ import annotations

import functools
import io
from importlib import resources

import numpy as np

from guidedbp._text import did_you_mean

__all__ = ["COLORMAPS", "DEFAULT_COLORMAP", "apply_colormap", "colormap_lut", "colormap_names"]

#: Names of the shipped colormaps, in the order the CLI lists them.
COLORMAPS = ("inferno", "viridis", "magma", "plasma", "cividis", "gray", "turbo")

#: A perceptually uniform map that reads well on screen and in grayscale print.
DEFAULT_COLORMAP = "inferno"

_DATA_FILE = "colormaps.npz"


def colormap_names() -> tuple[str, ...]:
    """Return the names accepted wherever a colormap is asked for.

    Returns:
        The names in :data:`COLORMAPS`, in the same order.
    """
    return COLORMAPS


@functools.lru_cache(maxsize=1)
def _load_tables() -> dict[str, np.ndarray]:
    payload = resources.files("guidedbp.render").joinpath("data", _DATA_FILE).read_bytes()
    with np.load(io.BytesIO(payload), allow_pickle=False) as archive:
        tables = {name: np.array(archive[name], dtype=np.uint8) for name in archive.files}
    for name, table in tables.items():
        if table.shape != (256, 3):
            raise ValueError(f"colormap {name!r} in {_DATA_FILE} has shape {table.shape}, "
                             "expected (256, 3)")
        table.flags.writeable = False  # shared by every caller through the cache
    return tables


def _table(name: str) -> np.ndarray:
    if name not in COLORMAPS:
        hint = did_you_mean(name, COLORMAPS)
        raise ValueError(f"unknown colormap {name!r}{f' ({hint})' if hint else ''}; expected "
                         f"one of: {', '.join(COLORMAPS)}")
    tables = _load_tables()
    if name not in tables:  # only if the data file and COLORMAPS disagree
        raise ValueError(f"colormap {name!r} is missing from {_DATA_FILE}")
    return tables[name]


def colormap_lut(name: str = DEFAULT_COLORMAP) -> np.ndarray:
    """Return a colormap's lookup table.

    Args:
        name: One of :func:`colormap_names`.

    Returns:
        A new ``uint8`` array of shape ``(256, 3)``; row ``i`` is the sRGB colour
        of the value ``i / 255``.

    Raises:
        ValueError: If ``name`` is not a known colormap.
    """
    return _table(name).copy()


def apply_colormap(values01: np.ndarray, cmap: str = DEFAULT_COLORMAP) -> np.ndarray:
    """Colour a 2-D array of values in [0, 1].

    Args:
        values01: Real array of shape ``(H, W)`` with every value in [0, 1].
        cmap: One of :func:`colormap_names`.

    Returns:
        ``uint8`` array of shape ``(H, W, 3)``: pixel ``(y, x)`` is entry
        ``floor(values01[y, x] * 255 + 0.5)`` of the table.

    Raises:
        ValueError: If ``cmap`` is unknown, ``values01`` is not 2-D and real,
            or holds a value outside [0, 1] (NaN included).

    >>> apply_colormap(np.array([[0.0, 0.5]]), "inferno")[0, 0].tolist()
    [0, 0, 4]
    """
    table = _table(cmap)
    values = np.asarray(values01)
    if values.ndim != 2:
        raise ValueError(f"values01 must have shape (H, W), got shape {values.shape}")
    if values.dtype.kind not in "biuf":
        raise ValueError(f"values01 must be a real array, got dtype {values.dtype}")
    values = values.astype(np.float64, copy=False)
    if values.size and not (np.all(values >= 0.0) and np.all(values <= 1.0)):
        bad = values[~((values >= 0.0) & (values <= 1.0))].flat[0]
        raise ValueError(f"values01 must lie in [0, 1], got a value {bad!r}")
    index = np.floor(values * 255.0 + 0.5).astype(np.intp)
    return table[index]
