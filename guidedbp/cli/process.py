"""The process a command runs in: Ctrl-C ends it within 2 seconds (exit 130), a closed
pipe quietly, a finished command leaves without the interpreter's teardown, and
TensorFlow's import keeps its C++ start-up chatter off the terminal.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import click

from guidedbp.cli.exits import BROKEN_PIPE, INTERRUPTED

#: Seconds a command has, after Ctrl-C, to stop by itself before it is ended.
INTERRUPT_GRACE = 1.5


def import_tensorflow(debug: bool = False) -> None:
    """Import TensorFlow with its C++ start-up chatter kept off the user's terminal.

    TensorFlow logs from C++ while it loads (CUDA probing, oneDNN notices), before
    any Python setting applies. We point file descriptor 2 at a temporary file for
    the import alone and replay what it caught only if the import fails (not when
    Ctrl-C stops it).
    """
    if "tensorflow" in sys.modules:
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if debug:
        import tensorflow  # noqa: F401
        return
    import tempfile

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            import tensorflow  # noqa: F401
        except KeyboardInterrupt:  # Ctrl-C, not a failure: nothing to explain
            raise
        except BaseException:
            os.dup2(saved, 2)
            caught.seek(0)
            sys.stderr.write(caught.read().decode(errors="replace"))
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)



class Command(click.Group):
    """The ``guidedbp`` group: Ctrl-C at any moment ends it within 2 seconds, exit 130.

    A ``KeyboardInterrupt`` out of a command prints one line, ``interrupted``, and exits
    :data:`INTERRUPTED` (no traceback; click would print "Aborted!" and exit 1). Run as
    a program (``guidedbp``, ``python -m guidedbp``: through ``__call__``, not through
    the ``main`` that click's test runner calls), a :class:`_Deadline` also ends the
    process :data:`INTERRUPT_GRACE` seconds after Ctrl-C if it has not stopped by then:
    Python handles a signal only between bytecodes, and TensorFlow can hold the main
    thread in C++ for longer (a big model's batch, its start-up). Files are safe either
    way: outputs are renamed into place whole and the manifest is written a whole line
    at a time.
    """

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            _SAID.set()
            click.echo("interrupted", err=True)
            raise click.exceptions.Exit(INTERRUPTED) from None
        except BrokenPipeError:
            # The reader went away (`guidedbp check demo | head -1`): stop quietly, as a
            # Unix tool killed by SIGPIPE would, with no traceback at exit.
            try:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())
            except (OSError, ValueError):
                pass
            raise click.exceptions.Exit(BROKEN_PIPE) from None

    def __call__(self, *args, **kwargs):
        _SAID.clear()
        deadline = _Deadline.start()
        try:
            return super().__call__(*args, **kwargs)
        except SystemExit as exit_:
            if exit_.code != INTERRUPTED:
                raise
            _SAID.set()  # "interrupted", or the command's own summary, is on stderr
        finally:
            if deadline is not None:
                deadline.stop()
        # Interrupted, with files closed: skip the interpreter's teardown, which takes
        # TensorFlow a second or more and which no thread can cut short.
        exit_now(INTERRUPTED)


def exit_now(code: int) -> None:
    """End the process with ``code`` at once (``os._exit``), its output flushed."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def may_skip_teardown(code) -> bool:
    """Whether the program, its command ended with exit status ``code``, may leave at
    once (:func:`exit_now`) rather than through the interpreter's teardown, which takes
    TensorFlow a second or more: TensorFlow was imported (else the teardown is quick),
    no thread of ours is still running, and no library whose exit handlers matter is
    loaded (Ray stops the cluster it started)."""
    return (isinstance(code, int) or code is None) and "tensorflow" in sys.modules \
        and "ray" not in sys.modules \
        and all(thread.daemon or thread is threading.main_thread()
                for thread in threading.enumerate())


# Set once stderr says the command was interrupted: the deadline need not repeat it.
_SAID = threading.Event()


class _Deadline:
    """Ends the process :data:`INTERRUPT_GRACE` seconds after a SIGINT, exit 130.

    Python's C-level signal handler writes the signal number to the wake-up file
    descriptor at once, even while the main thread is busy in C; a daemon thread
    reading it needs no help from the main thread. Main thread only.
    """

    def __init__(self, read: int, write: int, previous: int):
        self._read, self._write, self._previous = read, write, previous
        self._stderr = os.dup(2)  # fd 2 may point elsewhere by then (TensorFlow's import)
        threading.Thread(target=self._watch, name="guidedbp-ctrl-c", daemon=True).start()

    @classmethod
    def start(cls) -> _Deadline | None:
        if threading.current_thread() is not threading.main_thread():
            return None
        read, write = os.pipe()
        os.set_blocking(write, False)
        try:
            previous = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        except (ValueError, OSError):
            os.close(read)
            os.close(write)
            return None
        return cls(read, write, previous)

    def _watch(self) -> None:
        while True:
            try:
                received = os.read(self._read, 64)
            except OSError:
                return
            if not received:
                return  # stop() before any Ctrl-C
            if signal.SIGINT in received:
                break
        time.sleep(INTERRUPT_GRACE)
        if not _SAID.is_set():
            os.write(self._stderr, b"interrupted\n")
        os._exit(INTERRUPTED)

    def stop(self) -> None:
        """Give the wake-up descriptor back. After a Ctrl-C the deadline keeps running:
        the process is on its way out and must get there in time."""
        signal.set_wakeup_fd(self._previous)
        os.close(self._write)  # the watcher reads what came before, then stops
