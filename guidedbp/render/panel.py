"""Lay pictures side by side in readable tiles: one RGB image per explanation.

Pure numpy and Pillow. Every picture is scaled to a tile (:data:`DEFAULT_TILE` px on
its longer side: a small picture is enlarged with nearest-neighbour, so its pixels stay
sharp squares; a large one is reduced by area averaging). Text is set in the TrueType
font Pillow ships (Aileron Regular), wrapped rather than cut, and a map that has a
scale gets a colorbar with its values underneath. The same input gives the same bytes
on every run.

>>> import numpy as np
>>> from guidedbp.render import PANEL_GAP, render_panel
>>> panel = render_panel([("a", np.zeros((8, 5), np.uint8)), ("b", np.zeros((8, 7), np.uint8))],
...                      tile=None)
>>> panel.shape[1] == 2 * PANEL_MARGIN + 5 + PANEL_GAP + 7
True
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw, ImageFont

__all__ = ["DEFAULT_TILE", "PANEL_GAP", "PANEL_MARGIN", "Column", "Scale", "as_rgb", "render_panel"]

#: Pixels on the longer side of each picture in a panel.
DEFAULT_TILE = 224
#: The smallest tile a panel accepts (text needs room under each picture).
MIN_TILE = 64
#: The largest: a panel of a dozen such pictures is already about 600 MB.
MAX_TILE = 4096
#: White pixels between two panel columns.
PANEL_GAP = 8
#: White pixels around the whole panel.
PANEL_MARGIN = 8

_CAPTION_SIZE = 16  # font sizes, in pixels
_TITLE_SIZE = 14
_TICK_SIZE = 12
_CAVEAT_SIZE = 13
_LINE_GAP = 2  # pixels between two lines of text
_BAR_HEIGHT = 10
_BAR_GAP = 4  # between a picture and its colorbar, and the bar and its labels
_MAX_LINES = 3  # a caption or title longer than this many lines ends in "..."
_WHITE = (255, 255, 255)
_BLACK = (0, 0, 0)
_BAR_EDGE = (96, 96, 96)
_CAVEAT_INK = (170, 30, 0)  # a caveat's text: dark red, unlike every other word
_ICON_FILL = (255, 176, 0)  # the warning triangle before it
_ICON_GAP = 4  # between the triangle and the text
_TICK_SPACE = 8  # the least room between two tick labels


@dataclass(frozen=True)
class Scale:
    """What the colours of a rendered map mean: drawn as a colorbar under it.

    Attributes:
        colors: ``uint8`` ``(256, 3)``: entry 0 is the left end of the bar.
        labels: Tick labels spread evenly along the bar, first at the left end, last at
            the right (e.g. ``("0", "0.012 (p99)")``).
    """

    colors: np.ndarray
    labels: tuple[str, ...]

    def __post_init__(self):
        colors = np.asarray(self.colors)
        if colors.shape != (256, 3) or colors.dtype != np.uint8:
            raise ValueError(f"scale colors must be uint8 of shape (256, 3), got "
                             f"{colors.dtype} {colors.shape}")
        if not all(isinstance(label, str) for label in self.labels):
            raise TypeError("scale labels must be strings")


@dataclass(frozen=True)
class Column:
    """One picture of a panel: its title, its pixels and, for a map, its scale."""

    title: str
    picture: np.ndarray
    scale: Scale | None = None


def as_rgb(image: np.ndarray, what: str, size: tuple[int, int] | None = None) -> np.ndarray:
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
        array = _resized(array, size, Image.Resampling.BILINEAR)
    if array.shape[2] == 1:
        array = np.repeat(array, 3, axis=2)
    return array


def _resized(array: np.ndarray, size: tuple[int, int], method) -> np.ndarray:
    """``array`` (H, W, C) uint8 resized to ``size`` (H, W), one channel at a time."""
    resized = np.empty((size[0], size[1], array.shape[2]), dtype=np.uint8)
    for channel in range(array.shape[2]):
        plane = Image.fromarray(np.ascontiguousarray(array[:, :, channel]))
        resized[:, :, channel] = plane.resize((size[1], size[0]), method)
    return resized


def _scales_down_to(picture: tuple[int, int], size: tuple[int, int]) -> bool:
    """Whether ``picture`` (H, W) is larger than ``size`` and scales down to it exactly."""
    longer, side = max(picture), max(size)
    if side >= longer:
        return False
    scaled = tuple(max(1, round(length * side / longer)) for length in picture)
    return scaled == tuple(size)


def _to_tile(picture: np.ndarray, factor: float) -> np.ndarray:
    """``picture`` scaled by ``factor``: nearest-neighbour up, area average down."""
    if factor == 1.0:
        return picture
    size = (max(1, round(picture.shape[0] * factor)), max(1, round(picture.shape[1] * factor)))
    method = Image.Resampling.NEAREST if factor > 1 else Image.Resampling.BOX
    return _resized(picture, size, method)


@functools.lru_cache(maxsize=8)
def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    # The TrueType font Pillow carries inside itself (Pillow >= 10.1, with FreeType):
    # no font file on the machine is read, so a panel looks the same everywhere the
    # same Pillow runs.
    return ImageFont.load_default(size=size)


def _line_height(size: int) -> int:
    return int(_font(size).getbbox("Agjpqy|")[3])


def _printable(text: str) -> str:
    # Control characters (newlines included) become spaces; characters outside
    # Latin-1, which the font may lack, become '?'.
    text = "".join(ch if ch.isprintable() else " " for ch in text)
    return text.encode("latin-1", "replace").decode("latin-1")


def _wrap(text: str, width: int, size: int) -> list[str]:
    """``text`` broken into lines of at most ``width`` pixels: at spaces, and inside a
    word only when the word alone is wider; at most :data:`_MAX_LINES`, the last one
    ending in "..." when text is left over."""
    font = _font(size)
    fits = lambda line: font.getlength(line) <= width  # noqa: E731
    lines: list[str] = []
    for word in _printable(text).split():
        candidate = f"{lines[-1]} {word}" if lines else word
        if lines and fits(candidate):
            lines[-1] = candidate
            continue
        while word:  # a new line; a word wider than the column is cut into pieces
            cut = len(word)
            while cut > 1 and not fits(word[:cut]):
                cut -= 1
            lines.append(word[:cut])
            word = word[cut:]
    if len(lines) > _MAX_LINES:
        last = lines[_MAX_LINES - 1]
        while last and not fits(last + "..."):
            last = last[:-1]
        lines = lines[:_MAX_LINES - 1] + [last + "..."]
    return lines


def _draw_lines(canvas: Image.Image, lines: list[str], left: int, top: int, width: int,
                size: int) -> None:
    """Draw ``lines`` centred in ``[left, left + width)`` from ``top`` down."""
    draw, font, step = ImageDraw.Draw(canvas), _font(size), _line_height(size) + _LINE_GAP
    for number, line in enumerate(lines):
        draw.text((left + width / 2, top + number * step), line, fill=_BLACK, font=font,
                  anchor="ma")


def _icon_side() -> int:
    return _line_height(_CAVEAT_SIZE)


def _draw_caveats(canvas: Image.Image, blocks: list[list[str]], left: int, top: int) -> None:
    """Each caveat's lines left-aligned from ``left``, after a warning triangle."""
    draw, font = ImageDraw.Draw(canvas), _font(_CAVEAT_SIZE)
    side, step = _icon_side(), _line_height(_CAVEAT_SIZE) + _LINE_GAP
    for lines in blocks:
        draw.polygon([(left, top + side - 1), (left + side - 1, top + side - 1),
                      (left + (side - 1) / 2, top)], fill=_ICON_FILL, outline=_CAVEAT_INK)
        draw.text((left + side / 2, top + side * 0.3), "!", fill=_BLACK,
                  font=_font(max(6, side * 2 // 3)), anchor="ma")
        for number, line in enumerate(lines):
            draw.text((left + side + _ICON_GAP, top + number * step), line, fill=_CAVEAT_INK,
                      font=font)
        top += _text_height(len(lines), _CAVEAT_SIZE)


def _text_height(lines: int, size: int) -> int:
    return 0 if lines == 0 else lines * (_line_height(size) + _LINE_GAP)


def _bar_height() -> int:
    return _BAR_GAP + _BAR_HEIGHT + _BAR_GAP + _line_height(_TICK_SIZE)


def _draw_bar(canvas: Image.Image, scale: Scale, left: int, top: int, width: int) -> None:
    """The colorbar of ``scale``, ``width`` pixels wide, its labels underneath."""
    indices = (np.arange(width) * 256) // width
    bar = np.repeat(np.asarray(scale.colors)[indices][np.newaxis], _BAR_HEIGHT, axis=0)
    canvas.paste(Image.fromarray(bar), (left, top + _BAR_GAP))
    draw = ImageDraw.Draw(canvas)
    draw.rectangle((left, top + _BAR_GAP, left + width - 1, top + _BAR_GAP + _BAR_HEIGHT - 1),
                   outline=_BAR_EDGE)
    font = _font(_TICK_SIZE)
    labels = [_printable(label) for label in scale.labels]
    # Labels that would touch are dropped, the middle ones first, then the left end.
    while len(labels) > 1 and sum(font.getlength(label) for label in labels) \
            + _TICK_SPACE * (len(labels) - 1) > width:
        del labels[len(labels) // 2 if len(labels) > 2 else 0]
    count = len(labels)
    y = top + 2 * _BAR_GAP + _BAR_HEIGHT
    for number, label in enumerate(labels):
        if count == 1:
            x, anchor = left + width, "ra"
        elif number == 0:
            x, anchor = left, "la"
        elif number == count - 1:
            x, anchor = left + width, "ra"
        else:
            x, anchor = left + width * number / (count - 1), "ma"
        draw.text((x, y), label, fill=_BLACK, font=font, anchor=anchor)


def _columns_of(columns: Sequence) -> list[Column]:
    prepared: list[Column] = []
    for index, item in enumerate(columns):
        if isinstance(item, Column):
            title, picture, scale = item.title, item.picture, item.scale
        elif isinstance(item, (tuple, list)) and len(item) in (2, 3):
            title, picture, scale = (*item, None)[:3]
        else:
            raise ValueError(f"columns[{index}] must be a (title, picture) pair, got {item!r:.60}")
        if not isinstance(title, str):
            raise TypeError(f"columns[{index}] title must be a string, got {type(title).__name__}")
        if scale is not None and not isinstance(scale, Scale):
            raise TypeError(f"columns[{index}] scale must be a Scale or None, got "
                            f"{type(scale).__name__}")
        picture = as_rgb(picture, f"columns[{index}] picture ({title!r})")
        prepared.append(Column(title, picture, scale))
    if not prepared:
        raise ValueError("columns must hold at least one (title, picture) pair, got none")
    heights = [column.picture.shape[0] for column in prepared]
    if len(set(heights)) != 1:
        raise ValueError(f"all panel pictures must have the same height, got heights {heights}")
    return prepared


def render_panel(
    columns: Sequence, caption: str | None = None, tile: int | None = DEFAULT_TILE,
    caveats: Sequence[str] = (),
) -> np.ndarray:
    """Lay pictures side by side on white, each titled above and, with a scale, barred below.

    Layout, top to bottom, inside a :data:`PANEL_MARGIN` white margin: the caption
    (if non-empty, wrapped across the panel), one line per caveat (a warning triangle,
    then the text in dark red, wrapped across the panel), the column titles (if any is
    non-empty, each wrapped within its column), the pictures separated by :data:`PANEL_GAP` white
    pixels, and (if any column has a :class:`Scale`) a colorbar under each such
    picture with its tick labels. Text wraps at spaces (a word wider than its column is
    broken) and is cut with "..." after three lines.

    Args:
        columns: Left to right: :class:`Column` items or ``(title, picture)`` /
            ``(title, picture, scale)`` tuples; each picture is ``uint8`` of shape
            ``(H, W)``, ``(H, W, 1)`` or ``(H, W, 3)``, all of the same ``H``.
        caption: Optional text above, e.g. ``"tabby (class 281) p=0.873"``.
        caveats: Sentences that make the maps less meaningful (e.g. ``"guided = plain
            gradient: the model has no guided activation"``), drawn under the caption so
            that the panel cannot be read as an ordinary one.
        tile: Pixels on the longer side of the tiles: every picture is scaled by the
            one factor ``tile / max(H, widest W)``, nearest-neighbour when enlarging and
            area-averaging when reducing. ``None``: pictures as they are.

    Returns:
        ``uint8`` array ``(height, width, 3)``; ``width`` is the scaled widths plus
        the gaps and twice the margin.

    Raises:
        ValueError: If ``columns`` is empty, an item is not a pair, a picture is not
            ``uint8`` of a valid shape, the heights differ, or ``tile`` is not from
            :data:`MIN_TILE` to :data:`MAX_TILE`.
        TypeError: If a title, the caption or a caveat is not a string, or a scale not a
            :class:`Scale`.

    >>> panel = render_panel([("a", np.zeros((8, 5), np.uint8))], tile=64)
    >>> panel.shape[1] == 2 * PANEL_MARGIN + 40  # 8x5 enlarged 8 times
    True
    """
    if caption is not None and not isinstance(caption, str):
        raise TypeError(f"caption must be a string or None, got {type(caption).__name__}")
    if isinstance(caveats, str) or not all(isinstance(text, str) for text in caveats):
        raise TypeError(f"caveats must be a sequence of strings, got {caveats!r:.60}")
    if tile is not None and (isinstance(tile, bool) or not isinstance(tile, (int, np.integer))
                             or not MIN_TILE <= tile <= MAX_TILE):
        raise ValueError(f"tile must be an integer from {MIN_TILE} to {MAX_TILE} pixels or "
                         f"None, got {tile!r}")
    prepared = _columns_of(columns)
    if tile is not None:
        longest = max(prepared[0].picture.shape[0],
                      max(column.picture.shape[1] for column in prepared))
        factor = tile / longest
        prepared = [Column(c.title, _to_tile(c.picture, factor), c.scale) for c in prepared]

    widths = [column.picture.shape[1] for column in prepared]
    inner = sum(widths) + PANEL_GAP * (len(prepared) - 1)
    caption_lines = _wrap(caption, inner, _CAPTION_SIZE) if caption else []
    caveat_blocks = [_wrap(text, max(1, inner - _icon_side() - _ICON_GAP), _CAVEAT_SIZE)
                     for text in caveats if text.strip()]
    titles = [_wrap(column.title, width, _TITLE_SIZE) for column, width in zip(prepared, widths)]
    title_rows = max(len(lines) for lines in titles)
    has_bars = any(column.scale is not None for column in prepared)

    height = prepared[0].picture.shape[0]
    caption_top = PANEL_MARGIN
    caveats_top = caption_top + _text_height(len(caption_lines), _CAPTION_SIZE) + (
        _LINE_GAP * 2 if caption_lines else 0)
    titles_top = caveats_top + sum(_text_height(len(lines), _CAVEAT_SIZE)
                                   for lines in caveat_blocks) + (
        _LINE_GAP * 2 if caveat_blocks else 0)
    pictures_top = titles_top + _text_height(title_rows, _TITLE_SIZE)
    bars_top = pictures_top + height
    total = (bars_top + (_bar_height() if has_bars else 0) + PANEL_MARGIN,
             inner + 2 * PANEL_MARGIN)

    canvas = Image.new("RGB", (total[1], total[0]), _WHITE)
    if caption_lines:
        _draw_lines(canvas, caption_lines, PANEL_MARGIN, caption_top, inner, _CAPTION_SIZE)
    _draw_caveats(canvas, caveat_blocks, PANEL_MARGIN, caveats_top)
    left = PANEL_MARGIN
    for column, lines, width in zip(prepared, titles, widths):
        _draw_lines(canvas, lines, left, titles_top, width, _TITLE_SIZE)
        canvas.paste(Image.fromarray(column.picture), (left, pictures_top))
        if column.scale is not None:
            _draw_bar(canvas, column.scale, left, bars_top, width)
        left += width + PANEL_GAP
    return np.asarray(canvas)
