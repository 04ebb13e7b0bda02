"""What a panel draws around its pictures: text (the caption, titles, caveat lines and
legends), colorbars, region outlines and boxes. Pure numpy and Pillow, as :mod:`.panel` is.

Text is set in the TrueType font Pillow ships (Aileron Regular, Pillow >= 10.1), so a
panel looks the same wherever the same Pillow runs.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw, ImageFont

_CAPTION_SIZE = 16  # font sizes, in pixels
_TITLE_SIZE = 14
_TICK_SIZE = 12
_CAVEAT_SIZE = 13
_LINE_GAP = 2  # pixels between two lines of text
_BAR_HEIGHT = 10
_BAR_GAP = 4  # between a picture and its colorbar, and the bar and its labels
_MAX_LINES = 3  # a caption or title longer than this many lines ends in "..."
_LEGEND_LINES = 8  # a legend says all it says under a one-tile panel, cut only below that
_WHITE = (255, 255, 255)
_BLACK = (0, 0, 0)
_BAR_EDGE = (96, 96, 96)
_CAVEAT_INK = (170, 30, 0)  # a caveat's text: dark red, unlike every other word
_ICON_FILL = (255, 176, 0)  # the warning triangle before it
_ICON_GAP = 4  # between the triangle and the text
_TICK_SPACE = 8  # the least room between two tick labels
_SWATCH_WIDTH = 40  # a legend line's sample of its colorbar
_OUTLINE = (255, 255, 255)  # a region's outline: its boundary pixels inside...
_OUTLINE_HALO = (0, 0, 0)  # ...and those just outside, so that it shows on any picture
#: A detection target's box: white, solid (a black line on each side, as an outline's).
TARGET_BOX = (255, 255, 255)
#: The proposal a detection target matched: magenta, dashed (a hue no colormap here has).
MATCHED_BOX = (255, 0, 255)
_BOX_HALO = (0, 0, 0)
_BOX_LINE = 112  # a box's line is one pixel per this many of the picture's longer side


@dataclass(frozen=True)
class Box:
    """A rectangle drawn over a picture.

    Attributes:
        corners: ``(x0, y0, x1, y1)`` in the picture's pixels, x right and y down, at pixel
            edges (``(0, 0, W, H)`` frames the whole picture). A side outside the picture
            is not drawn.
        color: RGB of its line.
        dashed: A dashed line (its gaps show what is under it).
    """

    corners: tuple[float, float, float, float]
    color: tuple[int, int, int] = TARGET_BOX
    dashed: bool = False

    def scaled(self, x: float, y: float) -> Box:
        """The same box on the picture scaled by ``x`` and ``y``."""
        x0, y0, x1, y1 = self.corners
        return Box((x0 * x, y0 * y, x1 * x, y1 * y), self.color, self.dashed)


def _boxed(picture: np.ndarray, boxes) -> np.ndarray:
    """``picture`` (``uint8`` ``(H, W, 3)``) with ``boxes`` drawn: a line ``max(1,
    round(longer side / 112))`` pixels wide just inside each box's edges, in its order,
    over the one-pixel black lines on each side of every box's; a dashed box in dashes and
    gaps three line widths long (at least 3 pixels), measured along its sides from its top
    left corner.

    >>> drawn = _boxed(np.zeros((8, 8, 3), np.uint8), [Box((2, 2, 6, 6))])
    >>> for row in drawn[1:7, :, 0].tolist(): print(row)
    [0, 0, 0, 0, 0, 0, 0, 0]
    [0, 0, 255, 255, 255, 255, 0, 0]
    [0, 0, 255, 0, 0, 255, 0, 0]
    [0, 0, 255, 0, 0, 255, 0, 0]
    [0, 0, 255, 255, 255, 255, 0, 0]
    [0, 0, 0, 0, 0, 0, 0, 0]
    """
    drawn = np.array(picture, copy=True)
    height, width = drawn.shape[:2]
    line = max(1, round(max(height, width) / _BOX_LINE))
    # Every box's black lines first, then every line: one box's black never covers
    # another's line (a matched proposal one pixel inside the target box).
    for layers in (((-1, 1, None), (line, 1, None)), ((0, line, "line"),)):
        for box in boxes:
            x0, y0, x1, y1 = box.corners
            left, top = math.floor(x0), math.floor(y0)
            right, bottom = math.ceil(x1), math.ceil(y1)  # past the box's last pixel
            on = None
            if box.dashed:
                dash = max(3, 3 * line)

                def on(rows, columns, left=left, top=top, dash=dash):
                    return ((rows - top) + (columns - left)) // dash % 2 == 0

            for inset, thickness, color in layers:
                _frame(drawn, (left + inset, top + inset, right - inset, bottom - inset),
                       thickness, box.color if color else _BOX_HALO, on)
    return drawn


def _frame(drawn: np.ndarray, edges: tuple[int, int, int, int], thickness: int, color,
           on=None) -> None:
    """Paint the ring ``thickness`` pixels wide just inside ``edges`` (left, top, right,
    bottom; right and bottom past the last pixel), clipped to ``drawn``; where ``on`` is
    given, only its pixels for which ``on(rows, columns)`` holds."""
    left, top, right, bottom = edges
    if right <= left or bottom <= top:
        return
    inner_top, inner_bottom = top + thickness, bottom - thickness
    for rows, columns in (((top, inner_top), (left, right)),
                          ((inner_bottom, bottom), (left, right)),
                          ((inner_top, inner_bottom), (left, left + thickness)),
                          ((inner_top, inner_bottom), (right - thickness, right))):
        r0, r1 = max(rows[0], top, 0), min(rows[1], bottom, drawn.shape[0])
        c0, c1 = max(columns[0], left, 0), min(columns[1], right, drawn.shape[1])
        if r0 >= r1 or c0 >= c1:
            continue
        if on is None:
            drawn[r0:r1, c0:c1] = color
        else:
            window = drawn[r0:r1, c0:c1]
            window[on(np.arange(r0, r1)[:, None], np.arange(c0, c1)[None, :])] = color


@dataclass(frozen=True)
class Scale:
    """What the colours of a rendered map mean: drawn as a colorbar under it.

    Attributes:
        colors: ``uint8`` ``(256, 3)``: entry 0 is the left end of the bar; or
            ``(K, 256, 3)``: K stripes, top to bottom (a render whose channels each have
            their own ramp).
        labels: Tick labels spread evenly along the bar, first at the left end, last at
            the right (e.g. ``("0", "0.012 (p99)")``).
        legend: What the colours mean, in a few words (``"red: raises the score, blue:
            lowers it"``): written once under the panel's grid, after a sample of the
            bar; ``""`` for none.
    """

    colors: np.ndarray
    labels: tuple[str, ...]
    legend: str = ""

    def __post_init__(self):
        colors = np.asarray(self.colors)
        stripes = colors.ndim == 3 and 1 <= colors.shape[0] <= _BAR_HEIGHT - 2
        if colors.shape[-2:] != (256, 3) or colors.dtype != np.uint8 \
                or not (colors.ndim == 2 or stripes):
            raise ValueError(f"scale colors must be uint8 of shape (256, 3) or (K, 256, 3) "
                             f"with K stripes from 1 to {_BAR_HEIGHT - 2}, got "
                             f"{colors.dtype} {colors.shape}")
        if not all(isinstance(label, str) for label in self.labels):
            raise TypeError("scale labels must be strings")
        if not isinstance(self.legend, str):
            raise TypeError(f"scale legend must be a string, got {type(self.legend).__name__}")

    @property
    def stripes(self) -> np.ndarray:
        """The colours as ``(K, 256, 3)`` stripes (one for a plain ``(256, 3)`` bar)."""
        colors = np.asarray(self.colors)
        return colors[np.newaxis] if colors.ndim == 2 else colors


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


def _wrap(text: str, width: int, size: int, most: int = _MAX_LINES) -> list[str]:
    """``text`` broken into lines of at most ``width`` pixels: at spaces, and inside a
    word only when the word alone is wider; at most ``most`` lines (:data:`_MAX_LINES`),
    the last one ending in "..." when text is left over."""
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
    if len(lines) > most:
        last = lines[most - 1]
        while last and not fits(last + "..."):
            last = last[:-1]
        lines = lines[:most - 1] + [last + "..."]
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
    _draw_swatch(canvas, scale, left, top + _BAR_GAP, width)
    draw = ImageDraw.Draw(canvas)
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


def _draw_swatch(canvas: Image.Image, scale: Scale, left: int, top: int, width: int) -> None:
    """The bar of ``scale`` alone, ``width`` pixels wide, framed: its stripes share the
    rows inside the frame."""
    indices = (np.arange(width) * 256) // width
    stripes = scale.stripes
    rows = np.empty((_BAR_HEIGHT, width, 3), np.uint8)
    inside = _BAR_HEIGHT - 2  # the frame takes the first and the last row
    bounds = [1 + (inside * number + len(stripes) // 2) // len(stripes)
              for number in range(len(stripes) + 1)]
    bounds[0], bounds[-1] = 0, _BAR_HEIGHT
    for stripe, start, stop in zip(stripes, bounds, bounds[1:]):
        rows[start:stop] = stripe[indices]
    canvas.paste(Image.fromarray(rows), (left, top))
    ImageDraw.Draw(canvas).rectangle((left, top, left + width - 1, top + _BAR_HEIGHT - 1),
                                     outline=_BAR_EDGE)


def _draw_legends(canvas: Image.Image, blocks: list[tuple[Scale, list[str]]], left: int,
                  top: int) -> None:
    """Each legend's lines left-aligned after a sample of its bar."""
    draw, font = ImageDraw.Draw(canvas), _font(_CAVEAT_SIZE)
    step = _line_height(_CAVEAT_SIZE) + _LINE_GAP
    for scale, lines in blocks:
        _draw_swatch(canvas, scale, left, top + (_line_height(_CAVEAT_SIZE) - _BAR_HEIGHT) // 2,
                     _SWATCH_WIDTH)
        for number, line in enumerate(lines):
            draw.text((left + _SWATCH_WIDTH + _ICON_GAP * 2, top + number * step), line,
                      fill=_BLACK, font=font)
        top += _text_height(len(lines), _CAVEAT_SIZE)


def _outlined(picture: np.ndarray, region: np.ndarray) -> np.ndarray:
    """``picture`` with the boundary of ``region`` (bool, its size) drawn: the region's
    pixels with a 4-neighbour outside it (the picture's edge counts as outside) in white,
    the outside pixels with a 4-neighbour in it in black."""
    padded = np.pad(region, 1, constant_values=False)
    neighbours = (padded[:-2, 1:-1], padded[2:, 1:-1], padded[1:-1, :-2], padded[1:-1, 2:])
    inside = region & ~np.logical_and.reduce(neighbours)
    outside = ~region & np.logical_or.reduce(neighbours)
    drawn = picture.copy()
    drawn[outside] = _OUTLINE_HALO
    drawn[inside] = _OUTLINE
    return drawn
