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
import os
import re
from collections.abc import Sequence

from guidedbp.errors import GuidedbpError
from guidedbp.io.inputs import InputItem
from guidedbp.io.manifest import ManifestWriter, read_manifest

MERGED_MANIFEST = "manifest.jsonl"
_SHARD_MANIFEST = re.compile(r"^manifest-(\d+)-of-(\d+)\.jsonl$")


class ShardError(ValueError, GuidedbpError):
    """Shard manifests that cannot be merged, or a malformed K/N: a one-line message."""


def parse_shard(text: str) -> tuple[int, int]:
    """``"K/N"`` -> ``(K, N)`` with ``0 <= K < N``.

    Raises:
        ShardError: For anything else, naming the value.
    """
    parts = text.strip().split("/")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise ShardError(f"{text!r} is not K/N, e.g. 0/4 (K counts from 0)")
    index, count = int(parts[0]), int(parts[1])
    if count < 1 or not 0 <= index < count:
        raise ShardError(f"{text!r}: K must be in 0..N-1 and N at least 1 (K counts from 0)")
    return index, count


def shard_of(output_stem: str, count: int) -> int:
    """The shard (0..count-1) an input belongs to, from the sha256 of its output stem."""
    digest = hashlib.sha256(output_stem.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count


def select_shard(items: Sequence[InputItem], index: int, count: int) -> list[InputItem]:
    """The items of shard ``index`` of ``count``, in their input order."""
    return [item for item in items if shard_of(item.output_stem, count) == index]


def manifest_name(index: int, count: int) -> str:
    """``manifest-K-of-N.jsonl``: the manifest shard K of N writes under OUT."""
    return f"manifest-{index}-of-{count}.jsonl"


def merge_manifests(folder: str | os.PathLike) -> tuple[str, int, int]:
    """Join ``manifest-K-of-N.jsonl`` for K = 0..N-1 into ``folder/manifest.jsonl``.

    Records keep the order of the shard files (K ascending), then of their lines.
    The merged file is written under a temporary name and renamed into place.

    Returns:
        ``(path, shard count, record count)``.

    Raises:
        ShardError: No shard manifests, several values of N, a missing shard, or an
            input listed twice.
    """
    folder = os.fspath(folder)
    found: dict[int, set[int]] = {}
    for name in sorted(os.listdir(folder)):
        match = _SHARD_MANIFEST.match(name)
        if match:
            found.setdefault(int(match[2]), set()).add(int(match[1]))
    if not found:
        raise ShardError(f"no manifest-K-of-N.jsonl files in {folder}")
    if len(found) > 1:
        counts = ", ".join(f"of-{n}" for n in sorted(found))
        raise ShardError(f"shard manifests of different runs in {folder} ({counts}): keep one N")
    (count, indices), = found.items()
    missing = sorted(set(range(count)) - indices)
    if missing:
        have = ",".join(map(str, sorted(i for i in indices if i < count)))
        raise ShardError(f"found shards {have or 'none'} of {count}: missing "
                         f"{','.join(map(str, missing))}")
    records, seen = [], {}
    for index in range(count):
        for record in read_manifest(os.path.join(folder, manifest_name(index, count))):
            if record["input"] in seen:
                raise ShardError(f"input {record['input']!r} appears in shards "
                                 f"{seen[record['input']]} and {index}")
            seen[record["input"]] = index
            records.append(record)
    target = os.path.join(folder, MERGED_MANIFEST)
    temporary = os.path.join(folder, f".{MERGED_MANIFEST}.{os.getpid()}.tmp")
    try:
        with ManifestWriter(temporary) as writer:
            for record in records:
                writer.write(record)
        os.replace(temporary, target)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)
    return target, count, len(records)
