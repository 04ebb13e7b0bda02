"""Refuse files that would block a reader: FIFOs, sockets, devices (and folders, missing files).

Opening a FIFO for reading waits until a writer opens the other end, which may be
never; reading a character device (``/dev/zero``, a terminal) may never end. Every
file guidedbp reads from a user (images, labels, expectations, baselines, models,
custom-objects files) goes through :func:`regular_file` or :func:`open_regular`
first, so such a path fails at once with a one-line message instead of hanging.

A leaf module: it imports nothing from guidedbp but :mod:`guidedbp.errors`.

>>> import os, tempfile
>>> folder = tempfile.mkdtemp()
>>> try:
...     regular_file(folder, "labels file")
... except NotRegularFileError as error:
...     print(error.kind)
a directory
"""

from __future__ import annotations

import os
import stat
from typing import IO

from guidedbp.errors import GuidedbpError

__all__ = ["MISSING", "NotRegularFileError", "file_kind", "open_regular", "regular_file"]

#: :attr:`NotRegularFileError.kind` of a path that names nothing.
MISSING = "missing"

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)
# Only reading: these flags keep open() from waiting for a FIFO's writer or taking a
# terminal as the controlling one. O_NONBLOCK is cleared again once the file is known
# to be regular (it means nothing for regular files, but the caller gets a plain file).
_OPEN_FLAGS = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
               | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))


class NotRegularFileError(ValueError, GuidedbpError):
    """A path that is missing or names something other than a regular file.

    ``str(error)`` is one line: ``"labels file 'x.txt' is a FIFO, not a regular file"``,
    ``"... is a directory, not a regular file"`` or ``"... does not exist"``.

    Attributes:
        path: The path as the caller gave it.
        what: What the file was meant to be (``"labels file"``).
        kind: :data:`MISSING`, or what it is instead: ``"a FIFO"``, ``"a socket"``,
            ``"a character device"``, ``"a block device"``, ``"a directory"`` or
            ``"not a regular file"``.
    """

    def __init__(self, path: str, what: str, kind: str) -> None:
        if kind == MISSING:
            message = f"{what} {path!r} does not exist"
        elif kind.startswith("a"):
            message = f"{what} {path!r} is {kind}, not a regular file"
        else:
            message = f"{what} {path!r} is {kind}"
        super().__init__(message)
        self.path, self.what, self.kind = path, what, kind

    def __reduce__(self):
        return (type(self), (self.path, self.what, self.kind))


def file_kind(mode: int) -> str | None:
    """What an ``st_mode`` is when it is not a regular file (``"a FIFO"``...), else None.

    >>> file_kind(stat.S_IFIFO), file_kind(stat.S_IFREG)
    ('a FIFO', None)
    """
    if stat.S_ISREG(mode):
        return None
    for test, kind in _KINDS:
        if test(mode):
            return kind
    return "not a regular file"


def regular_file(
    path: str | os.PathLike[str], what: str = "file", *, directory_ok: bool = False
) -> str:
    """Check, without opening it, that ``path`` is a regular file (symbolic links followed).

    Args:
        path: The file.
        what: What it is meant to be, for the message (``"labels file"``, ``"model"``).
        directory_ok: Accept a folder too (a SavedModel folder, say).

    Returns:
        ``os.fspath(path)``.

    Raises:
        NotRegularFileError: ``path`` does not exist (or a folder on its way is a file),
            or is a FIFO, socket, device or (unless ``directory_ok``) a folder.
        OSError: ``os.stat`` failed otherwise (permission denied on a parent folder, a
            loop of symbolic links).
    """
    name = os.fspath(path)
    try:
        mode = os.stat(name).st_mode
    except (FileNotFoundError, NotADirectoryError):
        raise NotRegularFileError(name, what, MISSING) from None
    kind = file_kind(mode)
    if kind is not None and not (directory_ok and stat.S_ISDIR(mode)):
        raise NotRegularFileError(name, what, kind)
    return name


def open_regular(path: str | os.PathLike[str], mode: str = "rb", what: str = "file",
                 **options) -> IO:
    """``open(path, mode, **options)`` for reading, refusing anything but a regular file.

    The file is opened without blocking (``O_NONBLOCK | O_NOCTTY``), checked with
    ``fstat`` (so a file swapped between a check and the open cannot slip through),
    then set back to blocking and handed to :func:`open`.

    Args:
        path: The file.
        mode: A reading mode: ``"r"`` or ``"rb"`` (``"rt"`` too).
        what: What it is meant to be, for the message.
        **options: Passed on to :func:`open` (``encoding``, ``newline``...).

    Returns:
        The open file object; the caller closes it (``with open_regular(...) as f:``).

    Raises:
        NotRegularFileError: As for :func:`regular_file` (folders are refused).
        OSError: Any other failure to open (``PermissionError``...).
        ValueError: ``mode`` is not a reading mode.
    """
    if mode not in ("r", "rb", "rt"):
        raise ValueError(f"mode must be 'r', 'rt' or 'rb' (reading), got {mode!r}")
    name = os.fspath(path)
    try:
        descriptor = os.open(name, _OPEN_FLAGS)
    except (FileNotFoundError, NotADirectoryError):
        raise NotRegularFileError(name, what, MISSING) from None
    except OSError:
        # Some kinds cannot be opened at all (a socket: ENXIO; a folder on Windows):
        # name the kind rather than the errno.
        regular_file(name, what)
        raise
    try:
        kind = file_kind(os.fstat(descriptor).st_mode)
        if kind is not None:
            raise NotRegularFileError(name, what, kind)
        if os.name == "posix":
            os.set_blocking(descriptor, True)
    except BaseException:
        os.close(descriptor)
        raise
    return open(descriptor, mode, **options)  # noqa: SIM115 - the caller closes it
