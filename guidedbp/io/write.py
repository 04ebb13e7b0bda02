"""Write results to disk atomically and deterministically (numpy and Pillow only).

Every file is written to a hidden temporary file in the target's folder
(``.NAME.PID.RANDOM.tmp``), then moved over the target with ``os.replace``,
which is atomic on POSIX and Windows when both live on one file system. A run
stopped at any instant therefore leaves either the old file or the complete new
one, never a truncated one. An error inside this module removes the temporary
file; only a hard kill (SIGKILL) can leave a hidden ``.tmp`` file behind, and
the target is still whole. ``durable=True`` adds ``fsync`` calls so that files
also survive a power loss.

PNG encoding is deterministic: the same array gives the same bytes on every run
(:mod:`guidedbp.io.png`: fixed filters, compression level and strategy, no timestamp;
one text chunk, guidedbp's mark).

>>> import numpy as np
>>> png = encode_png(np.zeros((2, 3), np.uint8))
>>> png[:8] == b"\\x89PNG\\r\\n\\x1a\\n" and png == encode_png(np.zeros((2, 3), np.uint8))
True
"""

from __future__ import annotations

import contextlib
import io
import os
import secrets

import numpy as np

from guidedbp.io import png, store

__all__ = [
    "PNG_COMPRESS_LEVEL",
    "atomic_write_bytes",
    "encode_png",
    "is_own_png",
    "is_whole_png",
    "make_folders",
    "save_npy",
    "save_png",
]

#: zlib level for PNG output: a fixed value keeps the bytes reproducible.
PNG_COMPRESS_LEVEL = 6
#: The text chunk every PNG guidedbp writes carries, right after IHDR.
_MARK = ("Software", "guidedbp")
_MARK_BYTES = b"tEXt" + _MARK[0].encode() + b"\x00" + _MARK[1].encode()
_MARK_READ = 8 + 25 + 8 + len(_MARK_BYTES)  # signature, IHDR, the text chunk's header


def _temporary_path(path: str) -> str:
    folder, name = os.path.split(path)
    return os.path.join(folder, f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


def _fsync_folder(folder: str) -> None:
    """Make the rename itself durable where the OS allows it (POSIX); best effort."""
    if os.name != "posix":
        return
    with contextlib.suppress(OSError):
        descriptor = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def make_folders(folder: str | os.PathLike[str]) -> None:
    """``os.makedirs(folder, exist_ok=True)`` without recursion, so any depth works
    (``os.makedirs`` recurses once per missing level)."""
    missing, current = [], os.path.abspath(os.fspath(folder))
    while not os.path.isdir(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for path in reversed(missing):
        try:
            os.mkdir(path)
        except FileExistsError:
            if not os.path.isdir(path):
                raise


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, durable: bool = False) -> None:
    """Write ``data`` to ``path`` so that no reader ever sees a partial file.

    The data goes to a temporary file in the same folder, which is renamed into
    place: a process killed at any instant leaves either the old file or the new
    one, never a truncated one. Parent folders are created as needed. The new
    file gets the usual permissions (``0o666`` less the umask).

    Args:
        path: Target file; an existing file is replaced.
        data: The complete contents (``bytes``, ``bytearray`` or ``memoryview``).
        durable: Also ``fsync`` the file and its folder, so that the file survives
            a power loss too. Off by default: it costs milliseconds per file and a
            killed process does not need it.

    Raises:
        TypeError: If ``data`` is not bytes-like.
        ValueError: If ``path`` is empty or names a folder (ends with a separator).
        OSError: If the folder cannot be created or the file cannot be written
            or moved into place; the temporary file is removed first and an
            existing target is left untouched.

    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> atomic_write_bytes(os.path.join(folder, "a", "b.txt"), b"hello")
    >>> open(os.path.join(folder, "a", "b.txt"), "rb").read()
    b'hello'
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"data must be bytes, bytearray or memoryview, got {type(data).__name__}")
    target = os.fspath(path)
    if not target or os.path.basename(target) == "":
        raise ValueError(f"path must name a file, got {target!r}")
    if store.is_url(target):  # a PUT is whole or nothing: the store's atomic write
        store.put(target, bytes(data))
        return
    folder = os.path.dirname(os.path.abspath(target))
    make_folders(folder)
    temporary = _temporary_path(os.path.join(folder, os.path.basename(target)))
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    descriptor = os.open(temporary, flags, 0o666)
    try:
        try:
            remaining = memoryview(data).cast("B")
            while remaining:  # os.write may write less than asked
                remaining = remaining[os.write(descriptor, remaining):]
            if durable:
                os.fsync(descriptor)
        finally:
            os.close(descriptor)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    if durable:
        _fsync_folder(folder)


def _check_picture(array: np.ndarray) -> np.ndarray:
    picture = np.asarray(array)
    if picture.dtype != np.uint8:
        raise ValueError(f"PNG array must have dtype uint8, got {picture.dtype}")
    if picture.ndim == 3 and picture.shape[2] == 1:
        picture = picture[:, :, 0]
    if not (picture.ndim == 2 or (picture.ndim == 3 and picture.shape[2] == 3)):
        raise ValueError("PNG array must have shape (H, W), (H, W, 1) or (H, W, 3), "
                         f"got shape {np.shape(array)}")
    if picture.shape[0] == 0 or picture.shape[1] == 0:
        raise ValueError(f"PNG array must not be empty, got shape {np.shape(array)}")
    return np.ascontiguousarray(picture)


def encode_png(array: np.ndarray) -> bytes:
    """Encode a picture as PNG bytes, identically on every run.

    Args:
        array: ``uint8`` of shape ``(H, W)`` or ``(H, W, 1)`` (saved as 8-bit
            grayscale) or ``(H, W, 3)`` (saved as 8-bit RGB).

    Returns:
        The PNG file's bytes: IHDR, one ``tEXt`` chunk ``Software: guidedbp`` (how
        guidedbp recognises its own outputs, :func:`is_own_png`), IDAT and IEND.

    Raises:
        ValueError: If ``array`` is not ``uint8`` of one of those shapes, or is empty.
    """
    return png.encode(_check_picture(array), {_MARK[0]: _MARK[1]}, level=PNG_COMPRESS_LEVEL)


def is_own_png(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a PNG that guidedbp wrote (its ``Software`` text chunk).

    Reads the first bytes only. Call it on regular files: opening a FIFO blocks.

    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> save_png(os.path.join(folder, "a.png"), np.zeros((2, 2), np.uint8))
    >>> is_own_png(os.path.join(folder, "a.png"))
    True
    """
    try:
        if store.is_url(path):
            head = store.read_range(path, 0, _MARK_READ) or b""
        else:
            with open(path, "rb") as handle:
                head = handle.read(_MARK_READ)
    except OSError:
        return False
    return head.startswith(b"\x89PNG\r\n\x1a\n") and _MARK_BYTES in head


