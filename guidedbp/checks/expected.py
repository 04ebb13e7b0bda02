"""``--expect FILE``: the class each image should be predicted as (numpy-free).

The file is CSV with two columns, ``image,class``; a first row ``image,class`` is a
header, blank lines and lines starting with ``#`` are skipped. ``class`` is an index
or a class name (resolved like ``--class``). ``image`` names an image by its path as
given on the command line (or found in a folder), or by its file name alone.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass

from guidedbp._files import open_regular


@dataclass(frozen=True)
class Expectation:
    """One row of the expectations file.

    Attributes:
        image: The image's path or file name, as written.
        class_spec: The class as written (index or name).
        line: The row's line number, for messages.
        class_index: The resolved class index (``None`` until resolved).
    """

    image: str
    class_spec: str
    line: int
    class_index: int | None = None


def read_expectations(path: str | os.PathLike) -> list[Expectation]:
    """Parse an expectations CSV.

    Raises:
        ValueError: For an unreadable file, a path that is not a regular file (a FIFO
            is refused at once, not waited on), a row without exactly two non-empty
            fields, or a file without rows; the message names the line.
    """
    name = os.fspath(path)
    try:
        with open_regular(name, "r", "expectations file", newline="",
                          encoding="utf-8-sig") as handle:
            rows = list(csv.reader(handle))
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise ValueError(f"cannot read {name}: {error}") from error
    expectations = []
    for line, row in enumerate(rows, start=1):
        fields = [field.strip() for field in row]
        if not fields or not any(fields) or fields[0].startswith("#"):
            continue
        if not expectations and [f.lower() for f in fields] == ["image", "class"]:
            continue  # header
        if len(fields) != 2 or not all(fields):
            raise ValueError(f"{name}, line {line}: expected 'image,class', got {','.join(row)!r}")
        expectations.append(Expectation(fields[0], fields[1], line))
    if not expectations:
        raise ValueError(f"{name} has no 'image,class' rows")
    return expectations


def resolve_expectations(
    expectations: list[Expectation], labels: list[str] | None, num_classes: int
) -> list[Expectation]:
    """Resolve each row's class to an index with :func:`guidedbp.models.labels.resolve_class`.

    Raises:
        ClassNameError: For a class that is out of range, unknown or ambiguous; the
            message names the line.
    """
    from guidedbp.models.labels import ClassNameError, resolve_class

    resolved = []
    for row in expectations:
        try:
            index = resolve_class(row.class_spec, labels, num_classes)
        except ClassNameError as error:
            raise ClassNameError(f"line {row.line} of expect=FILE: {error}") from None
        resolved.append(Expectation(row.image, row.class_spec, row.line, index))
    return resolved


def matching(expectation: Expectation, images) -> list:
    """The images a row names: by path (same file), else by file name when the row
    names a bare file name (every image of that name)."""
    wanted = os.path.abspath(expectation.image)
    by_path = [image for image in images
               if image.path is not None and os.path.abspath(image.path) == wanted]
    if by_path or os.path.basename(expectation.image) != expectation.image:
        return by_path
    return [image for image in images
            if image.path is not None and os.path.basename(image.path) == expectation.image]
