"""Class names: the ImageNet-1k list, user label files, and turning a name into an index.

The ImageNet-1k names in ``data/imagenet_classes.txt`` are in the class-index order of
``keras.applications`` (sorted WordNet ids: 0 ``tench`` ... 999 ``toilet tissue``).
Source: the ``_IMAGENET_CATEGORIES`` list in ``torchvision/models/_meta.py`` of the PyPI
wheel ``torchvision`` 0.29.1 (BSD-3-Clause licence, Copyright (c) Soumith Chintala 2016),
one name per line, unchanged. Those names are unique: the two ImageNet classes called
"crane" are ``crane bird`` (134) and ``crane`` (517), the two "maillot" are ``maillot``
(638) and ``maillot tank suit`` (639). See ``data/SOURCES.md``.

>>> labels = imagenet_labels()
>>> len(labels), labels[0], labels[999]
(1000, 'tench', 'toilet tissue')
>>> resolve_class("golden retr", labels, 1000)
207
"""

from __future__ import annotations

import functools
import json
import os
import re
from importlib import resources

from guidedbp._files import MISSING, NotRegularFileError, open_regular
from guidedbp._numbers import whole_number
from guidedbp._text import did_you_mean
from guidedbp.errors import GuidedbpError

__all__ = ["ClassNameError", "imagenet_labels", "load_labels", "resolve_class"]

_INSPECT_HINT = "run `guidedbp inspect MODEL` to list the classes"
_MAX_CANDIDATES = 5
#: An unknown name lists the classes when there are at most this many, else the close ones.
_LISTED_CLASSES = 12


class ClassNameError(ValueError, GuidedbpError):
    """A class given by name or index that the model does not have; the message is one line."""


def imagenet_labels() -> list[str]:
    """Return the 1000 ImageNet-1k class names in ``keras.applications`` index order.

    Returns:
        A new list of 1000 names on every call (the file is read once).

    >>> imagenet_labels()[207]
    'golden retriever'
    """
    return list(_imagenet_labels())


@functools.cache
def _imagenet_labels() -> tuple[str, ...]:
    text = (
        resources.files("guidedbp.models")
        .joinpath("data", "imagenet_classes.txt")
        .read_text(encoding="utf-8")
    )
    return tuple(_parse_text(text, "imagenet_classes.txt"))


