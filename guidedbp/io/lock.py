"""One writer per manifest: an advisory lock beside it that a killed run does not leave stuck.

The lock is ``fcntl.flock`` on ``OUT/.MANIFEST.lock``: the kernel drops it when the
holder exits, however it exits, so a killed run never leaves it stuck (at most the
empty file, which the next run takes over). A run that ends removes the file. It
also says who holds it (pid, host, start time), for the refusal message. Shards of
one run (``manifest-K-of-N.jsonl``) lock their own manifests, so an array job's
tasks can share one OUT.
"""

from __future__ import annotations

import json
import os
import socket
import time

from guidedbp.errors import GuidedbpError


class LockedError(GuidedbpError):
    """Another run holds the output folder's lock; the message names it."""


class OutputLock:
    """Hold the lock of ``folder/manifest`` for a run (a context manager).

    Raises:
        LockedError: Another live process holds it.
        OSError: The lock file cannot be created (a read-only folder, a link in
            its place).
    """

    def __init__(self, folder: str | os.PathLike, manifest: str = "manifest.jsonl"):
        self.path = os.path.join(os.fspath(folder), f".{manifest}.lock")
        self._descriptor: int | None = None

    def acquire(self) -> OutputLock:
        import fcntl

        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        while True:
            descriptor = os.open(self.path, flags, 0o644)
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(descriptor)
                os.close(descriptor)
                folder = os.path.dirname(self.path) or "."
                raise LockedError(
                    f"{folder!r} is being written by another guidedbp run ({holder}): wait "
                    "for it to finish, or write to another folder"
                ) from None
            except BaseException:
                os.close(descriptor)
                raise
            # The holder before us removes the file as it lets go: if the lock we got is
            # on a file no longer at the path, take the one that is there now.
            try:
                same = os.stat(self.path, follow_symlinks=False).st_ino == \
                    os.fstat(descriptor).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(descriptor)
        os.ftruncate(descriptor, 0)
        os.write(descriptor, json.dumps({
            "pid": os.getpid(), "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        }).encode())
        self._descriptor = descriptor
        return self

    def release(self) -> None:
        """Let go: remove the lock file (so OUT holds only outputs), then unlock."""
        if self._descriptor is not None:
            try:
                os.unlink(self.path)
            except OSError:
                pass
            os.close(self._descriptor)  # closing drops the flock
            self._descriptor = None

    def __enter__(self) -> OutputLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _read_holder(descriptor: int) -> str:
    try:
        holder = json.loads(os.pread(descriptor, 4096, 0) or b"{}")
        return f"pid {holder['pid']} on {holder['host']}, started {holder['started']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "its pid is not recorded"
