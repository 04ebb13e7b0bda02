"""The progress bar as a person sees it: ``explain`` and ``evaluate`` run with stderr on a
real pseudo-terminal, where it is drawn, and on a pipe, where it is not.

The commands run in this process (the command line's ``main``, as ``python -m guidedbp``
calls it), with ``sys.stderr`` a file on the terminal or the pipe: a process of its own
would add a TensorFlow import per run and nothing that this file tests."""

from __future__ import annotations

import os
import pty
import sys
import threading
from pathlib import Path

SHAPES = Path(__file__).resolve().parent.parent / "sample_images" / "shapes"


def run_on(args: list[str], tmp_path: Path, terminal: bool = True) -> tuple[int, str, str]:
    """``guidedbp ARGS`` with stderr on a pseudo-terminal (or a pipe), stdout in a file
    and stdin empty: (code, stdout, what the terminal or the pipe showed)."""
    from guidedbp.cli import main

    reading, writing = pty.openpty() if terminal else os.pipe()
    shown: list[bytes] = []

    def drain() -> None:  # as the terminal would: a full buffer would block the command
        while True:
            try:
                data = os.read(reading, 65536)
            except OSError:  # EIO: the terminal's last writer closed it
                break
            if not data:
                break
            shown.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    saved = sys.stdin, sys.stdout, sys.stderr
    code = None
    with open(tmp_path / "stdout.txt", "w", encoding="utf-8") as stdout, \
            open(os.devnull, encoding="utf-8") as stdin, \
            open(writing, "w", encoding="utf-8", errors="replace") as stderr:
        sys.stdin, sys.stdout, sys.stderr = stdin, stdout, stderr
        try:
            main([*args], prog_name="guidedbp")
        except SystemExit as exit_:
            code = exit_.code
        finally:
            sys.stdin, sys.stdout, sys.stderr = saved
    reader.join(timeout=60)
    os.close(reading)
    return code or 0, (tmp_path / "stdout.txt").read_text(), \
        b"".join(shown).decode(errors="replace")


def run_on_a_terminal(args: list[str], tmp_path: Path) -> tuple[int, str, str]:
    """``guidedbp ARGS`` with stderr on a pseudo-terminal: (code, stdout, what the
    terminal showed)."""
    return run_on(args, tmp_path, terminal=True)


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
    code, _, piped = run_on(["explain", "demo", *images, "-o", str(tmp_path / "piped"),
                             "--method", "lime", "--samples", "20"], tmp_path, terminal=False)
    assert code == 0, piped[-2000:]
    assert "· lime" not in piped and "\r" not in piped
    assert "2 explained" in piped


def test_quiet_draws_no_bar_even_on_a_terminal(tmp_path):
    code, _, shown = run_on_a_terminal(
        ["explain", "demo", str(SHAPES / "circle_0.png"), "-o", str(tmp_path / "out"),
         "--method", "rise", "--masks", "20", "-q"], tmp_path)
    assert code == 0, shown[-2000:]
    assert "· rise" not in shown and "explained" not in shown


# -- what the line says, and when ----------------------------------------------------------


class FakeClock:
    """Seconds that pass only when the test says so."""

    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def frames(stream) -> list[str]:
    """The lines drawn so far, in order, as a terminal redraws them (``\\r``...)."""
    return [frame.removesuffix("\x1b[K") for frame in stream.getvalue().split("\r")[1:]]


