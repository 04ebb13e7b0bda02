"""Figure files: :func:`figure_bytes` writes PDF, SVG and PNG the same on every run, each
marked as guidedbp's; :func:`is_own_figure` and :func:`is_whole_figure` read a file's ends
(no matplotlib needed)."""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING

import numpy as np

from guidedbp.errors import ArgumentError
from guidedbp.figures.common import require_matplotlib
from guidedbp.io import store
from guidedbp.io.write import encode_png, is_own_png, is_whole_png

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: The formats :func:`figure_bytes` writes: two vector ones, then PNG.
FIGURE_FORMATS = ("pdf", "svg", "png")

#: The mark every figure carries in its metadata (PNG: guidedbp.io.write's own mark).
_MARK = "guidedbp"
_PDF_MARK = b"/Creator (" + _MARK.encode()
_SVG_MARK = b"<dc:title>" + _MARK.encode() + b"</dc:title>"
_HEAD_READ = 8192  # an SVG's metadata sits right after its <svg> element
_TAIL_READ = 16384  # a PDF's Info dictionary sits just before its cross-reference table
_SVG_SALT = "guidedbp"  # fixed ids in SVG output; matplotlib draws random ones otherwise


def figure_bytes(figure: Figure, format: str, dpi: int = 150) -> bytes:
    """A figure as a PDF, SVG or PNG file's bytes, the same bytes on every run.

    PDF and SVG are vector files: pictures and maps (and each colorbar's colour ramp)
    are embedded as images; text, axes, ticks and frames are vectors, and text stays
    text (TrueType in PDF, ``<text>`` in SVG).
    Every file carries guidedbp's mark (PDF ``Creator`` and ``Producer``, SVG creator,
    PNG ``Software``) and no date, so :func:`is_own_figure` can tell it from a user's.

    Args:
        figure: A figure from :func:`~guidedbp.plot.draw` or :func:`~guidedbp.plot.plot`
            (any figure works).
        format: One of :data:`FIGURE_FORMATS`.
        dpi: Resolution of PNG output and of the images inside PDF and SVG.

    Returns:
        The file's bytes.

    Raises:
        PlotUnavailable: Without matplotlib.
        ArgumentError: An unknown ``format`` or a bad ``dpi``.

    >>> from guidedbp.figures import draw
    >>> figure = draw(np.zeros((4, 4), np.uint8), {"guided": np.ones((4, 4, 3))}, "")
    >>> figure_bytes(figure, "pdf")[:5], figure_bytes(figure, "png")[1:4]
    (b'%PDF-', b'PNG')
    """
    require_matplotlib()
    import io

    import matplotlib

    if format not in FIGURE_FORMATS:
        raise ArgumentError(f"format={format!r} is not one of {', '.join(FIGURE_FORMATS)}")
    if isinstance(dpi, (bool, np.bool_)) or not isinstance(dpi, (int, np.integer)) or dpi <= 0:
        raise ArgumentError(f"dpi={dpi!r} must be a positive whole number")
    metadata = {
        "pdf": {"Creator": _MARK, "Producer": f"{_MARK} (matplotlib {matplotlib.__version__})",
                "CreationDate": None, "ModDate": None},
        "svg": {"Creator": _MARK, "Date": None},
        "png": None,  # rendered by matplotlib, then written as guidedbp writes its PNGs
    }[format]
    settings = {"svg.hashsalt": _SVG_SALT, "svg.fonttype": "none", "pdf.fonttype": 42,
                "pdf.compression": 6, "savefig.facecolor": "white",
                "savefig.edgecolor": "white", "savefig.transparent": False}
    buffer = io.BytesIO()
    with matplotlib.rc_context(settings):
        figure.savefig(buffer, format=format, dpi=int(dpi), metadata=metadata)
    if format != "png":
        return buffer.getvalue()
    from PIL import Image

    with Image.open(io.BytesIO(buffer.getvalue())) as image:
        rgb = np.asarray(image.convert("RGB"))
    return encode_png(rgb)


def is_own_figure(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a whole figure file that guidedbp wrote (PDF, SVG or PNG).

    True only for a regular file, not a link to one, that carries guidedbp's mark
    (:func:`figure_bytes`) and is complete: a PDF from ``%PDF`` to ``%%EOF``, an SVG
    ending in ``</svg>``, a PNG ending in its IEND chunk. Reads the file's first and
    last few kilobytes; needs no matplotlib.

    >>> import tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "figure.pdf")
    >>> with open(path, "wb") as handle:
    ...     _ = handle.write(b"%PDF-1.4 not a figure")
    >>> is_own_figure(path), is_own_figure(path + ".missing")
    (False, False)
    """
    return all(_figure_state(path))


def is_whole_figure(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a complete PDF, SVG or PNG regular file, whoever wrote it (a
    file guidedbp listed that is no longer whole is its own, damaged)."""
    return _figure_state(path)[0]


def _figure_state(path) -> tuple[bool, bool]:
    """``(whole, marked)`` of a figure file; both False for anything else."""
    try:
        if store.is_url(path):
            found = store.head_and_tail(path, _HEAD_READ, _TAIL_READ)
            if found is None:
                return False, False
            head, tail, _ = found
        else:
            if not stat.S_ISREG(os.lstat(path).st_mode):
                return False, False
            with open(path, "rb") as handle:
                head = handle.read(_HEAD_READ)
                size = handle.seek(0, os.SEEK_END)
                handle.seek(max(0, size - _TAIL_READ))
                tail = handle.read(_TAIL_READ)
    except (OSError, TypeError, ValueError):
        return False, False
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return is_whole_png(path), is_own_png(path)
    ending = tail.rstrip(b"\r\n")
    if head.startswith(b"%PDF-"):
        return ending.endswith(b"%%EOF"), _PDF_MARK in tail
    if head.lstrip().startswith((b"<?xml", b"<svg")):
        return ending.endswith(b"</svg>"), _SVG_MARK in head
    return False, False
