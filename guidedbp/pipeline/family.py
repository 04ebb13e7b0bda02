"""One OUT, one run's files: which runs may write into an output folder.

Each record of a manifest names output files under OUT, and a resumed run trusts them as
its own. A run that is not sharded keeps its records in ``OUT/manifest.jsonl``; the
shards of one run, K = 0..N-1, each in ``OUT/manifest-K-of-N.jsonl``, which
``merge-manifests`` joins into ``OUT/manifest.jsonl``. Shards of one N never share a file
(each input belongs to one shard), but a run of another family would write the very
files another manifest names, and a resumed run would then trust maps that are not the
ones its records describe. So an OUT belongs to one family of runs at a time:

- a run that is not sharded goes into an OUT without shard manifests, or into one whose
  ``manifest.jsonl`` is their merge, byte for byte: it then takes the OUT over, and the
  shard manifests (whose records ``manifest.jsonl`` holds) are removed before it writes
  anything (:meth:`Claim.take_over`);
- shard K of N goes into an OUT without a ``manifest.jsonl`` that names files, or into
  one whose shard manifests are all of N (a merged OUT: its shards are resumed, then
  merged again; a run that is not sharded never trusts a merge its shards have changed
  since);
- no run goes into an OUT while a run of another family writes there (holds its lock).

Anything else is refused in one line, before anything is written. The same rules hold
on an object store (a killed store run's manifest parts count as its manifest).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from guidedbp.errors import GuidedbpError
from guidedbp.io import store
from guidedbp.io.lock import LockedError, live_holder, output_lock
from guidedbp.io.shard import MERGED_MANIFEST, ShardError, manifest_name, merged

#: ``manifest.jsonl`` or ``manifest-K-of-N.jsonl``, as a manifest, its lock (``.NAME.lock``)
#: or a killed store run's parts (``.NAME.parts``).
_NAME = re.compile(r"^(\.?)(manifest(?:-([0-9]+)-of-([0-9]+))?\.jsonl)(\.lock|\.parts)?$",
                   re.ASCII)


class FamilyError(GuidedbpError):
    """OUT holds another family's manifests: one line naming them and what to do."""


@dataclass(frozen=True)
class Survey:
    """What an OUT holds of guidedbp's runs.

    Attributes:
        plain: ``manifest.jsonl`` names files (has records, or parts a killed store run
            left).
        shards: N -> the manifest names of its shards there (with records or not).
        locks: The manifest names whose lock file or object is there (live or not).
    """

    plain: bool = False
    shards: dict[int, list[str]] = field(default_factory=dict)
    locks: tuple[str, ...] = ()


def survey(folder: str) -> Survey:
    """What ``folder`` holds of guidedbp's manifests and locks (nothing read but names and
    sizes: one listing)."""
    sizes: dict[str, int] = {}
    parts: set[str] = set()
    if store.is_url(folder):
        versions: dict[str, tuple] = {}
        for prefix, folders, files in store.walk(folder, recursive=False, versions=versions):
            sizes = {name: versions[store.join(prefix, name)][0] for name in files
                     if _NAME.match(name)}
            parts = {name for name in folders if _NAME.match(name)}
            break
    else:
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    if _NAME.match(entry.name) and entry.is_file(follow_symlinks=False):
                        sizes[entry.name] = entry.stat(follow_symlinks=False).st_size
                    # A link or folder in a manifest's place is refused by its run.
        except (FileNotFoundError, NotADirectoryError):
            pass
    shards: dict[int, list[str]] = {}
    plain, locks = False, []
    for name in sorted({*sizes, *parts}):
        match = _NAME.match(name)
        dot, manifest, count, kind = match[1], match[2], match[4], match[5]
        if bool(dot) != bool(kind):
            continue  # ".manifest.jsonl" or "manifest.jsonl.lock": no name of ours
        if kind == ".lock":
            locks.append(manifest)
        elif count is None:
            plain = plain or kind == ".parts" or sizes.get(name, 0) > 0
        elif name == manifest_name(int(match[3]), int(count)) or kind == ".parts":
            names = shards.setdefault(int(count), [])
            if manifest not in names:
                names.append(manifest)
    return Survey(plain, shards, tuple(locks))


def family_of(manifest: str) -> int | None:
    """The N of a shard's manifest name, ``None`` for ``manifest.jsonl``.

    >>> family_of("manifest.jsonl"), family_of("manifest-3-of-8.jsonl")
    (None, 8)
    """
    match = _NAME.match(manifest)
    return None if match is None or match[4] is None else int(match[4])


