"""The progress bar as a person sees it: ``explain`` and ``evaluate`` run with stderr on a
real pseudo-terminal, where it is drawn, and on a pipe, where it is not."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

SHAPES = Path(__file__).resolve().parent.parent / "sample_images" / "shapes"


def run_on_a_terminal(args: list[str], tmp_path: Path) -> tuple[int, str, str]:
    """``python -m guidedbp ARGS`` with stderr on a pseudo-terminal: (code, stdout, what
    the terminal showed)."""
    main, terminal = pty.openpty()
    with open(tmp_path / "stdout.txt", "wb") as stdout:
        process = subprocess.Popen([sys.executable, "-m", "guidedbp", *args],
                                   stdin=subprocess.DEVNULL, stdout=stdout, stderr=terminal)
    os.close(terminal)
    shown = []
    while True:
        try:
            data = os.read(main, 65536)
        except OSError:  # EIO: the process closed the terminal
            break
        if not data:
            break
        shown.append(data)
    os.close(main)
    code = process.wait(timeout=600)
    return code, (tmp_path / "stdout.txt").read_text(), b"".join(shown).decode(errors="replace")


def test_evaluate_counts_images_and_forward_passes_on_a_terminal(tmp_path):
    code, stdout, shown = run_on_a_terminal(
        ["evaluate", "demo", "--shapes", "3", "--method", "rise,guided", "--metric",
         "pointing"], tmp_path)
    assert code == 0, shown[-2000:]
    # 3 images in one batch, RISE's 100 masks each: 300 copies, 16 per forward pass.
    assert "· rise 300/300 passes" in shown, shown[-2000:]
    assert "] 3/3 " in shown
    assert "pointing game" in stdout and "· rise" not in stdout and "\r" not in stdout


def test_explain_draws_the_passes_on_a_terminal_and_nothing_on_a_pipe(tmp_path):
    images = [str(SHAPES / name) for name in ("circle_0.png", "cross_0.png")]
    code, _, shown = run_on_a_terminal(
        ["explain", "demo", *images, "-o", str(tmp_path / "out"), "--method", "lime",
         "--samples", "20"], tmp_path)
    assert code == 0, shown[-2000:]
    assert "· lime 40/40 passes" in shown and "] 2/2 " in shown
    assert "2 explained" in shown
    piped = subprocess.run(
        [sys.executable, "-m", "guidedbp", "explain", "demo", *images, "-o",
         str(tmp_path / "piped"), "--method", "lime", "--samples", "20"],
        capture_output=True, text=True, timeout=600)
    assert piped.returncode == 0, piped.stderr[-2000:]
    assert "· lime" not in piped.stderr and "\r" not in piped.stderr
    assert "2 explained" in piped.stderr


def test_quiet_draws_no_bar_even_on_a_terminal(tmp_path):
    code, _, shown = run_on_a_terminal(
        ["explain", "demo", str(SHAPES / "circle_0.png"), "-o", str(tmp_path / "out"),
         "--method", "rise", "--masks", "20", "-q"], tmp_path)
    assert code == 0, shown[-2000:]
    assert "· rise" not in shown and "explained" not in shown
