"""Click types for numbers, read as every parser in guidedbp reads them
(:mod:`guidedbp._numbers`: ASCII digits only; a decimal number finite).

Click's own ``IntRange`` and ``FloatRange`` read with ``int`` and ``float``, which take
other scripts' digits (``--top-k ٣`` is 3) and ``nan`` (which passes every range
check): every numeric flag uses these instead.

>>> Whole(1, 5).convert("3", None, None), Number(0, 1).convert("0.5", None, None)
(3, 0.5)
>>> Whole(1, 5).convert("٣", None, None)
Traceback (most recent call last):
...
click.exceptions.BadParameter: '٣' is not a valid integer (ASCII digits 0-9).
>>> Number(0, 1).convert("nan", None, None)
Traceback (most recent call last):
...
click.exceptions.BadParameter: 'nan' is not a finite number.
"""

from __future__ import annotations

import math

import click

from guidedbp._numbers import decimal_number, whole_number

__all__ = ["Number", "Whole"]


class _Unbounded:
    """Where neither ``min`` nor ``max`` is given, the help reads as click's plain
    ``INTEGER`` or ``FLOAT`` (no ``RANGE``, no ``x<=None``)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.min is None and self.max is None:
            self.name = self.name.replace(" range", "")

    def _describe_range(self) -> str:
        if self.min is None and self.max is None:
            return ""
        return super()._describe_range()


class Whole(_Unbounded, click.IntRange):
    """A whole number (a sign allowed), optionally within ``min`` and ``max``.

    >>> Whole().name, Whole()._describe_range(), Whole(1)._describe_range()
    ('integer', '', 'x>=1')
    """

    def convert(self, value, param, ctx):
        if isinstance(value, str):
            number = whole_number(value, signed=True)
            if number is None:
                self.fail(f"{value!r} is not a valid integer (ASCII digits 0-9).", param, ctx)
            value = number
        return super().convert(value, param, ctx)


class Number(_Unbounded, click.FloatRange):
    """A finite decimal number, optionally within ``min`` and ``max``."""

    def convert(self, value, param, ctx):
        number = decimal_number(value) if isinstance(value, str) else value
        if number is None:
            self.fail(f"{value!r} is not a valid number (ASCII digits 0-9, e.g. 0.5 or 1e-3).",
                      param, ctx)
        if isinstance(number, float) and not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return super().convert(number, param, ctx)
