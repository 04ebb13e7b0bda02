"""``manifest.jsonl``: one JSON object per input, written as the run goes.

Each record is one line, written with one ``write`` call on a file opened for
appending; a write that fails part-way (disk full, file-size limit) is cut back
off, so the file only ever holds whole lines. The manifest is never reached
through a link: a symbolic link in its place is refused, not followed.

On an object store (OUT a URL), which cannot append, :class:`PartsManifestWriter`
writes each batch's records as one part object under ``OUT/.MANIFEST.parts/`` and, at
the end, compacts the parts into ``OUT/MANIFEST`` (one PUT, whole or nothing) and
removes them. A run killed before that leaves its parts, which :func:`read_earlier`
reads after the last compacted manifest, so ``--skip-existing`` resumes from them.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import time

from guidedbp._json import dumps as strict_json  # NaN and infinities as null
from guidedbp.errors import GuidedbpError
from guidedbp.io import store


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
        line = (strict_json(record) + "\n").encode("utf-8", "surrogateescape")
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


def parts_prefix(folder: str, manifest: str = "manifest.jsonl") -> str:
    """Where a store run's manifest parts go: ``OUT/.MANIFEST.parts``."""
    return store.join(folder, f".{manifest}.parts")


class PartsManifestWriter:
    """The manifest of a run into an object store: a part object per ``every`` records
    (a batch), compacted into ``OUT/MANIFEST`` by :meth:`close`.

    Parts are named ``RUN-NNNNNNNN.jsonl``, RUN the run's UTC start time (to the
    microsecond) and a random tag, so that a later run's parts sort after an earlier one's.

    Raises:
        ManifestError: A part or the manifest cannot be written; the parts written
            before stay (a later run reads them).
    """

    def __init__(self, folder: str, manifest: str = "manifest.jsonl", every: int = 32):
        self.folder, self.name = folder.rstrip("/"), manifest
        self.path = store.join(self.folder, manifest)
        self.prefix = parts_prefix(self.folder, manifest)
        self.every = max(1, int(every))
        now = time.time()  # to the microsecond: two runs in one second keep their order
        self.run = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + \
            f"{int(now * 1e6) % 1000000:06d}Z-{secrets.token_hex(4)}"
        self._pending: list[bytes] = []
        self._parts: list[str] = []
        self._closed = False

    def write(self, record: dict) -> None:
        self._pending.append((strict_json(record) + "\n")
                             .encode("utf-8", "surrogateescape"))
        if len(self._pending) >= self.every:
            self.flush()

    def flush(self) -> None:
        """Write the records held so far as one part object."""
        if not self._pending:
            return
        part = store.join(self.prefix, f"{self.run}-{len(self._parts):08d}.jsonl")
        try:
            store.put(part, b"".join(self._pending))
        except OSError as error:
            raise ManifestError(f"cannot write the manifest part {part!r}: "
                                f"{store.describe(error)}; the parts written before stay"
                                ) from None
        self._parts.append(part)
        self._pending = []

    def close(self) -> None:
        """Flush, write ``OUT/MANIFEST`` from this run's parts, remove every part."""
        if self._closed:
            return
        self._closed = True
        self.flush()
        try:
            data = b"".join(store.read_bytes(part) for part in self._parts)
            store.put(self.path, data)
        except OSError as error:
            raise ManifestError(f"cannot write {self.path!r}: {store.describe(error)}; the "
                                f"records stay in its parts under {self.prefix!r}, which "
                                "--skip-existing reads") from None
        for part in _part_objects(self.prefix):  # this run's and a killed one's
            try:
                store.delete(part)
            except OSError:  # the manifest is written; a part left over is read again
                continue     # by --skip-existing, which checks each record's outputs

    def __enter__(self) -> PartsManifestWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _part_objects(prefix: str) -> list[str]:
    """The part objects under ``prefix``, oldest run first."""
    try:
        return [store.join(where, name) for where, _, names in store.walk(prefix, False)
                for name in names if name.endswith(".jsonl")]
    except OSError:
        return []


