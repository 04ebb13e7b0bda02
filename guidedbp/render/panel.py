"""Lay pictures side by side in readable tiles: one RGB image per explanation.

Pure numpy and Pillow. Every picture is scaled to a tile (:data:`DEFAULT_TILE` px on
its longer side: a small picture is enlarged with nearest-neighbour, so its pixels stay
sharp squares; a large one is reduced by area averaging). More than
:data:`PANEL_COLUMNS` pictures wrap onto further rows of the same grid, so that a panel
of every method stays about as wide as a page. Text is set in the TrueType font Pillow
ships (Aileron Regular), wrapped rather than cut, and a map that has a scale gets a
colorbar with its values underneath (a scale's legend, once, under the grid). A region
can be outlined on a picture. The same input gives the same bytes on every run.

>>> import numpy as np
>>> from guidedbp.render import PANEL_GAP, render_panel
>>> panel = render_panel([("a", np.zeros((8, 5), np.uint8)), ("b", np.zeros((8, 7), np.uint8))],
...                      tile=None)
>>> panel.shape[1] == 2 * PANEL_MARGIN + 5 + PANEL_GAP + 7
True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from PIL import Image

from guidedbp.render.marks import (
    _CAPTION_SIZE,
    _CAVEAT_SIZE,
    _ICON_GAP,
    _LEGEND_LINES,
    _LINE_GAP,
    _SWATCH_WIDTH,
    _TITLE_SIZE,
    _WHITE,
    Box,
    Scale,
    _bar_height,
    _boxed,
    _draw_bar,
    _draw_caveats,
    _draw_legends,
    _draw_lines,
    _font,  # noqa: F401 (tests measure text with it)
    _icon_side,
    _line_height,  # noqa: F401
    _outlined,
    _text_height,
    _wrap,
)

__all__ = ["DEFAULT_TILE", "PANEL_COLUMNS", "PANEL_GAP", "PANEL_MARGIN", "PANEL_ROW_GAP",
           "Box", "Column", "Scale", "as_rgb", "render_panel"]

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
#: The most pictures in one row of a panel: more wrap onto the next row of the grid
#: (6 tiles of :data:`DEFAULT_TILE` make a panel 1,400 px wide).
PANEL_COLUMNS = 6
#: White pixels between two rows of a wrapped panel (under the first row's colorbars).
PANEL_ROW_GAP = 12


@dataclass(frozen=True)
class Column:
    """One picture of a panel: its title, its pixels and, for a map, its scale.

    ``outline``: a region on the picture, bool ``(H, W)`` of the picture's size: its
    boundary is drawn over the tile (the region's pixels that touch the outside, in
    white, and the outside pixels that touch it, in black). ``boxes``: :class:`Box` items
    in the picture's pixels, drawn over the tile in order.
    """

    title: str
    picture: np.ndarray
    scale: Scale | None = None
    outline: np.ndarray | None = None
    boxes: tuple = ()


def as_rgb(image: np.ndarray, what: str, size: tuple[int, int] | None = None) -> np.ndarray:
    """Validate a uint8 picture of shape (H, W), (H, W, 1) or (H, W, 3); return (H, W, 3).

    With ``size``, a larger picture that scales down to exactly ``size`` (the same
    aspect, rounded as ``guidedbp.models.resizing.shown_size`` does: a picture above
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


def _tiled(column: Column, factor: float) -> Column:
    """``column`` with its picture scaled by ``factor`` (:func:`_to_tile`), and its boxes
    with it."""
    picture = _to_tile(column.picture, factor)
    x = picture.shape[1] / column.picture.shape[1]
    y = picture.shape[0] / column.picture.shape[0]
    return Column(column.title, picture, column.scale, column.outline,
                  tuple(box.scaled(x, y) for box in column.boxes))


def _legends(prepared: list[Column]) -> list[Scale]:
    """The scales whose legends the panel writes: the first of each legend's text."""
    seen: dict[str, Scale] = {}
    for column in prepared:
        if column.scale is not None and column.scale.legend.strip():
            seen.setdefault(column.scale.legend, column.scale)
    return list(seen.values())


def _tiled_region(region: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """``region`` scaled to ``size`` (H, W) as its picture was: nearest-neighbour up,
    area average down (a tile pixel at least half inside is inside)."""
    if region.shape == tuple(size):
        return region
    levels = region.astype(np.uint8)[:, :, np.newaxis] * np.uint8(255)
    method = Image.Resampling.NEAREST if size[0] > region.shape[0] else Image.Resampling.BOX
    return _resized(levels, size, method)[:, :, 0] >= 128


def _columns_of(columns: Sequence) -> list[Column]:
    prepared: list[Column] = []
    for index, item in enumerate(columns):
        outline, boxes = None, ()
        if isinstance(item, Column):
            title, picture, scale, outline = item.title, item.picture, item.scale, item.outline
            boxes = tuple(item.boxes)
            if not all(isinstance(box, Box) for box in boxes):
                raise TypeError(f"columns[{index}] boxes must be Box items, got {boxes!r:.60}")
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
        if outline is not None:
            outline = np.asarray(outline)
            if outline.dtype != bool or outline.shape != picture.shape[:2]:
                raise ValueError(f"columns[{index}] outline must be bool of the picture's "
                                 f"shape {picture.shape[:2]}, got {outline.dtype} "
                                 f"{outline.shape}")
        prepared.append(Column(title, picture, scale, outline, boxes))
    if not prepared:
        raise ValueError("columns must hold at least one (title, picture) pair, got none")
    heights = [column.picture.shape[0] for column in prepared]
    if len(set(heights)) != 1:
        raise ValueError(f"all panel pictures must have the same height, got heights {heights}")
    return prepared


def render_panel(
    columns: Sequence, caption: str | None = None, tile: int | None = DEFAULT_TILE,
    caveats: Sequence[str] = (), per_row: int = PANEL_COLUMNS,
) -> np.ndarray:
    """Lay pictures out in a grid on white, each titled above and, with a scale, barred below.

    Layout, top to bottom, inside a :data:`PANEL_MARGIN` white margin: the caption
    (if non-empty, wrapped across the panel), one line per caveat (a warning triangle,
    then the text in dark red, wrapped across the panel), then the grid: rows of at most
    ``per_row`` pictures, left to right and then row by row, :data:`PANEL_ROW_GAP` white
    pixels apart. A row has the column titles (if any of its titles is non-empty, each
    wrapped within its column), the pictures separated by :data:`PANEL_GAP` white
    pixels, and (if any of its columns has a :class:`Scale`) a colorbar under each such
    picture with its tick labels. The n-th picture of every row is in the same grid
    column (as wide as its widest picture; a narrower one is centred). Under the grid,
    each scale's legend once, after a sample of its bar. Text wraps at spaces (a word
    wider than its column is broken) and is cut with "..." after three lines. A column's
    ``outline`` and ``boxes`` are drawn on its tile (:class:`Column`).

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
        per_row: The most pictures in a row (:data:`PANEL_COLUMNS`: six 224-px tiles
            make a panel 1,400 px wide); more start the next row.

    Returns:
        ``uint8`` array ``(height, width, 3)``; ``width`` is the grid columns' widths plus
        the gaps and twice the margin.

    Raises:
        ValueError: If ``columns`` is empty, an item is not a pair, a picture is not
            ``uint8`` of a valid shape, the heights differ, an outline is not bool of
            its picture's size, ``tile`` is not from :data:`MIN_TILE` to
            :data:`MAX_TILE`, or ``per_row`` is not a positive integer.
        TypeError: If a title, the caption or a caveat is not a string, or a scale not a
            :class:`Scale`.

    >>> panel = render_panel([("a", np.zeros((8, 5), np.uint8))], tile=64)
    >>> panel.shape[1] == 2 * PANEL_MARGIN + 40  # 8x5 enlarged 8 times
    True
    >>> seven = render_panel([("", np.zeros((8, 8), np.uint8))] * 7, tile=64)
    >>> seven.shape[1] == 2 * PANEL_MARGIN + 6 * 64 + 5 * PANEL_GAP  # six, then one
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
    if isinstance(per_row, bool) or not isinstance(per_row, (int, np.integer)) or per_row < 1:
        raise ValueError(f"per_row must be a positive integer, got {per_row!r}")
    prepared = _columns_of(columns)
    if tile is not None:
        longest = max(prepared[0].picture.shape[0],
                      max(column.picture.shape[1] for column in prepared))
        factor = tile / longest
        prepared = [_tiled(c, factor) for c in prepared]
    prepared = [column if column.outline is None else Column(
        column.title, _outlined(column.picture, _tiled_region(
            column.outline, column.picture.shape[:2])), column.scale, boxes=column.boxes)
        for column in prepared]
    prepared = [column if not column.boxes else Column(
        column.title, _boxed(column.picture, column.boxes), column.scale)
        for column in prepared]

    rows = [prepared[start:start + per_row] for start in range(0, len(prepared), per_row)]
    cells = [max(row[number].picture.shape[1] for row in rows if number < len(row))
             for number in range(len(rows[0]))]
    lefts = [PANEL_MARGIN + sum(cells[:number]) + PANEL_GAP * number
             for number in range(len(cells))]
    inner = sum(cells) + PANEL_GAP * (len(cells) - 1)
    caption_lines = _wrap(caption, inner, _CAPTION_SIZE) if caption else []
    caveat_blocks = [_wrap(text, max(1, inner - _icon_side() - _ICON_GAP), _CAVEAT_SIZE)
                     for text in caveats if text.strip()]
    legend_blocks = [(scale, _wrap(scale.legend, max(1, inner - _SWATCH_WIDTH - 2 * _ICON_GAP),
                                   _CAVEAT_SIZE, _LEGEND_LINES)) for scale in _legends(prepared)]

    height = prepared[0].picture.shape[0]
    caption_top = PANEL_MARGIN
    caveats_top = caption_top + _text_height(len(caption_lines), _CAPTION_SIZE) + (
        _LINE_GAP * 2 if caption_lines else 0)
    top = caveats_top + sum(_text_height(len(lines), _CAVEAT_SIZE)
                            for lines in caveat_blocks) + (
        _LINE_GAP * 2 if caveat_blocks else 0)
    placed = []  # per row: its columns' titles, and where its titles, pictures, bars start
    for row in rows:
        titles = [_wrap(column.title, column.picture.shape[1], _TITLE_SIZE) for column in row]
        pictures_top = top + _text_height(max(len(lines) for lines in titles), _TITLE_SIZE)
        bars_top = pictures_top + height
        placed.append((row, titles, top, pictures_top, bars_top))
        has_bars = any(column.scale is not None for column in row)
        top = bars_top + (_bar_height() if has_bars else 0) + PANEL_ROW_GAP
    legends_top = top - PANEL_ROW_GAP + (_LINE_GAP * 2 if legend_blocks else 0)
    total = (legends_top + sum(_text_height(len(lines), _CAVEAT_SIZE)
                               for _, lines in legend_blocks) + PANEL_MARGIN,
             inner + 2 * PANEL_MARGIN)

    canvas = Image.new("RGB", (total[1], total[0]), _WHITE)
    if caption_lines:
        _draw_lines(canvas, caption_lines, PANEL_MARGIN, caption_top, inner, _CAPTION_SIZE)
    _draw_caveats(canvas, caveat_blocks, PANEL_MARGIN, caveats_top)
    for row, titles, titles_top, pictures_top, bars_top in placed:
        for column, lines, cell, cell_left in zip(row, titles, cells, lefts):
            width = column.picture.shape[1]
            left = cell_left + (cell - width) // 2
            _draw_lines(canvas, lines, left, titles_top, width, _TITLE_SIZE)
            canvas.paste(Image.fromarray(column.picture), (left, pictures_top))
            if column.scale is not None:
                _draw_bar(canvas, column.scale, left, bars_top, width)
    _draw_legends(canvas, legend_blocks, PANEL_MARGIN, legends_top)
    return np.asarray(canvas)
