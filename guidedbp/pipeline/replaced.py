"""Files a recomputed input no longer has: removed, so that OUT keeps one run's files.

A run that draws its maps otherwise than the earlier run into its OUT (other renders,
``--raw`` or a figure no longer asked for, class names in the file names) recomputes the
inputs that earlier run explained, and their new records name other files. The files an
input's earlier record named that its new record does not are guidedbp's own, made for
that input and listed by no manifest any more: they are removed as the new record is
delivered. Only those: a path of the earlier record that is absolute, climbs out of OUT
(``..``), passes through a symbolic link, differs from a new path in letter case only,
or is not a file guidedbp wrote (a PNG or figure without its mark, an ``.npy`` that is
not one) is left where it is, and nothing else in OUT is ever removed. A failed input
keeps its earlier files (its new record names none).
"""

from __future__ import annotations

import os
import posixpath
import stat

from guidedbp.figures import is_own_figure
from guidedbp.io import store
from guidedbp.io.write import is_own_png
from guidedbp.pipeline.resume import paths_of
from guidedbp.pipeline.stages import is_npy


def remove_replaced(output: str, earlier: list[str], record: dict) -> list[str]:
    """Remove the files of ``earlier`` (an input's earlier record's paths, relative to
    OUT) that its new ``record`` no longer names, where they are guidedbp's own.

    Returns:
        The paths removed. A file that cannot be removed is left (no error).
    """
    if record.get("status") != "ok" or not earlier:
        return []
    kept = {path.casefold() for target in record.get("targets") or []
            if isinstance(target, dict) for path in paths_of(target)}
    removed = []
    for relative in dict.fromkeys(earlier):  # in order, once each
        if relative.casefold() in kept or not _inside(relative):
            continue
        try:
            if _remove_own(output, relative):
                removed.append(relative)
        except OSError:
            continue
    return removed


def _inside(relative: str) -> bool:
    """A plain relative path below OUT: no root, no ``..``, no empty or ``.`` part."""
    parts = relative.split("/")
    return bool(relative) and not relative.startswith("/") and \
        posixpath.normpath(relative) == relative and ".." not in parts and \
        "\\" not in relative and not os.path.isabs(relative)


def _remove_own(output: str, relative: str) -> bool:
    if store.is_url(output):  # a store has no links: only objects
        path = store.join(output, relative)
        if not _is_own(path, relative):
            return False
        store.delete(path)
        return True
    folder = output
    for part in relative.split("/")[:-1]:  # a link would lead out of OUT
        folder = os.path.join(folder, part)
        if not stat.S_ISDIR(os.lstat(folder).st_mode):
            return False
    path = os.path.join(output, relative)
    if not stat.S_ISREG(os.lstat(path).st_mode) or not _is_own(path, relative):
        return False
    os.unlink(path)
    return True


def _is_own(path: str, relative: str) -> bool:
    if relative.endswith(".png"):
        return is_own_png(path) or is_own_figure(path)
    if relative.endswith(".npy"):
        return is_npy(path)
    return is_own_figure(path)
