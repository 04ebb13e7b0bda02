"""JSON that every parser reads: a number that is NaN or infinite is written as ``null``.

Python's :func:`json.dumps` writes ``NaN`` and ``Infinity`` by default, which no JSON
parser but Python's accepts (``JSON.parse``, ``jq``, Go's and Rust's decoders reject the
whole line). Every JSON the package writes for others (manifests, ``--json`` outputs)
goes through :func:`dumps`; a value that is not finite says why elsewhere (a caveat, a
failed input), not in the number.

Pure Python: every room may import it.

>>> dumps({"score": float("inf"), "values": [1.5, float("nan")]})
'{"score": null, "values": [1.5, null]}'
"""

from __future__ import annotations

import json
import math


def finite(value):
    """``value`` with every float that is NaN or infinite replaced by ``None``, inside
    dicts, lists and tuples (tuples become lists, as JSON writes them)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    return value


def dumps(value, **options) -> str:
    """:func:`json.dumps` of ``value`` (with ``options``) as strict JSON: numbers that are
    NaN or infinite written as ``null``."""
    try:
        return json.dumps(value, allow_nan=False, **options)
    except ValueError as error:
        if "Out of range float values" not in str(error):
            raise
        return json.dumps(finite(value), allow_nan=False, **options)
