"""Finding the images a run explains, and where each one's outputs go.

``collect_inputs`` expands files, directories (recursive by default) and globs
into an ordered list of :class:`InputItem`. Each item's output stem follows one
rule (:func:`output_stem`): each INPUT argument maps under its own last path
component (a file: its name; a folder: its name, then the path below it; a glob:
its folder part before the first wildcard, likewise), with the file extension
kept. A stem so depends on its argument alone, never on the other arguments of the
run; two arguments that would write under the same name are refused.
"""

from __future__ import annotations

import glob
import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from guidedbp.errors import GuidedbpError
from guidedbp.io import store
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
            e.g. ``"photos/a/cat.jpg"`` for ``/data/photos/a/cat.jpg`` found in the
            folder argument ``/data/photos``.
        root: The folder it was found in: the folder argument, a glob's fixed part,
            or the file's own folder.
        argument: The INPUT argument that named or found it.
        skipped: Why it is not explained, for an object listed on a store that no output
            path can name (:data:`EMPTY_SEGMENT`); ``None`` for an image to explain.
        version: An object's ``(size, ETag)`` as the listing that found it gave them
            (:func:`guidedbp.io.store.version`); ``None`` for a local file.
    """

    path: str
    output_stem: str
    root: str = "."
    argument: str = ""
    skipped: str | None = None
    version: tuple | None = None

    @property
    def relative(self) -> str:
        """Its path below :attr:`root`, e.g. ``"a/cat.jpg"``."""
        return Path(os.path.relpath(self.path, self.root)).as_posix()


#: Why an object whose key has an empty segment is not explained: OUT's paths have none, so
#: its outputs could only go where another object's go (``a//b.png`` at ``a/b.png``).
EMPTY_SEGMENT = ("its key has an empty segment ('//', or '/' at its start or end), which no "
                 "output path can hold: copy it to a key without one")
#: Why the objects below a prefix with an empty segment are not explained, on a store whose
#: library cannot list them.
UNLISTABLE = ("a prefix with an empty segment ('//'), which this store's library cannot "
              "list: copy its objects to keys without one")


@dataclass
class Collected:
    items: list[InputItem] = field(default_factory=list)
    passed_over: int = 0  # files inside folders that are not images by extension
    hidden: int = 0  # images and folders inside folders whose names start with "."
    # Objects on a store that cannot be explained, each with its reason (``skipped``).
    skipped: list[InputItem] = field(default_factory=list)


def output_stem(path: str, under: str | None = None) -> str:
    """Where an input's outputs go, relative to OUT: under its argument's own name.

    ``under`` is the folder the input was found in by its INPUT argument (the folder
    argument, or a glob's folder part before its first wildcard); ``None`` for a file
    named directly. The rule depends on that argument alone, so an input's outputs
    never move when the run names other inputs too:

    - a file named directly goes under its own name (``../photos/cat.jpg`` ->
      ``cat.jpg``), its extension kept (``x.jpg`` and ``x.png`` stay apart);
    - a file found in a folder goes under the folder's own last component, then its
      path below it (``/data/photos`` and ``/data/photos/a/cat.jpg`` ->
      ``photos/a/cat.jpg``); a folder without a name of its own (``.``, ``..``,
      ``/``, or no folder part: ``*.png``) adds nothing (``a/cat.jpg``);
    - a component longer than the file system takes (255 bytes, less room for the
      ``.CLASS.METHOD.RENDER.png`` suffix) is cut and ends in ``~`` and 12 hex
      digits of its SHA-256, the same every time.

    Nothing in a stem is ``..`` or absolute, so every output stays inside OUT.

    >>> output_stem("../photos/cat.jpg"), output_stem("/d/photos/a/x.png", "/d/photos/")
    ('cat.jpg', 'photos/a/x.png')
    >>> output_stem("a/x.png", "."), output_stem("../../x.png", "../..")
    ('a/x.png', 'x.png')
    """
    normal = os.path.normpath(path)
    if under is None:
        parts = [os.path.basename(normal)]
    else:
        below = os.path.relpath(normal, os.path.normpath(under))
        parts = [name for name in [root_name(under)] if name]
        parts += Path(below).parts
    if not parts or any(part in ("", ".", "..") for part in parts) or os.path.isabs(parts[0]):
        raise InputError(f"{path!r} does not lie below {under!r}")  # cannot happen: found there
    return "/".join(_fit_name(part) for part in parts)


def root_name(folder: str) -> str:
    """The name a folder argument's inputs go under: its last path component as
    written (``/data/photos/`` -> ``photos``), or ``""`` for ``.``, ``..`` and ``/``.

    >>> root_name("/data/photos/"), root_name("."), root_name("a/.."), root_name("/")
    ('photos', '', '', '')
    """
    name = os.path.basename(os.path.normpath(folder))
    return "" if name in ("", ".", "..") else name


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
    inputs: list[str], recursive: bool = True, exclude: str | os.PathLike | None = None,
    unique_names: bool = True,
) -> Collected:
    """Expand INPUT arguments into images, in a stable order, each at its output stem.

    A file named directly is always included (an unreadable one fails later, for
    that file alone); files found in folders or by globs are included by
    extension and the rest counted as passed over, as are non-regular files
    (FIFOs, sockets, devices), which are never opened. Hidden names (starting with
    ``.``, as ``ls`` and the shell's globs treat them) inside folders are skipped;
    hidden images and folders are counted. ``exclude`` (the output folder) is never
    walked into when it lies inside an input folder; where an input folder lies
    inside it (or is it), the PNGs guidedbp wrote there
    (:func:`~guidedbp.io.write.is_own_png`) are neither taken nor counted. On a
    store, an image whose key has an empty segment (``photos//x.png``) is no item but
    is kept in ``skipped`` with its reason (:func:`_count_unnamed`).

    Raises:
        InputError: For an argument that names no file, folder or glob match (or a
            bucket that does not exist), a
            glob whose matches leave its folder part (``a/*/../../b.png``), or two
            arguments whose outputs would go under the same name
            (:func:`output_stem`: ``a/photos`` and ``b/photos``), unless
            ``unique_names`` is false (a caller that writes nothing at the stems).
    """
    out_url = exclude if store.is_url(exclude) else None
    excluded = os.path.realpath(exclude) if exclude is not None and out_url is None else None
    found: list[InputItem] = []
    collected = Collected()
    for argument in inputs:
        if store.is_url(argument):
            found += _collect_url(argument, recursive, out_url, collected)
        elif os.path.isdir(argument):
            for path in _walk(argument, recursive, excluded, collected):
                if _is_regular(path) and _is_output(path, excluded):
                    continue
                if is_image_path(path) and _is_regular(path):
                    found.append(_item(path, argument, argument))
                else:
                    collected.passed_over += 1
        elif os.path.exists(argument):
            found.append(_item(argument, None, argument))
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
                    if _escapes(path, root):
                        raise InputError(
                            f"{argument!r} matches {path!r}, outside its folder part "
                            f"{root!r}: name that file or its folder instead")
                    found.append(_item(path, root, argument))
                else:
                    collected.passed_over += 1
        else:
            raise InputError(f"input {argument!r} not found")
    collected.items = _unique(found)
    if unique_names:
        _refuse_shared_names(collected.items)
    return collected


def _collect_url(argument: str, recursive: bool, out_url: str | None,
                 collected: Collected) -> list[InputItem]:
    """The images an object-store URL names: one object, a prefix (walked as a folder,
    one prefix's listing at a time) or a glob; the output prefix ``out_url`` is never
    entered, as locally."""
    out = out_url.rstrip("/") if out_url is not None else None
    path_part = argument.split("://", 1)[1]
    versions: dict[str, tuple] = {}  # each object's (size, ETag), from its listing
    try:
        if _GLOB_CHARS & set(path_part):
            root = _url_glob_root(argument)
            matches = store.glob(argument, versions)
            if not matches:
                _refuse_missing_bucket(argument)
                raise InputError(f"{argument!r} matches no object")
            found = []
            for url in matches:
                if out is not None and _url_within(url, out):
                    continue
                if is_image_path(url):
                    found.append(_item(url, root, argument, versions.get(url)))
                else:
                    collected.passed_over += 1
            return found
        try:
            return [_item(argument, None, argument, store.version(argument))]
        except FileNotFoundError:
            pass
        if not store.is_prefix(argument):
            _refuse_missing_bucket(argument)
            raise InputError(f"input {argument!r} not found (no object and nothing below "
                             "that prefix)")
        found, unnamed = [], []
        for prefix, folders, files in store.walk(argument, recursive, unnamed, versions):
            collected.hidden += sum(name.startswith(".") for name in folders)
            folders[:] = [name for name in folders if not name.startswith(".") and not (
                out is not None and _url_within(store.join(prefix, name), out))]
            for name in files:
                if name.startswith("."):
                    collected.hidden += is_image_path(name)
                elif is_image_path(name):
                    url = store.join(prefix, name)
                    found.append(_item(url, argument, argument, versions.pop(url, None)))
                else:
                    collected.passed_over += 1
            versions.clear()  # the other objects' of this prefix
        for url, size in unnamed:
            _count_unnamed(url, size, argument, collected)
        return found
    except store.StoreError:
        raise
    except OSError as error:
        raise InputError(f"cannot list {argument!r}: {store.describe(error)}") from None


def _refuse_missing_bucket(argument: str) -> None:
    """An input URL that names nothing because its bucket does not exist: say so."""
    missing = store.missing_bucket(argument)
    if missing is not None:
        raise InputError(f"input {argument!r}: {missing}")


def _count_unnamed(url: str, size: int | None, argument: str, collected: Collected) -> None:
    """Count an object whose key has an empty segment (:func:`guidedbp.io.store.walk`'s
    ``odd``) as a file in a folder is counted: an empty one whose key ends in ``/`` is a
    folder marker (what a console's "create folder" writes), passed over as other objects
    that are no images; a hidden image is hidden; an image, or an object with something in
    it whose key ends in ``/`` (no name, so no extension to judge it by), is skipped with
    :data:`EMPTY_SEGMENT`."""
    name = url.rsplit("/", 1)[-1]
    if url.endswith("/") and size == 0:
        collected.passed_over += 1
    elif name.startswith("."):
        collected.hidden += is_image_path(name)
    elif url.endswith("/") or is_image_path(name):
        below = url[len(argument.rstrip("/")) + 1:]  # as it is: for the shard's hash alone
        stem = "/".join(part for part in (root_name(argument), below) if part)
        reason = UNLISTABLE if size is None else EMPTY_SEGMENT
        collected.skipped.append(InputItem(url, stem, argument, argument, skipped=reason))
    else:
        collected.passed_over += 1


def _url_within(url: str, prefix: str) -> bool:
    return url.rstrip("/") == prefix or url.startswith(prefix + "/")


def _url_glob_root(pattern: str) -> str:
    """A URL glob's prefix before its first wildcard (``s3://b/photos/*/*.jpg`` ->
    ``s3://b/photos``)."""
    protocol, path = pattern.split("://", 1)
    fixed = []
    for part in path.split("/"):
        if _GLOB_CHARS & set(part):
            break
        fixed.append(part)
    return f"{protocol}://" + "/".join(fixed)


def _item(path: str, under: str | None, argument: str, version: tuple | None = None
          ) -> InputItem:
    root = under if under is not None else os.path.dirname(path) or "."
    return InputItem(path, output_stem(path, under), root, argument, version=version)


def _escapes(path: str, root: str) -> bool:
    below = os.path.relpath(os.path.normpath(path), os.path.normpath(root))
    return below == ".." or below.startswith(".." + os.sep)


def _refuse_shared_names(items: list[InputItem]) -> None:
    """Refuse two arguments whose outputs would go under one name in OUT.

    An argument with a name of its own (a file, a named folder or glob root) claims
    that name whole; one without (``.``, ``..``, ``*.png``) claims each of its stems
    and, for others' names, their first components. Compared without letter case,
    which a case-insensitive disk ignores.
    """
    names: dict[str, str] = {}  # a name claimed whole (casefolded) -> its argument
    tops: dict[str, str] = {}  # the first component of a nameless argument's stem -> it
    stems: dict[str, str] = {}  # a nameless argument's stem (casefolded) -> it
    for item in items:
        first = item.output_stem.split("/", 1)[0]
        top, stem = first.casefold(), item.output_stem.casefold()
        if item.path == item.argument or root_name(item.root):  # a file, a named folder
            claims = [names.get(top), tops.get(top)]
            names.setdefault(top, item.argument)
        else:
            claims = [names.get(top), stems.get(stem)]
            stems.setdefault(stem, item.argument)
            tops.setdefault(top, item.argument)
        other = next((claim for claim in claims if claim not in (None, item.argument)), None)
        if other is not None:
            raise InputError(
                f"inputs {other!r} and {item.argument!r} would both write their maps under "
                f"{first!r} in the output folder: explain them into separate output "
                "folders, or rename one")


def _is_regular(path: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def _walk(folder: str, recursive: bool, excluded: str | None, collected: Collected):
    """Files below ``folder`` in sorted order, without recursion (any depth works).

    Hidden names are skipped (hidden images and folders counted in ``collected``);
    links to folders are not followed; the output folder is not walked into
    (compared by device and inode: no path resolution per folder, which would cost a
    system call per level of every folder).
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
            try:
                if entry.is_dir(follow_symlinks=False):
                    info = entry.stat(follow_symlinks=False)
                    if out is not None and (info.st_dev, info.st_ino) == (out.st_dev, out.st_ino):
                        continue
                    if entry.name.startswith("."):
                        collected.hidden += 1  # .git, .cache: not walked, but said
                    else:
                        folders.append(entry.path)
                elif entry.name.startswith("."):
                    collected.hidden += is_image_path(entry.name)  # ..photo.jpg: said
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
    """The folder part of ``pattern`` before its first wildcard, normalised first
    (``a/*/../b/*.png`` -> ``a/b``), or ``"."``."""
    parts = Path(os.path.normpath(pattern)).parts
    fixed = []
    for part in parts:
        if _GLOB_CHARS & set(part):
            break
        fixed.append(part)
    return str(Path(*fixed)) if fixed else "."


def _unique(found: list[InputItem]) -> list[InputItem]:
    """The items in order, each file once (the first argument that reaches it keeps it)."""
    seen, unique = set(), []
    for item in found:
        key = item.path if store.is_url(item.path) else os.path.realpath(item.path)
        if key not in seen:
            seen.add(key)
            unique.append(item)
    return unique
