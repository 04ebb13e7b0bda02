"""Finding the images a run explains, and where each one's outputs go.

``collect_inputs`` expands files, directories (recursive by default) and globs
into an ordered list of :class:`InputItem`, each with the output path stem that
mirrors the input's path relative to the folder it was found under.
"""

from __future__ import annotations

import glob
import os
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from guidedbp import METHODS
from guidedbp.errors import GuidedbpError
from guidedbp.io.images import is_image_path
from guidedbp.render import RENDERS

_GLOB_CHARS = set("*?[")

# What a run writes into its output folder: STEM[.CLASS].METHOD.RENDER.png,
# STEM[.CLASS].METHOD.npy and manifest.jsonl. There they are never inputs.
_OUTPUT_NAME = re.compile(
    rf"\.(?:{'|'.join(METHODS)})\.(?:(?:{'|'.join(RENDERS)})\.png|npy)$|^manifest\.jsonl$"
)


class InputError(ValueError, GuidedbpError):
    """An INPUT argument that names nothing: a one-line message."""


@dataclass(frozen=True)
class InputItem:
    """One image to explain.

    Attributes:
        path: The file's path as given or found.
        output_stem: Relative output path without extension, e.g. ``"a/cat"``.
    """

    path: str
    output_stem: str


@dataclass
class Collected:
    items: list[InputItem] = field(default_factory=list)
    passed_over: int = 0  # files inside folders that are not images by extension


def collect_inputs(
    inputs: list[str], recursive: bool = True, exclude: str | os.PathLike | None = None
) -> Collected:
    """Expand INPUT arguments into images, in a stable order.

    A file named directly is always included (an unreadable one fails later, for
    that file alone); files found in folders or by globs are included by
    extension and the rest counted as passed over. ``exclude`` (the output
    folder) is never walked into, and the maps and manifest a run wrote there are
    never taken or counted, even when that folder is an INPUT folder itself or
    lies under a glob's reach.

    Raises:
        InputError: For an argument that names no file, folder or glob match.
    """
    excluded = os.path.realpath(exclude) if exclude is not None else None
    found: list[tuple[str, str]] = []  # (path, root it was found under)
    collected = Collected()
    for argument in inputs:
        if os.path.isdir(argument):
            root = argument
            for path in _walk(argument, recursive, excluded):
                if is_image_path(path):
                    found.append((path, root))
                else:
                    collected.passed_over += 1
        elif os.path.exists(argument):
            found.append((argument, os.path.dirname(argument) or "."))
        elif _GLOB_CHARS & set(argument):
            matches = sorted(glob.glob(argument, recursive=recursive))
            if not matches:
                raise InputError(f"{argument!r} matches no file")
            root = _glob_root(argument)
            for path in matches:
                if _is_output(path, excluded):
                    continue  # a glob such as photos/**/*.png must not pick up our own maps
                if os.path.isfile(path) and is_image_path(path):
                    found.append((path, root))
                elif os.path.isfile(path):
                    collected.passed_over += 1
        else:
            raise InputError(f"input {argument!r} not found")
    collected.items = _assign_outputs(_unique(found))
    return collected


def _walk(folder: str, recursive: bool, excluded: str | None):
    for current, dirs, files in os.walk(folder):
        dirs[:] = sorted(
            d for d in dirs
            if not d.startswith(".") and os.path.realpath(os.path.join(current, d)) != excluded
        )
        for name in sorted(files):
            path = os.path.join(current, name)
            if not name.startswith(".") and not _is_output(path, excluded):
                yield path
        if not recursive:
            dirs[:] = []


def _is_output(path: str, excluded: str | None) -> bool:
    """A map or manifest that a run wrote into the output folder ``excluded``."""
    if excluded is None or not _OUTPUT_NAME.search(os.path.basename(path)):
        return False
    return os.path.realpath(path).startswith(excluded.rstrip(os.sep) + os.sep)


def _glob_root(pattern: str) -> str:
    parts = Path(pattern).parts
    fixed = []
    for part in parts:
        if _GLOB_CHARS & set(part):
            break
        fixed.append(part)
    return str(Path(*fixed)) if fixed else "."


def _unique(found: list[tuple[str, str]]) -> list[tuple[str, str]]:
    seen, unique = set(), []
    for path, root in found:
        key = os.path.realpath(path)
        if key not in seen:
            seen.add(key)
            unique.append((path, root))
    return unique


def _assign_outputs(found: list[tuple[str, str]]) -> list[InputItem]:
    """Output stems relative to the roots, collision-free.

    With one root, paths are relative to it; with several, relative to their
    common folder, so ``a/cat.jpg`` and ``b/cat.jpg`` stay apart. Two images with
    the same stem in one folder (``cat.jpg``, ``cat.png``) keep their extension
    in the stem (``cat_jpg``, ``cat_png``); a stem that still clashes (with a
    file called ``cat_jpg.png``, or one differing only in letter case, which is
    the same file on case-insensitive disks) gets ``_2``, ``_3``... in input order.
    """
    roots = {os.path.abspath(root) for _, root in found}
    common = os.path.commonpath(sorted(roots)) if len(roots) > 1 else None
    relative = []
    for path, root in found:
        base = common if common is not None else os.path.abspath(root)
        relative.append(os.path.relpath(os.path.abspath(path), base))
    stems = defaultdict(list)
    for rel in relative:
        stems[os.path.splitext(rel)[0].lower()].append(rel)
    items, taken = [], set()
    for (path, _), rel in zip(found, relative):
        stem, extension = os.path.splitext(rel)
        if len(stems[stem.lower()]) > 1:
            stem = f"{stem}_{extension.lstrip('.').lower()}"
        unique, number = stem, 2
        while unique.lower() in taken:
            unique, number = f"{stem}_{number}", number + 1
        taken.add(unique.lower())
        items.append(InputItem(path=path, output_stem=Path(unique).as_posix()))
    return items