def load_labels(path: str | os.PathLike[str]) -> list[str]:
    """Read class names from a file.

    Accepted forms:

    - text: one name per line, in index order; blank lines at the end are ignored;
    - a JSON list of names;
    - a JSON object mapping index (``"0"``, ``"1"``, ... or ints) to a name, or to a
      list whose last element is the name, as Keras' ``imagenet_class_index.json``
      (``{"0": ["n01440764", "tench"], ...}``).

    The file is JSON when its name ends in ``.json`` or its content starts with ``[`` or
    ``{``. Names are stripped of surrounding whitespace.

    Args:
        path: The labels file.

    Returns:
        The names, name ``i`` for class index ``i``.

    Raises:
        ValueError: The file cannot be read, is not a regular file (a FIFO, a device: it
            is refused, not read, as reading it could wait forever), is empty, is not
            valid UTF-8 or JSON, has
            a blank or non-string name, or its indices are not exactly 0..N-1. The
            message names the file.
    """
    name = os.fspath(path)
    try:
        with open_regular(name, "r", "labels file", encoding="utf-8-sig") as file:
            text = file.read()
    except NotRegularFileError as error:
        if error.kind == MISSING:
            raise ValueError(f"{name}: cannot read labels file (no such file)") from None
        raise ValueError(f"{name}: labels file is {error.kind}, not a regular file") from None
    except OSError as error:
        raise ValueError(f"{name}: cannot read labels file ({error.strerror or error})") from None
    except UnicodeDecodeError:
        raise ValueError(f"{name}: labels file is not UTF-8 text") from None
    if not text.strip():
        raise ValueError(f"{name}: labels file is empty; expected one class name per line")
    if name.lower().endswith(".json") or text.lstrip()[:1] in ("[", "{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"{name}: labels file is not valid JSON ({error})") from None
        return _parse_json(data, name)
    return _parse_text(text, name)


def _parse_text(text: str, name: str) -> list[str]:
    lines = [line.strip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    if not lines:
        raise ValueError(f"{name}: labels file is empty; expected one class name per line")
    for number, line in enumerate(lines, start=1):
        if not line:
            raise ValueError(
                f"{name}: line {number} is blank; expected one class name per line, "
                "with no gaps (a gap would shift every later index)"
            )
    return lines


def _parse_json(data: object, name: str) -> list[str]:
    if isinstance(data, list):
        items = list(enumerate(data))
    elif isinstance(data, dict):
        items = []
        for key, value in data.items():
            if isinstance(key, str) and not re.fullmatch(r"[0-9]+", key.strip()):
                raise ValueError(
                    f"{name}: key {key!r} is not a class index; expected keys 0..N-1"
                )
            items.append((int(key), value))
    else:
        raise ValueError(
            f"{name}: expected a JSON list of names or an object mapping index to name, "
            f"got {type(data).__name__}"
        )
    if not items:
        raise ValueError(f"{name}: labels file has no class names")
    indices = sorted(index for index, _ in items)
    if indices != list(range(len(items))):
        missing = sorted(set(range(len(items))) - set(indices))
        detail = f"missing {missing[0]}" if missing else "an index appears twice"
        raise ValueError(
            f"{name}: class indices must run 0..{len(items) - 1} without gaps ({detail})"
        )
    names = [""] * len(items)
    for index, value in items:
        names[index] = _json_name(value, index, name)
    return names


def _json_name(value: object, index: int, name: str) -> str:
    # Keras' imagenet_class_index.json maps "0" to ["n01440764", "tench"]: the name is last.
    if isinstance(value, list) and value:
        value = value[-1]
    if not isinstance(value, str) or not value.strip():
        raise ValueError(
            f"{name}: class {index} has no name (got {value!r}); expected a non-empty string"
        )
    return value.strip()


def resolve_class(spec: str | int, labels: list[str] | None, num_classes: int) -> int:
    """Turn a class given by index or by name into an index.

    An int, or a string of digits, is an index and must be in ``0..num_classes-1``.
    Any other string is a name, matched in this order: exactly; exactly ignoring case;
    as the start of exactly one name, ignoring case.

    Args:
        spec: An index, or a class name or the start of one.
        labels: The class names in index order, or None when the model has none.
        num_classes: How many classes the model outputs.

    Returns:
        The class index.

    Raises:
        ClassNameError: Out-of-range index, unknown or ambiguous name, a name without
            labels, or labels whose count differs from ``num_classes``. The message is
            one line that says how to list the classes (an unknown name: the close
            names, and every class when there are few).
        ValueError: ``num_classes`` is not a positive int or ``spec`` is not str or int.

    >>> resolve_class("Tench", ["tench", "goldfish"], 2)
    0
    >>> resolve_class("1", None, 2)
    1
    """
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f"num_classes must be a positive int, got {num_classes!r}")
    if isinstance(spec, bool) or not isinstance(spec, (int, str)):
        raise ValueError(f"class must be an index (int) or a name (str), got {spec!r}")
    if isinstance(spec, int):
        return _check_index(spec, num_classes)
    text = spec.strip()
    index = whole_number(text, signed=True)
    if index is not None:
        return _check_index(index, num_classes)
    if not text:
        raise ClassNameError(f"the class name is empty; {_INSPECT_HINT}")
    if labels is None:
        raise ClassNameError(
            f"class {text!r} is not an index and the model has no class names; pass "
            f"labels=FILE to name its classes, or give an index 0..{num_classes - 1}"
        )
    if len(labels) != num_classes:
        raise ClassNameError(
            f"the labels list has {len(labels)} names but the model has {num_classes} "
            f"classes; {_INSPECT_HINT}"
        )
    folded = text.casefold()
    for matches in (
        [i for i, label in enumerate(labels) if label == text],
        [i for i, label in enumerate(labels) if label.casefold() == folded],
        [i for i, label in enumerate(labels) if label.casefold().startswith(folded)],
    ):
        if len(matches) == 1:
            return matches[0]
        if matches:
            shown = ", ".join(f"{labels[i]!r} ({i})" for i in matches[:_MAX_CANDIDATES])
            more = len(matches) - _MAX_CANDIDATES
            extra = f" and {more} more" if more > 0 else ""
            raise ClassNameError(
                f"class {text!r} is ambiguous: it matches {shown}{extra}; {_INSPECT_HINT}"
            )
    hint = did_you_mean(text, labels, cutoff=0.75)  # among a thousand names, close ones
    suggestion = f" ({hint})" if hint else ""
    if len(labels) <= _LISTED_CLASSES:
        raise ClassNameError(f"unknown class {text!r}{suggestion}: the classes are "
                             f"{', '.join(labels)}")
    raise ClassNameError(f"unknown class {text!r}{suggestion}; {_INSPECT_HINT} (all "
                         f"{len(labels)})")


def _check_index(index: int, num_classes: int) -> int:
    if not 0 <= index < num_classes:
        raise ClassNameError(
            f"class index {index} is out of range: the model has {num_classes} classes "
            f"(0..{num_classes - 1}); {_INSPECT_HINT}"
        )
    return index
