"""Helpers shared by the test modules: running the CLI in-process, its one-line errors, noise.

numpy and click only at import time (``guidedbp.cli`` is imported when a command runs), so
the fast, TensorFlow-free test modules can use them too.
"""

from __future__ import annotations

import inspect
import os
import sys
import time
from pathlib import Path

import numpy as np
from click.testing import CliRunner, Result


def run_cli(*args, code: int | None = None, **invoke_options) -> Result:
    """Run ``guidedbp ARGS`` in-process with click's runner; stdout and stderr are kept apart.

    Args:
        *args: The command line after ``guidedbp``; each is passed through ``str`` (so
            paths and numbers may be given as they are).
        code: When given, the exit code the run must end with (asserted, with its output
            and exception in the message).
        **invoke_options: Passed on to ``CliRunner.invoke`` (``input``, ``env``,
            ``catch_exceptions``...).

    Returns:
        Click's ``Result``: ``exit_code``, ``stdout``, ``stderr``, ``output`` (both),
        ``exception``.
    """
    from guidedbp.cli import main

    if _CLICK_8_1:
        result = CliRunner(mix_stderr=False).invoke(main, [str(arg) for arg in args],
                                                    **invoke_options)
        result.__class__ = _BothStreams
    else:
        result = CliRunner().invoke(main, [str(arg) for arg in args], **invoke_options)
    if code is not None:
        assert result.exit_code == code, (result.exit_code, result.output, result.exception)
    return result


# Click 8.1 (the floor) keeps stderr apart only with mix_stderr=False, and then its
# ``output`` is stdout alone; Click 8.2 always keeps it apart and ``output`` has both.
_CLICK_8_1 = "mix_stderr" in inspect.signature(CliRunner).parameters


class _BothStreams(Result):
    """Click 8.1's result with ``output`` as Click 8.2 gives it: stdout and stderr."""

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def assert_one_line_error(result: Result, *fragments: str, code: int = 2) -> str:
    """An expected failure through the CLI: exit ``code`` (2, usage, unless told otherwise),
    one ``Error:`` line on stderr and nothing else (no stdout, no traceback), each of
    ``fragments`` in that line.

    Returns:
        The error line, for callers that compare it whole.
    """
    assert result.exit_code == code, (result.exit_code, result.output, result.exception)
    assert "Traceback" not in result.output, result.output
    assert result.stdout == "", result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def noise(height: int, width: int, channels: int = 3, seed: int = 0) -> np.ndarray:
    """Uniform random uint8 pixels, reproducible from ``seed``.

    Returns:
        An array of shape (height, width, channels), or (height, width) for one channel.
    """
    shape = (height, width, channels) if channels > 1 else (height, width)
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def tinted_noise(height: int, width: int, channels: int = 3, seed: int = 0) -> np.ndarray:
    """Photo-like uint8 pixels: a ramp in a random tint plus noise, reproducible from ``seed``.

    Unlike :func:`noise`, each image has its own colour balance, so a model that looks at
    colour ranks the classes differently from one image to the next.

    Returns:
        An array of shape (height, width, channels), or (height, width) for one channel.
    """
    rng = np.random.default_rng(seed)
    ramp = np.linspace(0, 160, width)[None, :, None] + np.linspace(0, 60, height)[:, None, None]
    tint = rng.uniform(0.1, 1.0, channels)  # each image its own colour balance
    values = ramp * tint + rng.integers(0, 96, (height, width, channels))
    pixels = np.clip(values, 0, 255).astype(np.uint8)
    return pixels if channels > 1 else pixels[..., 0]


# -- the real command in a subprocess ---------------------------------------------------------

REPO = Path(__file__).resolve().parents[1]


def guidedbp_command(*args) -> list[str]:
    """``python -m guidedbp ARGS`` with this interpreter (each argument through ``str``)."""
    return [sys.executable, "-m", "guidedbp", *map(str, args)]


def subprocess_environment() -> dict:
    """The environment for a subprocess run: this checkout importable, TensorFlow quiet."""
    return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(REPO)}


def wait_for_lines(manifest: Path, count: int, process, timeout: float = 120) -> int:
    """Wait until ``manifest`` has ``count`` lines while ``process`` runs; fail the test if
    the process exits first or the time runs out. Returns the number of lines seen."""
    import pytest

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if manifest.exists():
            lines = manifest.read_bytes().count(b"\n")
            if lines >= count:
                return lines
        if process.poll() is not None:
            pytest.fail(f"guidedbp exited early with {process.returncode}: "
                        f"{process.stderr.read().decode(errors='replace')}")
        time.sleep(0.01)
    process.kill()
    pytest.fail(f"{manifest} did not reach {count} lines in {timeout} s")


class no_hang:  # noqa: N801 - a context manager, used like a function
    """Fail (``TimeoutError``) instead of hanging when the body takes over ``seconds``.

    A SIGALRM handler raises, which also interrupts a blocking ``open`` of a FIFO.
    Main thread only.
    """

    def __init__(self, seconds: float):
        self.seconds = seconds

    def __enter__(self):
        import signal

        def expire(signum, frame):
            raise TimeoutError(f"still running after {self.seconds} s: it hangs")

        self._previous = signal.signal(signal.SIGALRM, expire)
        signal.setitimer(signal.ITIMER_REAL, self.seconds)
        return self

    def __exit__(self, *exc):
        import signal

        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self._previous)