def is_whole_png(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a non-empty PNG that ends in its IEND chunk (a cheap check of
    a file left by an earlier run: a truncated or emptied file is not whole)."""
    if store.is_url(path):
        try:
            found = store.head_and_tail(path, 8, 12)
        except OSError:
            return False
        return found is not None and found[2] >= 20 and found[0] == b"\x89PNG\r\n\x1a\n" \
            and found[1][4:8] == b"IEND"
    try:
        with open(path, "rb") as handle:
            head = handle.read(8)
            handle.seek(0, os.SEEK_END)
            if handle.tell() < 8 + 12:
                return False
            handle.seek(-12, os.SEEK_END)
            tail = handle.read(12)
    except OSError:
        return False
    return head == b"\x89PNG\r\n\x1a\n" and tail[4:8] == b"IEND"


def save_png(path: str | os.PathLike[str], array: np.ndarray) -> None:
    """Save a picture as a PNG file atomically (see :func:`encode_png`).

    Args:
        path: Target file; parent folders are created.
        array: ``uint8`` of shape ``(H, W)``, ``(H, W, 1)`` or ``(H, W, 3)``.

    Raises:
        ValueError: If ``array`` cannot be encoded (nothing is written then).
        OSError: If the file cannot be written.
    """
    atomic_write_bytes(path, encode_png(array))


def save_npy(path: str | os.PathLike[str], array: np.ndarray) -> None:
    """Save an array in NumPy's ``.npy`` format atomically, without pickling.

    Args:
        path: Target file; parent folders are created. No suffix is added.
        array: A numeric or boolean array.

    Raises:
        ValueError: If ``array`` holds Python objects (it would need pickle).
        OSError: If the file cannot be written.
    """
    atomic_write_bytes(path, encode_npy(array))


def encode_npy(array: np.ndarray) -> bytes:
    """An array in NumPy's ``.npy`` format, without pickling (:func:`save_npy`'s bytes).

    Raises:
        ValueError: If ``array`` holds Python objects (it would need pickle).
    """
    values = np.asarray(array)
    if values.dtype.hasobject:
        raise ValueError(f"array must not hold Python objects, got dtype {values.dtype}")
    buffer = io.BytesIO()
    np.save(buffer, values, allow_pickle=False)
    return buffer.getvalue()
