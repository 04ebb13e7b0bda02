"""The progress bar ``explain`` and ``evaluate`` draw on a terminal's stderr."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable


def show_progress(quiet: bool = False) -> bool:
    """Whether to draw it: not ``quiet``, and stderr is a terminal."""
    return not quiet and sys.stderr.isatty()


def duration(seconds: float) -> str:
    """``42.3`` -> ``"0:42"``, ``3725`` -> ``"1:02:05"``: minutes and seconds, hours
    before them from an hour on (rounded up: an ETA never says less than is left).

    >>> duration(0.2), duration(42.3), duration(600), duration(3725)
    ('0:01', '0:43', '10:00', '1:02:05')
    """
    whole = int(-(-seconds // 1))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Progress:
    """A one-line progress bar on stderr (for terminals only).

    It shows something from the moment the images start to flow (:meth:`begin`):
    the images decoded so far, then ``first pass...`` while the first batch is in the
    engine (a batch of a large model takes tens of seconds); from the first images
    through it, images/s and an ETA, the images left over the rate measured since
    :meth:`begin`. While a perturbation method scores its copies (minutes per batch for
    the black-box methods on large models), the line also counts them: ``rise
    1200/1600 passes``.

    The count ``N/TOTAL`` is that of the images through the engine (:meth:`explained`)
    or delivered (:meth:`advance`), whichever is ahead: a runner that reports only
    deliveries (Ray's, evaluate's) is counted by them.

    Args:
        clock: Seconds, for the rate (a test's fake clock).
        stream: Where the line goes; ``None``: stderr at each draw.
    """

    #: Seconds between two redraws for the copies' count.
    REDRAW = 0.2
    #: The bar's width in characters.
    WIDTH = 30

    def __init__(self, *, clock: Callable[[], float] = time.perf_counter, stream=None):
        self.clock, self.stream = clock, stream
        self.total, self.count, self.start = 0, 0, clock()
        self.decoded, self.through, self.passing = 0, 0, False
        self.copies, self.drawn, self.shown = "", 0.0, ""

    def note(self, text: str) -> None:
        """What the run is doing before its images start to flow (``loading the
        model...``), drawn alone on the line."""
        self.shown = text
        stream = self.stream or sys.stderr
        stream.write(f"\r{text}\x1b[K")
        stream.flush()

    def begin(self, total: int) -> None:
        """The run's ``total`` images start now: drawn at once."""
        self.total, self.start = total, self.clock()
        self._draw()

    def decode(self, count: int = 1) -> None:
        """``count`` more images decoded (drawn until the first images are through)."""
        self.decoded += count
        if not self.done:
            self._draw()

    def explaining(self) -> None:
        """A batch goes into the engine: the first one is drawn as ``first pass...``."""
        if not self.passing:
            self.passing = True
            self._draw()

    def explained(self, count: int) -> None:
        """``count`` more images through the engine (their files still being written)."""
        self.through += count
        self.copies = ""
        self._draw()

    def advance(self) -> None:
        """One more image delivered: its files and manifest line written."""
        self.count += 1
        self.copies = ""
        self._draw()

    def passes(self, method: str, done: int, total: int) -> None:
        """A perturbation method's forward passes over the batch in hand."""
        self.passing = True
        self.copies = f" · {method} {done}/{total} passes"
        now = self.clock()
        if done >= total or now - self.drawn >= self.REDRAW:
            self._draw()

    @property
    def done(self) -> int:
        """The images through: explained or delivered, whichever is ahead."""
        return max(self.count, self.through)

    def line(self) -> str:
        """The line as drawn now (without the carriage return)."""
        done, total = self.done, self.total
        filled = int(self.WIDTH * done / max(total, 1))
        text = f"[{'#' * filled}{'.' * (self.WIDTH - filled)}] {done}/{total}"
        if done == 0:
            if self.decoded:
                text += f" · {self.decoded} decoded"
            if self.passing or not self.decoded:
                text += " · first pass..." if self.passing else " · starting..."
            return text + self.copies
        rate = done / max(self.clock() - self.start, 1e-9)
        text += f" {rate:.1f} images/s"
        if done < total:
            text += f" · ETA {duration((total - done) / rate)}"
        return text + self.copies

    def _draw(self) -> None:
        self.drawn = self.clock()
        line = self.line()
        if line == self.shown:  # a delivery behind the engine: nothing new to show
            return
        self.shown = line
        stream = self.stream or sys.stderr
        stream.write(f"\r{line}\x1b[K")
        stream.flush()

    def close(self) -> None:
        stream = self.stream or sys.stderr
        stream.write("\n")
        stream.flush()
