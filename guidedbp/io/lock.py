"""One writer per manifest: an advisory lock beside it that a killed run does not leave stuck.

The lock is ``fcntl.flock`` on ``OUT/.MANIFEST.lock``: the kernel drops it when the
holder exits, however it exits, so a killed run never leaves it stuck (at most the
empty file, which the next run takes over). A run that ends removes the file. It
also says who holds it (pid, host, start time), for the refusal message. Shards of
one run (``manifest-K-of-N.jsonl``) lock their own manifests, so an array job's
tasks can share one OUT; which runs may share one is decided by the pipeline
(:mod:`guidedbp.pipeline.family`), which asks :func:`live_holder` whether another
manifest's lock is held.
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


def live_holder(folder: str | os.PathLike, manifest: str = "manifest.jsonl") -> str | None:
    """Who holds the lock of ``folder/manifest`` now (``"pid 12 on host, started ..."``),
    or ``None`` when no live run does: no lock there, or a killed run's.

    On a disk the lock file is asked for a shared lock, at once given up: the kernel
    refuses it only while a live run holds the file. On a store the lock object is live
    until its lease runs out (:class:`ObjectLock`).
    """
    folder = os.fspath(folder)
    from guidedbp.io import store

    if store.is_url(folder):
        lock = ObjectLock(folder, manifest)
        try:
            holder = lock._holder()
        except (LockFileError, OSError):
            return None  # not a lock, or not readable: no run's
        if holder is None or lock._stale(holder):
            return None
        return _who(holder)
    import fcntl

    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | \
        getattr(os, "O_NONBLOCK", 0)
    try:
        descriptor = os.open(lock_path(folder, manifest), flags)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            return None
        try:
            fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_holder(descriptor)
        return None  # closing the descriptor gives the shared lock up
    finally:
        os.close(descriptor)


def _who(holder: dict) -> str:
    try:
        return f"pid {holder['pid']} on {holder['host']}, started {holder['started']}"
    except (KeyError, TypeError):
        return "its pid is not recorded"


#: Seconds after its last renewal that a store lock is taken for a killed run's and taken
#: over (``GUIDEDBP_LOCK_LEASE``); the holder renews it every quarter of that.
LOCK_LEASE = 300.0
#: Seconds a run waits after writing a lock on a store that ignores conditional writes,
#: before reading it back (``GUIDEDBP_LOCK_SETTLE``).
LOCK_SETTLE = 2.0
#: A lock object is a few hundred bytes: anything much larger at its key is not one.
_LOCK_LIMIT = 1 << 16


def _seconds(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, default))
    except ValueError:
        return default
    return value if value > 0 else default


class ObjectLock:
    """The lock of ``OUT/manifest`` on an object store: the object ``OUT/.MANIFEST.lock``.

    It is created with a conditional write (``If-None-Match: *``), so of two runs that
    start together exactly one gets it; the other is refused with the holder's pid, host
    and start time, as the local lock does. A store cannot drop a lock when its holder
    dies, so the holder renews it every quarter of ``GUIDEDBP_LOCK_LEASE`` seconds (300
    by default); a lock not renewed for that long is a killed run's, and the next run
    takes it over. A run that ends removes it. A run that takes a lock over waits
    ``GUIDEDBP_LOCK_SETTLE`` seconds (2) and reads it back before going on, as two runs
    that found the same stale lock may each have removed it (the later one removing the
    other's new lock): only the one whose lock is there then goes on.

    Stores that ignore the condition (found out once per run by writing the lock again
    with it, :func:`guidedbp.io.store.honours_create`) get a check, write and read-back:
    a run that finds a live lock is refused; else it writes its own, waits
    ``GUIDEDBP_LOCK_SETTLE`` seconds (2) and reads it back, and only the run whose lock
    is still there goes on. Two runs both go on only if one listed no lock and wrote
    its own more than the settle time later, which a healthy store does not allow.
    """

    def __init__(self, folder: str, manifest: str = "manifest.jsonl"):
        from guidedbp.io import store

        self._store = store
        self.path = store.join(folder, f".{manifest}.lock")
        self.folder = folder
        self.conditional: bool | None = None
        self._token = None
        self._stop = None
        self._thread = None

    def _holder(self) -> dict | None:
        """The lock object's holder, ``None`` when there is no lock object.

        Raises:
            LockFileError: An object there that is not a guidedbp lock (not JSON with a
                token, or larger than any lock is).
            OSError: The store refused.
        """
        size = self._store.size_of(self.path)
        if size is None:
            return None
        holder = None
        if size <= _LOCK_LIMIT:  # a large object is no lock: not read (nor held) whole
            try:
                data = self._store.read_bytes(self.path)
            except FileNotFoundError:  # removed since: its holder let go
                return None
            try:
                holder = json.loads(data)
            except ValueError:
                pass
        if not isinstance(holder, dict) or not isinstance(holder.get("token"), str):
            raise LockFileError(f"{self.path!r} exists and is not a guidedbp lock: remove "
                                "it, or choose another output prefix")
        return holder

    def _refuse(self, holder: dict) -> LockedError:
        return LockedError(f"{self.folder!r} is being written by another guidedbp run "
                           f"({_who(holder)}): wait for it to finish, or write to another "
                           "prefix")

    def _stale(self, holder: dict) -> bool:
        renewed = holder.get("renewed")
        lease = _seconds("GUIDEDBP_LOCK_LEASE", LOCK_LEASE)
        return not isinstance(renewed, (int, float)) or time.time() - renewed > lease

    def _body(self) -> bytes:
        return json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                           "started": self._started, "token": self._token,
                           "renewed": time.time()}).encode()

    def acquire(self) -> ObjectLock:
        import secrets

        store = self._store
        self._token = secrets.token_hex(8)
        self._started = time.strftime("%Y-%m-%d %H:%M:%S")
        try:
            holder = self._holder()
            took_over = holder is not None
            if took_over:
                if not self._stale(holder):
                    raise self._refuse(holder)
                # A killed run's lock: remove it if it is still that one, then race for it.
                if (self._holder() or {}).get("token") == holder["token"]:
                    store.delete(self.path)
            try:
                store.put(self.path, self._body(), create=True)
            except FileExistsError:
                raise self._refuse(self._holder() or {}) from None
            try:
                self._confirm(took_over)
            except LockedError:
                raise  # the lock there is another run's
            except BaseException:  # a store error, Ctrl-C: leave no lock of ours behind
                self._let_go_if_ours()
                raise
        except OSError as error:
            raise LockFileError(f"cannot create the lock object {self.path!r}: "
                                f"{store.describe(error)}") from None
        self._renew_in_background()
        return self

    def _confirm(self, took_over: bool) -> None:
        """Make sure the lock just written is ours and stays so.

        Where the store ignores the condition, or after a takeover (two runs that both
        found the same stale lock may each have removed it, the later one removing the
        other's new lock), only the run whose lock is there after the settle time goes
        on: the store holds the last write by then.

        Raises:
            LockedError: Another run's lock is there.
        """
        try:
            self.conditional = self._store.honours_create(self.path)
        except FileNotFoundError:  # removed since written: another run took over too
            self.conditional, took_over = None, True
        if self.conditional and not took_over:
            return
        time.sleep(_seconds("GUIDEDBP_LOCK_SETTLE", LOCK_SETTLE))
        holder = self._holder()
        if (holder or {}).get("token") != self._token:
            raise self._refuse(holder or {})

    def _let_go_if_ours(self) -> None:
        try:
            if (self._holder() or {}).get("token") == self._token:
                self._store.delete(self.path)
        except (OSError, GuidedbpError):
            pass

    def _renew_in_background(self) -> None:
        import threading

        self._stop = threading.Event()
        every = _seconds("GUIDEDBP_LOCK_LEASE", LOCK_LEASE) / 4

        def renew():
            while not self._stop.wait(every):
                try:
                    if (self._holder() or {}).get("token") != self._token:
                        return  # taken over: not ours to renew
                    self._store.put(self.path, self._body())
                except (OSError, GuidedbpError):
                    continue  # the next renewal tries again

        self._thread = threading.Thread(target=renew, name="guidedbp-lock", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Stop renewing and remove the lock object, if it is still ours."""
        if self._stop is None:
            return
        self._stop.set()
        self._thread.join()
        self._stop = None
        self._let_go_if_ours()

    def __enter__(self) -> ObjectLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def output_lock(folder: str, manifest: str = "manifest.jsonl"):
    """The lock of ``folder/manifest``: :class:`OutputLock` on a disk,
    :class:`ObjectLock` on an object store (``folder`` a URL)."""
    from guidedbp.io import store

    if store.is_url(folder):
        return ObjectLock(folder, manifest)
    return OutputLock(folder, manifest)


def check_lock_object(folder: str, manifest: str = "manifest.jsonl") -> None:
    """Refuse, before a run starts, an object at the lock's key that is not a guidedbp
    lock (a live or killed run's lock is the lock's own business)."""
    ObjectLock(folder, manifest)._holder()
