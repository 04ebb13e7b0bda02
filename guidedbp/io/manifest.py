"""``manifest.jsonl``: one JSON object per input, written as the run goes.

Each record is one line, written with one ``write`` call on a file opened for
appending; a write that fails part-way (disk full, file-size limit) is cut back
off, so the file only ever holds whole lines. The manifest is never reached
through a link: a symbolic link in its place is refused, not followed.
"""

from __future__ import annotations

import json
import os

from guidedbp.errors import GuidedbpError


class ManifestError(GuidedbpError):
    """The manifest cannot be written (a link in its place, a full disk); one line."""


class ManifestWriter:
    """Appends one JSON line per record, whole or not at all, so a killed run keeps
    what it did.

    The file is started afresh for each run: it describes that run.

    Raises:
        ManifestError: When the file cannot be opened (a symbolic link, a folder) or a
            record cannot be written; the lines before it stay whole.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        flags = (os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND
                 | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
        if os.path.islink(self.path):
            raise ManifestError(f"{self.path!r} is a symbolic link: refusing to write through it")
        try:
            self._descriptor: int | None = os.open(self.path, flags, 0o666)
        except OSError as error:
            raise ManifestError(f"cannot write {self.path!r}: {error.strerror}") from None
        self._size = 0

    def write(self, record: dict) -> None:
        line = (json.dumps(record, sort_keys=False) + "\n").encode("utf-8", "surrogateescape")
        try:
            written = os.write(self._descriptor, line)
        except OSError as error:
            self._cut_back()
            raise ManifestError(f"cannot append to {self.path!r}: {error.strerror}; it holds "
                                "the records written before") from None
        if written != len(line):  # a short write: the disk or the file-size limit is full
            self._cut_back()
            raise ManifestError(f"cannot append to {self.path!r}: no room for a whole record; "
                                "it holds the records written before")
        self._size += written

    def _cut_back(self) -> None:
        try:
            os.ftruncate(self._descriptor, self._size)
        except OSError:
            pass

    def close(self) -> None:
        if self._descriptor is not None:
            try:
                os.fsync(self._descriptor)
            except OSError:
                pass
            os.close(self._descriptor)
            self._descriptor = None

    def __enter__(self) -> ManifestWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_manifest(path: str | os.PathLike) -> list[dict]:
    """The records of a manifest, in order.

    Raises:
        ValueError: A line that is not a JSON object.
    """
    with open(path, encoding="utf-8", errors="surrogateescape") as handle:
        records = [json.loads(line) for line in handle if line.strip()]
    if not all(isinstance(record, dict) for record in records):
        raise ValueError(f"{os.fspath(path)!r} has a line that is not a JSON object")
    return records


def read_earlier(path: str | os.PathLike) -> dict[str, dict]:
    """An earlier run's records by input path, for resuming: whatever parses.

    Lines that are not whole JSON records of guidedbp's shape (a cut-off last line,
    someone else's file) are passed over; a missing or unreadable file gives ``{}``.
    A link is not followed.
    """
    try:
        descriptor = os.open(os.fspath(path), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
                             | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return {}
    try:
        import stat

        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            return {}
        with os.fdopen(descriptor, encoding="utf-8", errors="surrogateescape") as handle:
            descriptor = None
            earlier = {}
            for line in handle:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict) and isinstance(record.get("input"), str) \
                        and isinstance(record.get("targets"), list):
                    earlier[record["input"]] = record
            return earlier
    finally:
        if descriptor is not None:
            os.close(descriptor)


def is_manifest(path: str | os.PathLike) -> bool:
    """Whether an existing ``path`` is a manifest guidedbp wrote (empty, or its first
    line a record of guidedbp's shape): a file of the user's by that name is not."""
    try:
        with open(path, "rb") as handle:
            first = handle.readline(1 << 20)
    except OSError:
        return False
    if not first.strip():
        return True
    try:
        record = json.loads(first)
    except ValueError:
        return False
    return isinstance(record, dict) and {"input", "status", "targets"} <= set(record)


def check_own_manifest(path: str | os.PathLike) -> None:
    """Refuse to replace ``path`` unless it is absent or a manifest guidedbp wrote
    (:func:`is_manifest`): never a link, nor a file of the user's by that name.

    Raises:
        GuidedbpError: Naming the file and what to do.
    """
    import stat

    path = os.fspath(path)
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as error:
        raise GuidedbpError(f"{path!r}: cannot check it ({error.strerror or error})") from None
    if stat.S_ISLNK(mode):
        raise GuidedbpError(f"{path!r} is a symbolic link: guidedbp does not write "
                            "through links (remove it, or choose another output folder)")
    if not stat.S_ISREG(mode) or not is_manifest(path):
        raise GuidedbpError(f"{path!r} exists and is not a guidedbp manifest: refusing to "
                            "overwrite it (move it, or choose another output folder)")
