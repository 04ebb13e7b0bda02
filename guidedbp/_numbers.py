"""Numbers as a user writes them, read one way by every room: ASCII digits only.

Python's ``int`` and ``float`` also read other scripts' digits (``int("٣")`` is 3,
``float("١.٥")`` 1.5) and underscores (``int("1_0")``), and ``str.isdigit`` passes
superscripts that ``int`` then refuses (``"²"``). Every number a user gives guidedbp (a
flag's value, ``top:K``, ``K/N``, ``HxW``, a class index, a box's corners) is read here
instead, so that one text is one number everywhere, or none.

>>> whole_number("12"), whole_number(" 7 "), whole_number("٣"), whole_number("²")
(12, 7, None, None)
>>> whole_number("-2"), whole_number("-2", signed=True)
(None, -2)
>>> decimal_number("1.5e3"), decimal_number("-.5"), decimal_number("١.٥"), decimal_number("1_0")
(1500.0, -0.5, None, None)
>>> decimal_number("NaN"), decimal_number("-inf")
(nan, -inf)
"""

from __future__ import annotations

import re

__all__ = ["decimal_number", "whole_number"]

_WHOLE = re.compile(r"[0-9]+")
_SIGNED = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_NON_FINITE = re.compile(r"[+-]?(?:nan|inf|infinity)", re.IGNORECASE)
#: Longer digit strings are no number (``int`` itself refuses more than 4,300 digits).
_MAX_DIGITS = 4000


def whole_number(text: str, signed: bool = False) -> int | None:
    """``text`` (outer spaces ignored) as an int: ASCII digits, a sign only where
    ``signed``; ``None`` for anything else."""
    if not isinstance(text, str):
        return None
    text = text.strip()
    if len(text) > _MAX_DIGITS or not (_SIGNED if signed else _WHOLE).fullmatch(text):
        return None
    return int(text)


def decimal_number(text: str) -> float | None:
    """``text`` (outer spaces ignored) as a float: ASCII digits with an optional sign,
    point and exponent, or ``nan``/``inf`` (which the caller may refuse); ``None`` for
    anything else."""
    if not isinstance(text, str):
        return None
    text = text.strip()
    if len(text) > _MAX_DIGITS or not (_DECIMAL.fullmatch(text) or _NON_FINITE.fullmatch(text)):
        return None
    return float(text)
