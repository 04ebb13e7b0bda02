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
import stat
import time

from guidedbp.errors import GuidedbpError


class LockedError(GuidedbpError):
    """Another run holds the output folder's lock; the message names it."""


class LockFileError(GuidedbpError):
    """The lock file cannot be made: something of the user's in its place (a folder, a
    link, a FIFO), or a folder that takes no new file (a full disk)."""


def lock_path(folder: str | os.PathLike, manifest: str = "manifest.jsonl") -> str:
    """``folder/.MANIFEST.lock``: the lock file of ``folder/manifest``."""
    return os.path.join(os.fspath(folder), f".{manifest}.lock")


def check_lock_path(folder: str | os.PathLike, manifest: str = "manifest.jsonl") -> None:
    """Refuse, before a run starts, a lock path that holds anything but a regular file
    (which a killed run may leave, and the next one takes over).

    Raises:
        LockFileError: Naming what is there.
    """
    path = lock_path(folder, manifest)
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as error:
        raise LockFileError(_cannot_lock(path, error)) from None
    if not stat.S_ISREG(mode):
        raise LockFileError(f"{path!r} is {_kind(mode)}, where guidedbp keeps the output "
                            "folder's lock file: remove it, or choose another output folder")


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    return "not a regular file"


def _cannot_lock(path: str, error: OSError) -> str:
    return (f"cannot create the lock file {path!r}: {error.strerror or error} (guidedbp "
            "keeps one there while it writes: free some space, or choose another output "
            "folder)")


class OutputLock:
    """Hold the lock of ``folder/manifest`` for a run (a context manager).

    Raises:
        LockedError: Another live process holds it.
        LockFileError: The lock file cannot be made (a folder, link or FIFO in its
            place, a full disk); nothing is left behind.
    """

    def __init__(self, folder: str | os.PathLike, manifest: str = "manifest.jsonl"):
        self.path = lock_path(folder, manifest)
        self._where = (os.fspath(folder), manifest)
        self._descriptor: int | None = None

    def acquire(self) -> OutputLock:
        check_lock_path(*self._where)
        try:
            return self._acquire()
        except OSError as error:
            raise LockFileError(_cannot_lock(self.path, error)) from None

    def _acquire(self) -> OutputLock:
        import fcntl

        # O_NONBLOCK: a FIFO put in its place since the check opens at once (and is
        # refused below) instead of waiting for a writer.
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | \
            getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
        while True:
            descriptor = os.open(self.path, flags, 0o644)
            if not stat.S_ISREG(os.fstat(descriptor).st_mode):
                os.close(descriptor)
                check_lock_path(*self._where)
                raise LockFileError(f"{self.path!r} is not a regular file")
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
        try:
            os.ftruncate(descriptor, 0)
            holder = memoryview(json.dumps({
                "pid": os.getpid(), "host": socket.gethostname(),
                "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            }).encode())
            while holder:  # a short write is no error: the next one says why
                holder = holder[os.write(descriptor, holder):]
        except BaseException:  # a full disk: leave nothing behind (we hold the lock)
            self._descriptor = descriptor
            self.release()
            raise
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