def open_manifest(folder: str, manifest: str = "manifest.jsonl", every: int = 32):
    """The writer of ``folder/manifest``: appending locally, in parts on a store."""
    if store.is_url(folder):
        return PartsManifestWriter(folder, manifest, every)
    return ManifestWriter(os.path.join(folder, manifest))


def read_manifest(path: str | os.PathLike) -> list[dict]:
    """The records of a manifest, in order.

    Raises:
        ValueError: A line that is not a JSON object.
        OSError: The manifest cannot be read.
    """
    if store.is_url(path):
        text = store.read_bytes(path).decode("utf-8", "surrogateescape")
        records = [json.loads(line) for line in text.splitlines() if line.strip()]
    else:
        with open(path, encoding="utf-8", errors="surrogateescape") as handle:
            records = [json.loads(line) for line in handle if line.strip()]
    if not all(isinstance(record, dict) for record in records):
        raise ValueError(f"{os.fspath(path)!r} has a line that is not a JSON object")
    return records


def read_earlier(path: str | os.PathLike) -> dict[str, dict]:
    """An earlier run's records by input path, for resuming: whatever parses.

    Lines that are not whole JSON records of guidedbp's shape (a cut-off last line,
    someone else's file) are passed over; a missing or unreadable file gives ``{}``.
    A link is not followed. On a store, the parts a killed run left
    (:class:`PartsManifestWriter`) are read after the manifest, the later record of an
    input winning.
    """
    if store.is_url(os.fspath(path)):
        return _read_earlier_store(os.fspath(path))
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


def _records_of(lines, earlier: dict) -> None:
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("input"), str) \
                and isinstance(record.get("targets"), list):
            earlier[record["input"]] = record


def _read_earlier_store(url: str) -> dict[str, dict]:
    folder, _, name = url.rpartition("/")
    earlier: dict[str, dict] = {}
    for source in [url, *_part_objects(parts_prefix(folder, name))]:
        try:
            data = store.read_bytes(source)
        except OSError:
            continue
        _records_of(data.decode("utf-8", "surrogateescape").splitlines(), earlier)
    return earlier


#: How much of a manifest's first line is read to tell whether guidedbp wrote it.
FIRST_LINE_LIMIT = 1 << 20
#: How every record guidedbp writes starts: what a first line longer than
#: :data:`FIRST_LINE_LIMIT` (long class names with ``--top-k``) is judged by.
_RECORD_START = re.compile(rb'\{\s*"input"\s*:\s*"(?:[^"\\]|\\.)*"\s*,\s*"status"\s*:\s*'
                           rb'"(?:ok|error|skipped)"\s*,')


def is_manifest(path: str | os.PathLike) -> bool:
    """Whether an existing ``path`` is a manifest guidedbp wrote (empty, or its first
    line a record of guidedbp's shape): a file of the user's by that name is not.

    At most :data:`FIRST_LINE_LIMIT` bytes are read: a first line longer than that (a
    record of many targets with long class names) is judged by how it starts, as every
    record guidedbp writes starts (``{"input": "...", "status": "ok", ...``).
    """
    try:
        if store.is_url(os.fspath(path)):
            head = store.read_range(os.fspath(path), 0, FIRST_LINE_LIMIT) or b""
            first, newline, _ = head.partition(b"\n")
            whole = bool(newline) or len(head) < FIRST_LINE_LIMIT
        else:
            with open(path, "rb") as handle:
                first = handle.readline(FIRST_LINE_LIMIT)
            whole = first.endswith(b"\n") or len(first) < FIRST_LINE_LIMIT
    except OSError:
        return False
    if not first.strip():
        return True
    if not whole:  # longer than any line we read whole: how it starts decides
        return _RECORD_START.match(first) is not None
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
    if store.is_url(path):
        try:
            present = store.exists(path)
        except OSError as error:
            raise GuidedbpError(f"{path!r}: cannot check it ({store.describe(error)})") \
                from None
        if present and not is_manifest(path):
            raise GuidedbpError(f"{path!r} exists and is not a guidedbp manifest: refusing "
                                "to overwrite it (move it, or choose another output prefix)")
        return
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
