"""An input's fingerprint: what its file was when a run read it.

Every ``ok`` manifest record keeps the fingerprint of its input (``input_file``), taken
just before the input is read, so that a resumed run tells an input replaced at the same
path from the one its maps were made of:

- a local file: ``{"size": ..., "mtime_ns": ...}`` (one ``stat``). A modification time
  in whole seconds is not to be trusted (``tar``, ``zip`` and ``cp -p`` from an archive
  set such times, as do file systems that keep no finer ones: two versions of a file of
  one size may share it), so such a file's fingerprint adds ``"sha256"``, 16 hex digits
  of its content's SHA-256;
- an object on a store: ``{"size": ..., "etag": ...}``, as the listing that found it
  gave them (no request of its own; a HEAD for an object named alone): the ETag is the
  store's own digest of the content, changed by any new upload.

Taken before the read, a fingerprint can only be older than the bytes read (a file
replaced meanwhile is recomputed next time), never newer.

>>> same({"size": 3, "mtime_ns": 5}, {"size": 3, "mtime_ns": 5}), same(None, {"size": 3})
(True, False)
"""

from __future__ import annotations

import hashlib
import os
import stat

from guidedbp.io import store
from guidedbp.io.inputs import InputItem

#: The record's key.
FIELD = "input_file"
#: Hex digits kept of a content digest.
_DIGEST_LENGTH = 16
_BLOCK = 1 << 20


def fingerprint(item: InputItem) -> dict:
    """The fingerprint of ``item``'s file or object as it is now.

    Raises:
        OSError: It cannot be found or read (its decoding, or its record, says why).
    """
    if store.is_url(item.path):
        size, etag = item.version if item.version is not None else store.version(item.path)
        return {"size": size, "etag": etag}
    status = os.stat(item.path)
    found = {"size": status.st_size, "mtime_ns": status.st_mtime_ns}
    if status.st_mtime_ns % 1_000_000_000 == 0:  # whole seconds: the content decides
        found["sha256"] = _content_digest(item.path)
    return found


def same(recorded, now: dict) -> bool:
    """Whether a record's fingerprint (``recorded``; ``None`` for a record from before
    fingerprints) is the one an input has ``now``."""
    return isinstance(recorded, dict) and recorded == now


def unchanged(recorded, item: InputItem) -> bool:
    """Whether ``item`` is still the file or object its record's fingerprint describes
    (:func:`same`); a file that cannot be read is not."""
    if not isinstance(recorded, dict):
        return False
    try:
        return same(recorded, fingerprint(item))
    except OSError:
        return False


def _content_digest(path: str) -> str:
    digest = hashlib.sha256()
    # O_NONBLOCK: a FIFO put in the file's place opens at once (and is refused).
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
                         | getattr(os, "O_BINARY", 0))
    with os.fdopen(descriptor, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise OSError(f"{path!r} is not a regular file")
        for block in iter(lambda: handle.read(_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()[:_DIGEST_LENGTH]
