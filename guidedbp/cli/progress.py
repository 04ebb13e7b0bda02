"""The progress bar ``explain`` and ``evaluate`` draw on a terminal's stderr."""

from __future__ import annotations

import sys
import time


def show_progress(quiet: bool = False) -> bool:
    """Whether to draw it: not ``quiet``, and stderr is a terminal."""
    return not quiet and sys.stderr.isatty()


class Progress:
    """A one-line progress bar with images/s, on stderr (for terminals only); while a
    perturbation method scores its copies (minutes per batch for the black-box methods
    on large models), the line also counts them: ``rise 1200/1600 passes``."""

    #: Seconds between two redraws for the copies' count.
    REDRAW = 0.2

    def __init__(self):
        self.total, self.count, self.start = 0, 0, time.perf_counter()
        self.copies, self.drawn = "", 0.0

    def begin(self, total: int) -> None:
        self.total, self.start = total, time.perf_counter()

    def advance(self) -> None:
        self.count += 1
        self.copies = ""
        self._draw()

    def passes(self, method: str, done: int, total: int) -> None:
        """A perturbation method's forward passes over the batch in hand."""
        self.copies = f" · {method} {done}/{total} passes"
        now = time.perf_counter()
        if done >= total or now - self.drawn >= self.REDRAW:
            self._draw()

    def _draw(self) -> None:
        self.drawn = time.perf_counter()
        elapsed = max(self.drawn - self.start, 1e-9)
        width = 30
        filled = int(width * self.count / max(self.total, 1))
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.count}/{self.total} "
                         f"{self.count / elapsed:.1f} images/s{self.copies}\x1b[K")
        sys.stderr.flush()

    def close(self) -> None:
        sys.stderr.write("\n")
        sys.stderr.flush()