def check_family(folder: str, manifest: str, found: Survey | None = None) -> None:
    """Refuse a run writing ``manifest`` into ``folder`` that holds another family's
    manifests, as far as their names tell (the module's rules; a merge is checked under
    the lock, by :func:`claim_output`).

    Raises:
        FamilyError: Naming what OUT holds, and what to do.
    """
    found = survey(folder) if found is None else found
    mine = family_of(manifest)
    if mine is not None:
        others = sorted(count for count in found.shards if count != mine)
        if others:
            raise FamilyError(
                f"{folder!r} holds the manifests of a run in {others[0]} shards "
                f"({found.shards[others[0]][0]}, ...), not {mine}: the shards of one run "
                "share an OUT, and another run's would overwrite the maps those manifests "
                "name (write these shards to another folder)")
        if found.plain and mine not in found.shards:
            raise FamilyError(
                f"{folder!r} holds the manifest of a run that is not sharded "
                f"({MERGED_MANIFEST}): a shard would overwrite the maps it names (write the "
                f"shards to another folder, or move {MERGED_MANIFEST} away first)")
        return
    if len(found.shards) > 1:
        counts = ", ".join(str(count) for count in sorted(found.shards))
        raise FamilyError(f"{folder!r} holds the manifests of runs in {counts} shards: a run "
                          "would overwrite the maps they name (write it to another folder)")
    if found.shards and not found.plain:
        raise _unmerged(folder, found, "and no manifest.jsonl that merges them")


def _unmerged(folder: str, found: Survey, why: str) -> FamilyError:
    (count, names), = found.shards.items()
    return FamilyError(
        f"{folder!r} holds the manifests of a run in {count} shards ({names[0]}, ...) "
        f"{why}: a run that is not sharded would overwrite the maps they name (merge them "
        "first with merge-manifests, go on with the shards, or write to another folder)")


@dataclass
class Claim:
    """A run's hold on its OUT (:func:`claim_output`).

    Attributes:
        lock: The run's manifest lock (:func:`~guidedbp.io.lock.output_lock`).
        replaced: The shard manifests that :meth:`take_over` removes.
    """

    lock: object
    folder: str
    replaced: list[str] = field(default_factory=list)

    def take_over(self) -> None:
        """Before the run writes anything: remove the shard manifests of the merged OUT a
        run that is not sharded takes over (their records are in ``manifest.jsonl``), so
        that no manifest there names files the run rewrites."""
        for name in self.replaced:
            if store.is_url(self.folder):
                store.delete(store.join(self.folder, name))
                continue
            path = os.path.join(self.folder, name)
            try:
                if stat.S_ISREG(os.lstat(path).st_mode):
                    os.unlink(path)
            except FileNotFoundError:
                continue
        self.replaced = []


@contextmanager
def claim_output(folder: str, manifest: str) -> Iterator[Claim]:
    """Hold the lock of ``folder/manifest`` for a run, refusing what the module's rules
    refuse: checked once the lock is held, so that of two runs of other families that
    start together, one at most goes on.

    Raises:
        LockedError: A run of another family writes into ``folder`` (naming it), or a
            run of this one writes ``manifest``.
        FamilyError: ``folder`` holds another family's manifests.
        LockFileError: The lock cannot be made.
    """
    with output_lock(folder, manifest) as lock:
        found = survey(folder)
        mine = family_of(manifest)
        for other in found.locks:
            theirs = family_of(other)
            if other == manifest or (mine is not None and theirs == mine):
                continue  # this run's own lock, or another shard of its run
            holder = live_holder(folder, other)
            if holder is not None:
                raise LockedError(f"{folder!r} is being written by another guidedbp run "
                                  f"({holder}, writing {other}): wait for it to finish, "
                                  "or write to another folder")
        check_family(folder, manifest, found)
        claim = Claim(lock, folder)
        if mine is None and found.shards:
            _check_merged(folder, found)
            (names,) = found.shards.values()
            claim.replaced = list(names)
        yield claim


def _check_merged(folder: str, found: Survey) -> None:
    """``folder``'s ``manifest.jsonl`` is the merge of its shard manifests, byte for byte.

    Raises:
        FamilyError: It is not (the shards have changed since, or cannot be merged).
    """
    try:
        _, data = merged(folder)
    except ShardError as error:
        raise _unmerged(folder, found, f"that cannot be merged ({error})") from None
    path = store.join(folder, MERGED_MANIFEST) if store.is_url(folder) else \
        os.path.join(folder, MERGED_MANIFEST)
    try:
        if store.is_url(path):
            now = store.read_bytes(path)
        else:
            with open(path, "rb") as handle:
                now = handle.read(len(data) + 1)
    except OSError:
        now = None
    if now != data:
        raise _unmerged(folder, found, f"that {MERGED_MANIFEST} does not merge as they are "
                        "now")
