"""Finding the images a run explains, and where each one's outputs go.

``collect_inputs`` expands files, directories (recursive by default) and globs
into an ordered list of :class:`InputItem`. Each item's output stem follows one
rule (:func:`output_stem`): the input's path as it was named or found, normalised,
with its file extension kept, so it depends on nothing but that path and never on
the other inputs of the run.
"""

from __future__ import annotations

import glob
import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from guidedbp.errors import GuidedbpError
from guidedbp.io.images import is_image_path
from guidedbp.io.write import is_own_png

_GLOB_CHARS = set("*?[")

#: The longest file name (one path component) most file systems take, in bytes.
MAX_NAME_BYTES = 255
#: Room kept in each output file name for what follows the stem
#: (``.CLASS.METHOD.RENDER.png``: a class slug of up to 64 bytes and the longest
#: method and render names).
_SUFFIX_ROOM = 120


class InputError(ValueError, GuidedbpError):
    """An INPUT argument that names nothing: a one-line message."""


@dataclass(frozen=True)
class InputItem:
    """One image to explain.

    Attributes:
        path: The file's path as given or found.
        output_stem: Where its outputs go, relative to OUT (:func:`output_stem`),
            e.g. ``"photos/a/cat.jpg"``.
        root: The folder it was found in: the folder argument, a glob's fixed part,
            or the file's own folder.
    """

    path: str
    output_stem: str
    root: str = "."

    @property
    def relative(self) -> str:
        """Its path below :attr:`root`, e.g. ``"a/cat.jpg"``."""
        return Path(os.path.relpath(self.path, self.root)).as_posix()


@dataclass
class Collected:
    items: list[InputItem] = field(default_factory=list)
    passed_over: int = 0  # files inside folders that are not images by extension


def output_stem(path: str) -> str:
    """Where an input's outputs go, relative to OUT: its path as named, normalised.

    The rule depends on the path alone, so an input's outputs never move when the
    run names other inputs too, and two different paths never share a stem:

    - the path is normalised (``a/./b/../x.jpg`` -> ``a/x.jpg``; an absolute path
      inside the current folder is taken relative to it) and keeps its file
      extension (``x.jpg`` and ``x.png`` stay apart);
    - ``%`` in a name becomes ``%25``; a leading ``..`` becomes ``%2E%2E`` and an
      absolute path starts with ``%2F`` (so every output stays inside OUT);
    - a component longer than the file system takes (255 bytes, less room for the
      ``.CLASS.METHOD.RENDER.png`` suffix) is cut and ends in ``~`` and 12 hex
      digits of its SHA-256, the same every time.

    >>> output_stem("photos/../photos/cat.jpg"), output_stem("../x.png"), output_stem("/d/x.png")
    ('photos/cat.jpg', '%2E%2E/x.png', '%2F/d/x.png')
    """
    normal = os.path.normpath(path)
    if os.path.isabs(normal):
        here = os.getcwd()
        if normal.startswith(here.rstrip(os.sep) + os.sep):
            normal = os.path.relpath(normal, here)  # $PWD/photos/x.jpg is photos/x.jpg
    parts = Path(normal).parts
    encoded = []
    for index, part in enumerate(parts):
        if index == 0 and os.path.isabs(normal):
            encoded.append("%2F")
        elif part == "..":
            encoded.append("%2E%2E")
        else:
            encoded.append(_fit_name(part.replace("%", "%25")))
    return "/".join(encoded)


def _fit_name(name: str) -> str:
    raw = os.fsencode(name)
    limit = MAX_NAME_BYTES - _SUFFIX_ROOM
    if len(raw) <= limit:
        return name
    digest = hashlib.sha256(raw).hexdigest()[:12]
    kept = raw[: limit - 13].decode("utf-8", "ignore") if _is_utf8(raw) else \
        os.fsdecode(raw[: limit - 13])
    return f"{kept}~{digest}"


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def collect_inputs(
    inputs: list[str], recursive: bool = True, exclude: str | os.PathLike | None = None
) -> Collected:
    """Expand INPUT arguments into images, in a stable order.

    A file named directly is always included (an unreadable one fails later, for
    that file alone); files found in folders or by globs are included by
    extension and the rest counted as passed over, as are non-regular files
    (FIFOs, sockets, devices), which are never opened. ``exclude`` (the output
    folder) is never walked into when it lies inside an input folder; where an
    input folder lies inside it (or is it), the PNGs guidedbp wrote there
    (:func:`~guidedbp.io.write.is_own_png`) are neither taken nor counted.

    Raises:
        InputError: For an argument that names no file, folder or glob match.
    """
    excluded = os.path.realpath(exclude) if exclude is not None else None
    found: list[tuple[str, str]] = []  # (path, root it was found under)
    collected = Collected()
    for argument in inputs:
        if os.path.isdir(argument):
            for path in _walk(argument, recursive, excluded):
                if _is_regular(path) and _is_output(path, excluded):
                    continue
                if is_image_path(path) and _is_regular(path):
                    found.append((path, argument))
                else:
                    collected.passed_over += 1
        elif os.path.exists(argument):
            found.append((argument, os.path.dirname(argument) or "."))
        elif _GLOB_CHARS & set(argument):
            matches = sorted(glob.glob(argument, recursive=recursive))
            if not matches:
                raise InputError(f"{argument!r} matches no file")
            root = _glob_root(argument)
            # As for folders: an output folder inside the glob's reach is not entered.
            skip_out = excluded is not None and not _within(os.path.realpath(root), excluded)
            for path in matches:
                if os.path.isdir(path) or (skip_out and _within(path, excluded)) or \
                        (_is_regular(path) and _is_output(path, excluded)):
                    continue  # a glob such as photos/**/*.png must not pick up our own maps
                if is_image_path(path) and _is_regular(path):
                    found.append((path, root))
                else:
                    collected.passed_over += 1
        else:
            raise InputError(f"input {argument!r} not found")
    collected.items = [
        InputItem(path, output_stem(path), root)
        for path, root in _unique(found)
    ]
    return collected


def _is_regular(path: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def _walk(folder: str, recursive: bool, excluded: str | None):
    """Files below ``folder`` in sorted order, without recursion (any depth works).

    Hidden names are skipped; links to folders are not followed; the output folder
    is not walked into (compared by device and inode: no path resolution per folder,
    which would cost a system call per level of every folder).
    """
    try:
        out = os.stat(excluded) if excluded is not None else None
    except OSError:
        out = None
    stack = [folder]
    while stack:
        current = stack.pop()
        try:
            entries = sorted(os.scandir(current), key=lambda entry: entry.name)
        except OSError:
            continue
        folders = []
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                if entry.is_dir(follow_symlinks=False):
                    info = entry.stat(follow_symlinks=False)
                    if out is None or (info.st_dev, info.st_ino) != (out.st_dev, out.st_ino):
                        folders.append(entry.path)
                elif not entry.is_dir():  # a link to a folder is not followed
                    yield entry.path
            except OSError:
                continue
        if recursive:
            stack.extend(reversed(folders))


def _is_output(path: str, excluded: str | None) -> bool:
    """A PNG that guidedbp wrote into the output folder ``excluded``."""
    if excluded is None or not path.lower().endswith(".png"):
        return False
    return _within(path, excluded) and is_own_png(path)


def _within(path: str, folder: str) -> bool:
    """Whether ``path`` is ``folder`` (a real path) or lies below it."""
    real = os.path.realpath(path)
    return real == folder or real.startswith(folder.rstrip(os.sep) + os.sep)


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
