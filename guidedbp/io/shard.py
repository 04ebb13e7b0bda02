"""Splitting a run into N independent shards, and joining their manifests.

A shard is chosen by a stable hash of each input's output stem (its path below
OUT), never by Python's ``hash()``, which changes between processes. Any job
scheduler can therefore run shard ``K`` of ``N`` in its own process or machine,
each listing the same inputs and keeping its own part: together the N shards
cover every input exactly once. K counts from 0, like Slurm's
``SLURM_ARRAY_TASK_ID`` and Kubernetes' ``JOB_COMPLETION_INDEX``.

>>> shard_of("a/cat", 1)
0
>>> manifest_name(0, 4)
'manifest-0-of-4.jsonl'
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass

from guidedbp._json import dumps as strict_json
from guidedbp._numbers import whole_number
from guidedbp._text import one_line
from guidedbp.errors import GuidedbpError
from guidedbp.io import made_by, store
from guidedbp.io.inputs import InputItem
from guidedbp.io.lock import LockedError, live_holder, output_lock
from guidedbp.io.manifest import check_own_manifest
from guidedbp.io.write import atomic_write_bytes

MERGED_MANIFEST = "manifest.jsonl"
# ASCII digits only: int() would also read other scripts' digits ("manifest-١-of-2.jsonl").
_SHARD_MANIFEST = re.compile(r"^manifest-([0-9]+)-of-([0-9]+)\.jsonl$", re.ASCII)


class ShardError(ValueError, GuidedbpError):
    """Shard manifests that cannot be merged, or a malformed K/N: a one-line message."""


def parse_shard(text: str) -> tuple[int, int]:
    """``"K/N"`` -> ``(K, N)`` with ``0 <= K < N``.

    Raises:
        ShardError: For anything else, naming the value.
    """
    parts = [whole_number(part) for part in text.strip().split("/")]
    if len(parts) != 2 or None in parts:
        raise ShardError(f"{text!r} is not K/N, e.g. 0/4 (K counts from 0)")
    index, count = parts
    if count < 1 or not 0 <= index < count:
        raise ShardError(f"{text!r}: K must be in 0..N-1 and N at least 1 (K counts from 0)")
    return index, count


def shard_of(output_stem: str, count: int) -> int:
    """The shard (0..count-1) an input belongs to, from the sha256 of its output stem.

    Total: a file name that is not UTF-8 (``b"\\xff.png"``, which Python reads as
    ``"\\udcff.png"``) is hashed as its real bytes, so it has a shard like any other.

    >>> shard_of("\\udcff", 7) == shard_of("\\udcff", 7)
    True
    """
    try:
        data = output_stem.encode("utf-8", errors="surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate no file system gave: still one fixed shard
        data = output_stem.encode("utf-8", errors="surrogatepass")
    digest = hashlib.sha256(data).digest()
    return int.from_bytes(digest[:8], "big") % count


def select_shard(items: Sequence[InputItem], index: int, count: int) -> list[InputItem]:
    """The items of shard ``index`` of ``count``, in their input order."""
    return [item for item in items if shard_of(item.output_stem, count) == index]


def manifest_name(index: int, count: int) -> str:
    """``manifest-K-of-N.jsonl``: the manifest shard K of N writes under OUT."""
    return f"manifest-{index}-of-{count}.jsonl"


@dataclass(frozen=True)
class _ShardFile:
    """One ``manifest-K-of-N.jsonl`` found in the folder."""

    path: str
    index: int
    count: int


def _shard_files(folder: str) -> dict[int, _ShardFile]:
    """The shard manifests in ``folder`` by K, all of one N, K = 0..N-1 each present once.

    Raises:
        ShardError: A name that only looks like a shard's, N = 0, K >= N, something that
            is not a regular file, several values of N, a missing shard, or none at all.
    """
    by_count: dict[int, dict[int, _ShardFile]] = {}
    if store.is_url(folder):
        names = next(iter(store.walk(folder, recursive=False)), ("", [], []))[2]
    else:
        names = sorted(os.listdir(folder))
    for name in names:
        match = _SHARD_MANIFEST.match(name)
        if not match:
            continue
        path = store.join(folder, name) if store.is_url(folder) else os.path.join(folder, name)
        index, count = int(match[1]), int(match[2])
        if name != manifest_name(index, count):
            raise ShardError(f"{path}: not a shard manifest name (leading zero); "
                             f"guidedbp writes {manifest_name(index, count)}")
        if count < 1:
            raise ShardError(f"{path}: N = 0 shards is not a run (N must be at least 1)")
        if index >= count:
            raise ShardError(f"{path}: shard {index} of {count} cannot exist "
                             f"(K counts from 0 and must be below N)")
        _check_regular_file(path)
        by_count.setdefault(count, {})[index] = _ShardFile(path, index, count)
    if not by_count:
        missing = store.missing_bucket(folder) if store.is_url(folder) else None
        raise ShardError(f"{folder}: {missing}" if missing is not None else
                         f"no manifest-K-of-N.jsonl files in {folder}")
    if len(by_count) > 1:
        counts = ", ".join(f"of-{n}" for n in sorted(by_count))
        raise ShardError(f"shard manifests of different runs in {folder} ({counts}): keep one N")
    (count, shards), = by_count.items()
    if len(shards) < count:  # N as the names say, bounded by the files there are
        missing = [index for index in range(min(count, len(shards) + 5))
                   if index not in shards][:5]
        more = count - len(shards) - len(missing)
        have = ",".join(map(str, sorted(shards)))
        raise ShardError(f"found shards {have or 'none'} of {count}: missing "
                         f"{','.join(map(str, missing))}"
                         f"{f' and {more} more' if more else ''} "
                         f"(no {manifest_name(missing[0], count)} in {folder})")
    return shards


def _check_regular_file(path: str) -> None:
    """Refuse folders, FIFOs, sockets and devices before opening (a FIFO would block)."""
    if store.is_url(path):
        return  # an object is an object
    try:
        mode = os.stat(path).st_mode
    except OSError as error:
        raise ShardError(f"{path}: cannot read it ({one_line(error.strerror or error)})") from None
    if not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "not a regular file"
        raise ShardError(f"{path}: {kind}, expected a shard manifest file")


def _read_bytes(path: str) -> bytes:
    if store.is_url(path):
        try:
            return store.read_bytes(path)
        except OSError as error:
            raise ShardError(f"{path}: cannot read it ({store.describe(error)})") from None
    return _read_file(path)


def _read_file(path: str) -> bytes:
    # O_NONBLOCK: should a FIFO take the file's place after the check, opening it
    # returns at once and fstat refuses it, instead of waiting for a writer forever.
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        descriptor = os.open(path, flags)
        try:
            if not stat.S_ISREG(os.fstat(descriptor).st_mode):
                raise ShardError(f"{path}: not a regular file, expected a shard manifest file")
            with os.fdopen(descriptor, "rb", closefd=False) as handle:
                return handle.read()
        finally:
            os.close(descriptor)
    except OSError as error:
        raise ShardError(f"{path}: cannot read it ({one_line(error.strerror or error)})") from None


def _read_shard(shard: _ShardFile) -> list[dict]:
    """The records of one shard manifest, each a JSON object with a string ``"input"``.

    Raises:
        ShardError: Naming the file and line of the first line that is not UTF-8, not
            JSON, not an object, or has no string ``"input"``.
    """
    records = []
    for number, raw in enumerate(_read_bytes(shard.path).splitlines(), start=1):
        where = f"{shard.path}, line {number}"
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise ShardError(f"{where}: not UTF-8 (byte 0x{raw[error.start]:02x} at "
                             f"column {error.start + 1})") from None
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise ShardError(f"{where}: not JSON ({error.msg} at column {error.colno})") from None
        except (ValueError, RecursionError) as error:  # huge numbers, deep nesting
            raise ShardError(f"{where}: not JSON a manifest can hold "
                             f"({one_line(error, 120)})") from None
        if not isinstance(record, dict):
            raise ShardError(f"{where}: a JSON {_json_kind(record)}, expected an object "
                             f'with "input"')
        if "input" not in record:
            raise ShardError(f'{where}: record has no "input"')
        if not isinstance(record["input"], str):
            raise ShardError(f'{where}: "input" is a JSON {_json_kind(record["input"])}, '
                             "expected a string")
        records.append(record)
    return records


def _json_kind(value: object) -> str:
    kinds = {dict: "object", list: "array", str: "string", bool: "boolean",
             int: "number", float: "number", type(None): "null"}
    return kinds.get(type(value), type(value).__name__)


def _check_made_alike(first: tuple[_ShardFile, dict], shard: _ShardFile, record: dict) -> None:
    """Refuse a record made otherwise than the first record of the merge (by another
    model, with other options, before fingerprints: :mod:`guidedbp.io.made_by`): one
    merged manifest would say they are the maps of one run.

    Raises:
        ShardError: Naming both shard files and what differs.
    """
    usual, reference = first
    if made_by.key(record) == made_by.key(reference):
        return
    ours, theirs = reference.get(made_by.FIELD), record.get(made_by.FIELD)
    odd = shard
    if made_by.key(reference) is None:  # the first record is the one from before
        odd, usual, ours, theirs = usual, shard, theirs, ours
    reason = made_by.difference(theirs, ours)
    detail = ""
    if reason == "model":
        detail = f" ({theirs.get('model')!r}, not {ours.get('model')!r})"
    unlike = usual.path if usual.path != odd.path else "its other records"
    raise ShardError(f"shards made differently: {odd.path} holds records "
                     f"{made_by.REASONS[reason]}{detail}, unlike {unlike}: merged they would "
                     "not be one run (explain the odd shard again as the others were made, "
                     "resuming it)")


def merge_manifests(folder: str | os.PathLike) -> tuple[str, int, int]:
    """Join ``manifest-K-of-N.jsonl`` for K = 0..N-1 into ``folder/manifest.jsonl``.

    Records keep the order of the shard files (K ascending), then of their lines.
    Every shard is read and checked before anything is written; the merged file is
    then written under a temporary name and renamed into place, so a refused merge
    leaves an existing ``manifest.jsonl`` as it was. It is written under the lock of
    ``manifest.jsonl`` (:mod:`guidedbp.io.lock`), and not while a shard is written.

    Returns:
        ``(path, shard count, record count)``.

    Raises:
        ShardError: No shard manifests, a bad shard name (N = 0, K >= N), a shard that
            is not a regular file, several values of N, a missing shard (N is trusted
            only as far as the files there are), a ``manifest.jsonl`` that guidedbp did
            not write or a link in its place (as ``explain`` refuses), a line that is
            not a UTF-8 JSON object with a string ``"input"`` (named by file and line),
            an input listed twice, records made differently (``made_by``: another model,
            other options, from before fingerprints; named by shard and reason), or a
            merged manifest that cannot be written.
        LockedError: A run writes into ``folder`` (a shard, or a run that is not
            sharded), naming it.
    """
    folder = os.fspath(folder)
    target = store.join(folder, MERGED_MANIFEST) if store.is_url(folder) else \
        os.path.join(folder, MERGED_MANIFEST)
    _refuse_live_shards(folder)  # what is wrong with the shards first, before a lock
    _listed(folder)
    with output_lock(folder, MERGED_MANIFEST):
        _refuse_live_shards(folder)
        shards, data = merged(folder)  # as they are under the lock
        try:  # as explain refuses it: a file of the user's, or a link, is never replaced
            check_own_manifest(target)
        except GuidedbpError as error:
            raise ShardError(str(error)) from None
        try:
            atomic_write_bytes(target, data, durable=True)
        except OSError as error:
            raise ShardError(f"{target}: cannot write it "
                             f"({one_line(error.strerror or error)})") from None
    return target, len(shards), data.count(b"\n")


def _refuse_live_shards(folder: str) -> None:
    """Refuse to merge while a shard is written (its lock held: :mod:`guidedbp.io.lock`).

    Raises:
        LockedError: Naming the shard and its run.
    """
    try:
        if store.is_url(folder):
            names = next(iter(store.walk(folder, recursive=False)), ("", [], []))[2]
        else:
            names = sorted(os.listdir(folder))
    except OSError:
        return  # merging says why the folder cannot be read
    for name in names:
        manifest = name[1:-len(".lock")] if name.startswith(".") and \
            name.endswith(".lock") else ""
        if not _SHARD_MANIFEST.match(manifest):
            continue
        holder = live_holder(folder, manifest)
        if holder is not None:
            path = store.join(folder, manifest) if store.is_url(folder) else \
                os.path.join(folder, manifest)
            raise LockedError(f"{path} is being written by a guidedbp run ({holder}): "
                              "merge once every shard has finished")


def _listed(folder: str) -> dict[int, _ShardFile]:
    try:
        return _shard_files(folder)
    except OSError as error:  # the folder itself cannot be listed
        raise ShardError(f"{folder}: cannot list it ({one_line(error.strerror or error)})") \
            from None


def merged(folder: str) -> tuple[dict[int, _ShardFile], bytes]:
    """The shard manifests of ``folder`` by K, and the bytes :func:`merge_manifests`
    writes of them into ``folder/manifest.jsonl`` (nothing is written).

    Raises:
        ShardError: As :func:`merge_manifests` refuses them.
    """
    shards = _listed(folder)
    records, seen = [], {}
    first: tuple[_ShardFile, dict] | None = None  # the first record, and its shard
    for index in range(len(shards)):
        for record in _read_shard(shards[index]):
            if record["input"] in seen:
                raise ShardError(f"input {record['input']!r} appears in shards "
                                 f"{seen[record['input']]} and {index}")
            seen[record["input"]] = index
            records.append(record)
            first = first or (shards[index], record)
            _check_made_alike(first, shards[index], record)
    # One JSON object per line, as ManifestWriter writes them.
    return shards, "".join(strict_json(record) + "\n" for record in records).encode("utf-8")
