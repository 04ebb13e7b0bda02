"""Lay pictures side by side with titles: one RGB image per explanation.

Pure numpy and Pillow. Text uses Pillow's built-in bitmap font, so a panel has
the same pixels on every machine (no font files, no FreeType, no network).

>>> import numpy as np
>>> from guidedbp.render import PANEL_GAP, render_panel
>>> panel = render_panel([("a", np.zeros((8, 5), np.uint8)), ("b", np.zeros((8, 7), np.uint8))])
>>> panel.shape[1] == 5 + PANEL_GAP + 7
True
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageFont

__all__ = ["PANEL_GAP", "render_panel"]

#: White pixels between two panel columns.
PANEL_GAP = 4

_TEXT_PAD = 2  # pixels above and below a line of panel text
_WHITE = (255, 255, 255)
_BLACK = (0, 0, 0)


def _as_rgb(image: np.ndarray, what: str, size: tuple[int, int] | None = None) -> np.ndarray:
    """Validate a uint8 picture of shape (H, W), (H, W, 1) or (H, W, 3); return (H, W, 3).

    With ``size``, a larger picture that scales down to exactly ``size`` (the same
    aspect, rounded as ``guidedbp.models.preprocess.shown_size`` does: a picture above
    the maps' size cap) is first reduced to it, bilinearly; any other size is returned
    as it is, for the caller to refuse.
    """
    array = np.asarray(image)
    if array.dtype != np.uint8:
        raise ValueError(f"{what} must have dtype uint8, got {array.dtype}")
    if array.ndim == 2:
        array = array[:, :, np.newaxis]
    if array.ndim != 3 or array.shape[2] not in (1, 3):
        raise ValueError(
            f"{what} must have shape (H, W), (H, W, 1) or (H, W, 3), got shape {array.shape}")
    if array.shape[0] == 0 or array.shape[1] == 0:
        raise ValueError(f"{what} must not be empty, got shape {array.shape}")
    if size is not None and _scales_down_to(array.shape[:2], size):
        # Before grey is made RGB, channel by channel (Pillow would hold an RGB picture
        # at 4 bytes a pixel; each band is resampled alike either way).
        reduced = np.empty((size[0], size[1], array.shape[2]), dtype=np.uint8)
        for channel in range(array.shape[2]):
            plane = Image.fromarray(np.ascontiguousarray(array[:, :, channel]))
            reduced[:, :, channel] = plane.resize((size[1], size[0]), Image.Resampling.BILINEAR)
        array = reduced
    if array.shape[2] == 1:
        array = np.repeat(array, 3, axis=2)
    return array


def _scales_down_to(picture: tuple[int, int], size: tuple[int, int]) -> bool:
    """Whether ``picture`` (H, W) is larger than ``size`` and scales down to it exactly."""
    longer, side = max(picture), max(size)
    if side >= longer:
        return False
    scaled = tuple(max(1, round(length * side / longer)) for length in picture)
    return scaled == tuple(size)


@functools.lru_cache(maxsize=1)
def _font() -> ImageFont.ImageFont:
    # Pillow's built-in bitmap font: no FreeType, no files, no network, so the
    # same text gives the same pixels on every machine. (load_default() returns
    # a FreeType font from Pillow 10.1 on, whose pixels depend on the FreeType
    # build.) Before 10.1 load_default() is this same bitmap font.
    loader = getattr(ImageFont, "load_default_imagefont", None)
    return loader() if loader is not None else ImageFont.load_default()


def _text_row_height() -> int:
    return int(_font().getbbox("Agjpqy|")[3]) + 2 * _TEXT_PAD


def _printable(text: str) -> str:
    # The bitmap font covers Latin-1 only; other characters become '?' and
    # control characters (newlines included) become spaces, keeping one line.
    text = "".join(ch if ch.isprintable() else " " for ch in text)
    return text.encode("latin-1", "replace").decode("latin-1")


def _fit(text: str, width: int) -> str:
    """Shorten ``text`` with a trailing '...' until it fits in ``width`` pixels."""
    font = _font()
    if font.getlength(text) <= width:
        return text
    while text and font.getlength(text + "...") > width:
        text = text[:-1]
    return text + "..." if font.getlength(text + "...") <= width else ""


def _text_cell(text: str, width: int) -> Image.Image:
    """One row of centred black text on white, exactly ``width`` pixels wide."""
    cell = Image.new("RGB", (width, _text_row_height()), _WHITE)
    text = _fit(_printable(text), width)
    if text:
        left = (width - math.ceil(_font().getlength(text))) // 2
        ImageDraw.Draw(cell).text((left, _TEXT_PAD), text, fill=_BLACK, font=_font())
    return cell


def render_panel(
    columns: Sequence[tuple[str, np.ndarray]], caption: str | None = None
) -> np.ndarray:
    """Lay pictures side by side on white, each titled underneath.

    Layout, top to bottom: the caption row (only if ``caption`` is non-empty),
    the pictures separated by :data:`PANEL_GAP` white pixels, the title row
    (only if some title is non-empty). Each text row is one line of Pillow's
    built-in bitmap font plus 2 pixels above and below, centred and cut short
    with "..." when it is wider than its column (titles) or the panel (caption).

    Args:
        columns: ``(title, picture)`` pairs, left to right; each picture is
            ``uint8`` of shape ``(H, W)``, ``(H, W, 1)`` or ``(H, W, 3)``, all of
            the same ``H`` (widths may differ).
        caption: Optional line above the pictures, e.g. ``"tabby (class 281) p=0.873"``.

    Returns:
        ``uint8`` array of shape ``(rows + H, sum(W) + PANEL_GAP * (n - 1), 3)``,
        where ``rows`` is the height of the text rows present.

    Raises:
        ValueError: If ``columns`` is empty, an item is not a pair, a picture is
            not ``uint8`` of a valid shape, or the heights differ.
        TypeError: If a title or the caption is not a string.

    >>> panel = render_panel([("a", np.zeros((8, 5), np.uint8)), ("b", np.zeros((8, 7), np.uint8))])
    >>> panel.shape[1] == 5 + PANEL_GAP + 7
    True
    """
    if caption is not None and not isinstance(caption, str):
        raise TypeError(f"caption must be a string or None, got {type(caption).__name__}")
    prepared: list[tuple[str, np.ndarray]] = []
    for index, item in enumerate(columns):
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise ValueError(f"columns[{index}] must be a (title, picture) pair, got {item!r:.60}")
        title, picture = item
        if not isinstance(title, str):
            raise TypeError(f"columns[{index}] title must be a string, got {type(title).__name__}")
        prepared.append((title, _as_rgb(picture, f"columns[{index}] picture ({title!r})")))
    if not prepared:
        raise ValueError("columns must hold at least one (title, picture) pair, got none")
    heights = [picture.shape[0] for _, picture in prepared]
    if len(set(heights)) != 1:
        raise ValueError(f"all panel pictures must have the same height, got heights {heights}")

    height = heights[0]
    row = _text_row_height()
    top = row if caption else 0
    has_titles = any(title for title, _ in prepared)
    width = sum(picture.shape[1] for _, picture in prepared) + PANEL_GAP * (len(prepared) - 1)
    # Composed in numpy (pasting RGB onto RGB is a copy): one array of the panel's size,
    # where a Pillow canvas would hold it twice over while it is turned into an array.
    canvas = np.full((top + height + (row if has_titles else 0), width, 3), 255, np.uint8)
    if caption:
        canvas[:row] = np.asarray(_text_cell(caption, width))
    left = 0
    for title, picture in prepared:
        right = left + picture.shape[1]
        canvas[top:top + height, left:right] = picture
        if has_titles:
            canvas[top + height:, left:right] = np.asarray(_text_cell(title, picture.shape[1]))
        left = right + PANEL_GAP
    return canvas
