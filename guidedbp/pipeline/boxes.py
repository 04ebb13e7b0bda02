"""A ``box:X0,Y0,X1,Y1[:C]`` spec's value: four corners in an image file's pixels.

:func:`parse_box` reads it (ASCII numbers, :mod:`guidedbp._numbers`), refusing what no
image has: a corner that is not finite, or farther than :data:`MAX_COORDINATE` pixels
from the image's origin, an inverted box, a box with no area. :func:`coordinate` writes a
corner back, as specs, manifests and file names show it.

>>> parse_box("10, 20,40.5,60:circle")
Box(corners=(10.0, 20.0, 40.5, 60.0), label='circle')
>>> parse_box("0,0,1e300,1e300")
Traceback (most recent call last):
...
guidedbp.pipeline.boxes.BoxSpecError: '1e300' is out of range: a corner lies within \
1,000,000 pixels of the image's top left corner
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from guidedbp._numbers import decimal_number, whole_number
from guidedbp._text import plural

__all__ = ["BOX_FORM", "MAX_COORDINATE", "Box", "BoxSpecError", "coordinate", "parse_box"]

#: How a box spec is written.
BOX_FORM = "box:X0,Y0,X1,Y1[:C]"
#: The farthest a box's corner may lie from the image's top left corner, in pixels, either
#: way: no image guidedbp decodes is that large (a million pixels a side), and past it a
#: corner only overflows what is computed of it.
MAX_COORDINATE = 1_000_000
_FORM = "a box is four numbers X0,Y0,X1,Y1 (its corners, in the image's pixels)"


class BoxSpecError(ValueError):
    """A box spec's value that does not parse: what is wrong with it, in one line (the
    caller names the spec in front)."""

    def __init__(self, reason: str, joined: str = ": "):
        super().__init__(reason)
        #: What goes between the spec and the reason (``": "``, or ``" "`` for "is ...").
        self.joined = joined


@dataclass(frozen=True)
class Box:
    """A ``box:`` spec's value.

    Attributes:
        corners: ``(x0, y0, x1, y1)``: x right, y down, in the pixels of each input's
            image file (upright, as a viewer shows it), ``x0 < x1`` and ``y0 < y1``.
        label: The class as given (an int index or a name), or ``None``: the class the
            box is detected as.
    """

    corners: tuple[float, float, float, float]
    label: int | str | None = None

    @property
    def text(self) -> str:
        """``10,20,40.5,60`` (and ``:LABEL``): the value written back."""
        corners = ",".join(coordinate(value) for value in self.corners)
        return corners if self.label is None else f"{corners}:{self.label}"


def coordinate(value: float) -> str:
    """A box coordinate as specs and file names write it: ``10``, ``10.5``, ``-3``; the
    shortest text that reads back as the same number (two boxes that differ are written
    apart).

    >>> coordinate(10.0), coordinate(10.25), coordinate(-3.0), coordinate(999999.75)
    ('10', '10.25', '-3', '999999.75')
    """
    value = float(value)
    return str(int(value)) if value.is_integer() else repr(value)


def parse_box(value: str) -> Box:
    """A ``box:`` spec's value: four finite numbers within :data:`MAX_COORDINATE`, a box
    with an area, then an optional ``:LABEL`` (an index in ASCII digits, or a name).

    Raises:
        BoxSpecError: What is wrong with it, in one line.
    """
    numbers, colon, label = value.partition(":")
    parts = [part.strip() for part in numbers.split(",")]
    if len(parts) != 4:
        raise BoxSpecError(f"{_FORM}, got {plural(len(parts), 'number')}")
    corners = []
    for part in parts:
        number = decimal_number(part)
        if number is None:
            raise BoxSpecError(f"{part!r} is not a number: {_FORM}")
        if not math.isfinite(number):
            raise BoxSpecError(f"{part!r} is not a finite number: {_FORM}")
        if abs(number) > MAX_COORDINATE:
            raise BoxSpecError(f"{part!r} is out of range: a corner lies within "
                               f"{MAX_COORDINATE:,} pixels of the image's top left corner")
        corners.append(number)
    x0, y0, x1, y1 = corners
    for low, high, axis in ((x0, x1, "X"), (y0, y1, "Y")):
        if high < low:
            raise BoxSpecError(
                f"is inverted: {axis}1 ({coordinate(high)}) must be greater than {axis}0 "
                f"({coordinate(low)}): corners are X0,Y0 (top left) then X1,Y1 (bottom right)",
                " ")
        if high == low:
            raise BoxSpecError(f"is empty: {axis}1 equals {axis}0, so the box has no area", " ")
    label = label.strip()
    if colon and not label:
        raise BoxSpecError(f"names no class after its box: expected {BOX_FORM}", " ")
    parsed = whole_number(label)
    return Box((x0, y0, x1, y1), (label or None) if parsed is None else parsed)