def test_the_line_shows_decoding_then_the_first_pass_then_a_rate_and_an_eta():
    import io

    from guidedbp.cli.progress import Progress

    clock, stream = FakeClock(), io.StringIO()
    progress = Progress(clock=clock, stream=stream)
    progress.note("loading the model...")
    clock.now += 7.0  # loading and tracing: not counted in the rate
    progress.begin(100)
    progress.decode()
    progress.decode()
    progress.explaining()
    clock.now += 1.0
    progress.passes("rise", 16, 32)
    clock.now += 3.0  # the first batch of 16 took 4 s since begin: 4 images/s
    progress.explained(16)
    progress.advance()  # a delivery behind the engine: the same line, not drawn again
    clock.now += 4.0
    progress.explained(16)  # 32 in 8 s: 4 images/s, 68 left: 17 s
    clock.now += 0.5
    progress.explained(68)  # 100 in 8.5 s
    empty = "." * 30
    assert frames(stream) == [
        "loading the model...",
        f"[{empty}] 0/100 · starting...",
        f"[{empty}] 0/100 · 1 decoded",
        f"[{empty}] 0/100 · 2 decoded",
        f"[{empty}] 0/100 · 2 decoded · first pass...",
        f"[{empty}] 0/100 · 2 decoded · first pass... · rise 16/32 passes",
        f"[{'#' * 4}{'.' * 26}] 16/100 4.0 images/s · ETA 0:21",  # drawn once
        f"[{'#' * 9}{'.' * 21}] 32/100 4.0 images/s · ETA 0:17",
        f"[{'#' * 30}] 100/100 11.8 images/s",
    ]


def test_passes_redraw_at_most_every_fifth_of_a_second_but_the_last():
    import io

    from guidedbp.cli.progress import Progress

    clock, stream = FakeClock(), io.StringIO()
    progress = Progress(clock=clock, stream=stream)
    progress.begin(2)
    for done in range(1, 11):
        clock.now += 0.0625  # exact in binary
        progress.passes("lime", done, 10)
    drawn = [frame.rsplit("· ", 1)[-1] for frame in frames(stream)[1:]]
    # t = k / 16 s: drawn at k = 4 (0.25 s), 8 (0.25 s later) and the last.
    assert drawn == ["lime 4/10 passes", "lime 8/10 passes", "lime 10/10 passes"]


def test_durations_round_up_to_whole_seconds():
    from guidedbp.cli.progress import duration

    assert [duration(s) for s in (0.01, 1.0, 59.5, 60.0, 3599.2, 3600.0, 36000.0)] == [
        "0:01", "0:01", "1:00", "1:00", "1:00:00", "1:00:00", "10:00:00"]


def test_explain_shows_the_first_batch_under_way_then_an_eta_on_a_terminal(tmp_path):
    import re
    import shutil

    folder = tmp_path / "images"
    folder.mkdir()
    shapes = sorted(SHAPES.iterdir())
    for index in range(20):  # 20 images: a batch of 16, then one of 4
        shutil.copy(shapes[index % len(shapes)], folder / f"{index:02d}.png")
    code, _, shown = run_on_a_terminal(
        ["explain", "demo", str(folder), "-o", str(tmp_path / "out"), "--method", "guided",
         "--batch-size", "16"], tmp_path)
    assert code == 0, shown[-2000:]
    drawn = [frame.split("\x1b[K")[0] for frame in shown.split("\r")]
    first_done = next(i for i, frame in enumerate(drawn) if re.search(r"\] [1-9]\d*/20", frame))
    before = drawn[:first_done]
    # Before the first batch is through: the model loading, each image decoded, the
    # first pass under way; none with a rate.
    assert "loading the model..." in before
    decoded = [int(m.group(1)) for frame in before
               if (m := re.search(r"\] 0/20 · (\d+) decoded", frame))]
    assert decoded[:16] == list(range(1, 17)), before
    assert any(frame.endswith("0/20 · 16 decoded · first pass...") for frame in before)
    assert not any("images/s" in frame for frame in before)
    # Then the rate and the ETA, the images left over the rate drawn.
    assert re.search(r"\] 16/20 \d", drawn[first_done]), drawn[first_done]
    rate, minutes, seconds = re.search(r"\] 16/20 ([\d.]+) images/s · ETA (\d+):(\d\d)$",
                                       drawn[first_done]).groups()
    eta, rate = int(minutes) * 60 + int(seconds), float(rate)
    # The rate is drawn to 0.1, the ETA rounded up to a second.
    assert 4 / (rate + 0.05) - 1 <= eta <= 4 / max(rate - 0.05, 1e-9) + 1, drawn[first_done]
    last = [frame for frame in drawn if "20/20" in frame][-1]
    assert re.search(r"\] 20/20 [\d.]+ images/s$", last), last
    assert "20 explained" in shown
