"""Batch runs you can trust: nothing hangs them, Ctrl-C ends them, big images fit.

- A FIFO (or socket, or device) where a file is expected, given directly or found in a
  folder, as an image, ``--labels``, ``--expect`` or a baseline file: refused at once
  with one line, never opened for a blocking read.
- Ctrl-C at any moment, start-up included, ends ``python -m guidedbp`` within 2 seconds
  with exit code 130, one "interrupted" line and no traceback or TensorFlow log; the
  manifest keeps whole lines and every PNG written is whole.
- A 9000 x 9000 PNG (81 megapixels, a few hundred KB) is explained in well under a
  minute and 2.5 GB: its renders are capped at ``MAX_SHOWN_SIDE`` on the longer side.

The command runs in a subprocess (``python -m guidedbp``), on one tiny model: 16x16x3 ->
Rescaling -> Conv2D(4, 3, relu) -> global average -> Dense(3, softmax).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw

from guidedbp._files import MISSING, NotRegularFileError, open_regular, regular_file
from guidedbp.checks.baseline import BaselineError, load_baseline, save_baseline
from guidedbp.checks.expected import read_expectations
from guidedbp.io.images import ImageError, decode_image
from guidedbp.models.labels import load_labels
from guidedbp.models.resizing import MAX_SHOWN_SIDE
from guidedbp.render import render, render_overlay

from ..helpers import no_hang, run_cli
from ..imagetree import make_flat
from ..models import colour_cnn

# Hangs, huge images and memory bounds: subprocesses under limits:
# make test-all runs these, make test leaves them out (the heavy marker).
pytestmark = pytest.mark.heavy

REPO = Path(__file__).resolve().parents[2]
#: A command that must not hang gets this long, TensorFlow's import included: a guard
#: against hanging, never a measure of speed (a loaded machine may be many times slower).
TIMEOUT = 300
FLAT_COUNT = 300

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")


# -- fixtures and helpers ------------------------------------------------------------------


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("hostile")


@pytest.fixture(scope="module")
def model(workspace) -> Path:
    path = workspace / "tiny.keras"
    colour_cnn((16, 16, 3)).save(path)
    return path


@pytest.fixture(scope="module")
def flat(workspace) -> Path:
    """FLAT_COUNT small PNGs: a run of them at --batch-size 4 lasts long enough to stop."""
    folder = workspace / "flat"
    make_flat(folder, FLAT_COUNT)
    return folder


def _command(*args) -> list[str]:
    return [sys.executable, "-m", "guidedbp", *map(str, args)]


def _environment() -> dict:
    """The caller's environment without TF_CPP_MIN_LOG_LEVEL: the command itself must
    keep TensorFlow's start-up log off stderr."""
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    environment.pop("TF_CPP_MIN_LOG_LEVEL", None)
    return environment


def _run(*args, timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    return subprocess.run(_command(*args), env=_environment(), capture_output=True, text=True,
                          timeout=timeout)


def _run_here(*args) -> subprocess.CompletedProcess:
    """The command in this process (TensorFlow is imported once), failing, not hanging,
    past :data:`TIMEOUT`; returned in the shape of a finished subprocess."""
    with no_hang(TIMEOUT):
        result = run_cli(*args)
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _error_line(stderr: str) -> str:
    """The one ``Error:`` line of a failed command (click may print usage lines above)."""
    errors = [line for line in stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, stderr
    assert "Traceback" not in stderr, stderr
    return errors[0]


def _assert_quiet_stop(stderr: str) -> None:
    """No traceback, no TensorFlow log: only "interrupted" lines (or the run's summary)."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines, "nothing said on stderr"
    for line in lines:
        assert line.startswith(("interrupted", "  failed: ")), stderr


def _load_png(path: Path) -> Image.Image:
    with Image.open(path) as image:
        image.load()
        return image.copy()


def _assert_whole_outputs(out: Path) -> list[dict]:
    """Every manifest line parses, every visible PNG decodes, hidden files are .tmp only."""
    manifest = out / "manifest.jsonl"
    records = []
    if manifest.exists():
        records = [json.loads(line) for line in manifest.read_text().splitlines()]
    for record in records:
        for relative in record["outputs"].values():
            _load_png(out / relative)
    for folder, _, names in os.walk(out):
        for name in names:
            if name.startswith("."):
                assert name.endswith(".tmp"), name  # only a hard stop leaves these
            elif name.endswith(".png"):
                _load_png(Path(folder) / name)
    return records


def _stop(process: subprocess.Popen, manifest: Path) -> tuple[int, str]:
    """Send Ctrl-C at a point of the run that the clock cannot move: the process is
    frozen (SIGSTOP) while its manifest lines are counted and Ctrl-C is queued, and
    receives it the moment it resumes. Returns those lines and its stderr once it ends;
    it must end (a hang guard, not a measure of speed)."""
    process.send_signal(signal.SIGSTOP)
    lines = manifest.read_bytes().count(b"\n") if manifest.exists() else 0
    process.send_signal(signal.SIGINT)
    process.send_signal(signal.SIGCONT)
    try:
        _, stderr = process.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        pytest.fail(f"guidedbp did not stop within {TIMEOUT} s of Ctrl-C")
    return lines, stderr.decode(errors="replace")


# -- the file helper -------------------------------------------------------------------------


@needs_fifo
def test_regular_file_names_what_the_path_is(tmp_path):
    fifo = _fifo(tmp_path / "pipe")
    with pytest.raises(NotRegularFileError) as caught:
        regular_file(fifo, "labels file")
    assert str(caught.value) == f"labels file {str(fifo)!r} is a FIFO, not a regular file"
    assert caught.value.kind == "a FIFO"
    with pytest.raises(NotRegularFileError, match="is a directory, not a regular file"):
        regular_file(tmp_path, "model")
    assert regular_file(tmp_path, "model", directory_ok=True) == str(tmp_path)
    with pytest.raises(NotRegularFileError) as caught:
        regular_file(tmp_path / "nope", "model")
    assert str(caught.value) == f"model {str(tmp_path / 'nope')!r} does not exist"
    assert caught.value.kind == MISSING
    if os.path.exists("/dev/null"):
        with pytest.raises(NotRegularFileError, match="is a character device"):
            regular_file("/dev/null")
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    assert regular_file(plain) == str(plain)
    assert isinstance(caught.value, ValueError)  # callers that catch ValueError see it


@pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="no Unix sockets")
def test_a_socket_is_refused():
    folder = tempfile.mkdtemp()  # short: socket paths are limited to about 100 bytes
    path = os.path.join(folder, "s")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(path)
        with pytest.raises(NotRegularFileError, match="is a socket, not a regular file"):
            open_regular(path)
    os.remove(path)
    os.rmdir(folder)


@needs_fifo
def test_open_regular_refuses_a_fifo_at_once_and_reads_a_file(tmp_path):
    fifo = _fifo(tmp_path / "pipe")
    # Opening a FIFO with no writer blocks for ever: refused at once means it returns.
    with no_hang(TIMEOUT), pytest.raises(NotRegularFileError, match="a FIFO"):
        open_regular(fifo, "r", "labels file")
    plain = tmp_path / "plain.txt"
    plain.write_text("hello\n")
    with open_regular(plain, "r", encoding="utf-8") as handle:
        assert os.get_blocking(handle.fileno())  # set back to blocking
        assert handle.read() == "hello\n"
    with pytest.raises(ValueError, match="reading"):
        open_regular(plain, "w")


@needs_fifo
def test_library_readers_refuse_a_fifo(tmp_path):
    fifo = _fifo(tmp_path / "pipe.png")
    with pytest.raises(ImageError) as caught:
        decode_image(fifo)
    assert caught.value.reason == "not a regular file (a FIFO)"
    with pytest.raises(ValueError, match="labels file is a FIFO, not a regular file"):
        load_labels(fifo)
    with pytest.raises(ValueError, match="expectations file .* is a FIFO"):
        read_expectations(fifo)


@needs_fifo
def test_baseline_files_that_are_fifos_are_refused(tmp_path):
    folder = tmp_path / "baseline"
    save_baseline(str(folder), "m.keras", {}, [
        {"key": "a", "path": None, "class": 0, "map": np.zeros((2, 2, 3))}])
    baseline = load_baseline(str(folder))
    os.remove(folder / "a.npy")
    _fifo(folder / "a.npy")
    with pytest.raises(BaselineError, match="baseline map .* is a FIFO"):
        baseline.load_map("a")
    os.remove(folder / "baseline.json")
    _fifo(folder / "baseline.json")
    with pytest.raises(BaselineError, match="baseline file .* is a FIFO"):
        load_baseline(str(folder))


# -- renders of large originals ----------------------------------------------------------------


def test_a_larger_picture_is_reduced_to_the_capped_map():
    rng = np.random.default_rng(4)
    saliency = rng.normal(size=(41, 64, 3)).astype(np.float32)  # 90 x 140 capped at 64
    picture = rng.integers(0, 256, (90, 140, 3), dtype=np.uint8)
    reduced = np.asarray(Image.fromarray(picture).resize((64, 41), Image.Resampling.BILINEAR))
    np.testing.assert_array_equal(render_overlay(saliency, picture),
                                  render_overlay(saliency, reduced))
    np.testing.assert_array_equal(render("panel", saliency, picture, caption="c"),
                                  render("panel", saliency, reduced, caption="c"))
    with pytest.raises(ValueError, match="size 41x65"):  # not the same aspect
        render_overlay(saliency, picture[:41, :65])


# -- the command: FIFOs ------------------------------------------------------------------------


@needs_fifo
def test_fifo_given_as_an_image_fails_that_input(model, flat, tmp_path):
    fifo = _fifo(tmp_path / "pipe.png")
    result = _run_here("explain", model, fifo, flat / "img0000.png", "-o", tmp_path / "out")
    assert result.returncode == 1, result.stderr
    assert f"  failed: {fifo}: not a regular file (a FIFO)" in result.stderr.splitlines()
    records = _assert_whole_outputs(tmp_path / "out")
    assert [record["status"] for record in records] == ["error", "ok"]


@needs_fifo
def test_fifo_in_a_folder_does_not_hang_the_run(model, flat, tmp_path):
    folder = tmp_path / "photos"
    folder.mkdir()
    (folder / "good.png").write_bytes((flat / "img0001.png").read_bytes())
    _fifo(folder / "pipe.png")
    _fifo(folder / "pipe.txt")
    result = _run_here("explain", model, folder, "-o", tmp_path / "out")
    assert result.returncode in (0, 1), result.stderr  # passed over, or failed alone
    assert "Traceback" not in result.stderr
    records = _assert_whole_outputs(tmp_path / "out")
    assert [r["status"] for r in records if r["input"].endswith("good.png")] == ["ok"]


@needs_fifo
def test_fifo_as_labels_is_a_one_line_error(model, flat, tmp_path):
    fifo = _fifo(tmp_path / "labels.txt")
    result = _run_here("explain", model, flat / "img0000.png", "--labels", fifo,
                  "-o", tmp_path / "out")
    assert result.returncode == 2, result.stderr
    assert "labels file is a FIFO, not a regular file" in _error_line(result.stderr)


@needs_fifo
def test_fifo_as_expect_is_a_one_line_error(model, flat, tmp_path):
    fifo = _fifo(tmp_path / "expected.csv")
    result = _run_here("check", model, flat / "img0000.png", "--expect", fifo, "--checks", "loads")
    assert result.returncode == 2, result.stderr
    assert "is a FIFO, not a regular file" in _error_line(result.stderr)


@needs_fifo
def test_fifo_as_a_baseline_map_fails_the_check(model, flat, tmp_path):
    baseline = tmp_path / "baseline"
    saved = _run_here("check", model, flat / "img0000.png", "--checks", "loads",
                 "--save-baseline", baseline)
    assert saved.returncode == 0, saved.stderr
    (map_file,) = baseline.glob("*.npy")
    map_file.unlink()
    _fifo(map_file)
    result = _run_here("check", model, flat / "img0000.png", "--checks", "baseline",
                  "--baseline", baseline, "--json")
    assert result.returncode == 1, result.stdout + result.stderr
    (baseline_check,) = json.loads(result.stdout)["checks"]
    assert baseline_check["status"] == "fail"
    assert "is a FIFO, not a regular file" in baseline_check["detail"]


# -- the command: Ctrl-C -----------------------------------------------------------------------


def _wait_until_loaded(process: subprocess.Popen, library: str) -> None:
    """Until the process has mapped a shared library whose path holds ``library``: a point
    of its start-up that no machine's load can move (a fixed delay could fall before
    Python itself has started, under load)."""
    deadline = time.monotonic() + TIMEOUT
    maps = Path(f"/proc/{process.pid}/maps")
    while library not in maps.read_text(errors="replace"):
        assert process.poll() is None, "the run ended before Ctrl-C"
        assert time.monotonic() < deadline, f"{library} not loaded in {TIMEOUT} s"
        time.sleep(0.005)


# numpy's core: the command line's own modules are importing, in `python -m guidedbp` and
# in the installed `guidedbp` script alike; TensorFlow's framework library: TensorFlow is
# importing (then the model loads).
@pytest.mark.parametrize("entry, library", [("module", "_multiarray_umath"),
                                            ("script", "_multiarray_umath"),
                                            ("module", "libtensorflow_framework")])
def test_ctrl_c_during_start_up_exits_130_at_once(model, flat, tmp_path, entry, library):
    out = tmp_path / "out"
    command = _command("explain", model, flat, "-o", out, "--batch-size", "4")
    if entry == "script":  # the console script pip wrote beside this Python
        command[:3] = [str(Path(sys.executable).with_name("guidedbp"))]
    process = subprocess.Popen(command, env=_environment(), stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    _wait_until_loaded(process, library)
    assert process.poll() is None, "the run ended before Ctrl-C"
    lines, stderr = _stop(process, out / "manifest.jsonl")
    assert process.returncode == 130, stderr
    _assert_quiet_stop(stderr)
    # At once: the run went no further than start-up, whatever the machine's load.
    assert lines == 0 and _assert_whole_outputs(out) == []


_STUCK_SCRIPT = textwrap.dedent("""
    import signal, time
    import click
    from guidedbp.cli.process import Command

    @click.group(cls=Command)
    def main():
        pass

    @main.command()
    def stuck():
        # As a main thread held in C++ by TensorFlow: Python's handler never runs in it
        # (SIGINT goes to a thread that has it unblocked: the Ctrl-C watcher's).
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        print("stuck", flush=True)
        time.sleep(3600)

    main(["stuck"])
""")


def test_ctrl_c_ends_a_process_whose_main_thread_never_returns(tmp_path):
    from guidedbp.cli.process import INTERRUPT_GRACE

    assert INTERRUPT_GRACE < 2  # the README's "within 2 seconds" rests on it
    process = subprocess.Popen([sys.executable, "-c", _STUCK_SCRIPT], env=_environment(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout.readline() == "stuck\n"  # the main thread is in its sleep
    process.send_signal(signal.SIGINT)
    try:  # only the deadline can end it: without one this sleeps for an hour
        _, stderr = process.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        pytest.fail(f"still running {TIMEOUT} s after Ctrl-C: the deadline did not end it")
    assert (process.returncode, stderr) == (130, "interrupted\n")


def test_ctrl_c_mid_run_exits_130_at_once_with_whole_files(model, flat, tmp_path):
    out = tmp_path / "out"
    manifest = out / "manifest.jsonl"
    process = subprocess.Popen(_command("explain", model, flat, "-o", out, "--batch-size", "4",
                                        "--render", "color,overlay,panel", "--raw"),
                               env=_environment(), stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    deadline = time.monotonic() + TIMEOUT
    while not (manifest.exists() and manifest.read_bytes().count(b"\n") >= 1):
        assert process.poll() is None, process.stderr.read().decode(errors="replace")
        assert time.monotonic() < deadline, "no manifest line in time"
        time.sleep(0.01)
    lines, stderr = _stop(process, manifest)
    assert process.returncode == 130, stderr
    _assert_quiet_stop(stderr)
    records = _assert_whole_outputs(out)
    # At once: no record after Ctrl-C but the one it may have been delivering.
    assert 1 <= lines <= len(records) <= lines + 1 < FLAT_COUNT
    assert all(record["status"] == "ok" for record in records)
    for record in records:
        assert np.load(out / record["raw"]).shape == (16, 16, 3)


# -- the command: an 81-megapixel PNG ----------------------------------------------------------


# Peak RSS from VmHWM, read by the process itself at its end (as benchmarks/bench.py does),
# and the CPU seconds it used (all threads): unlike wall time, the same on a loaded machine.
_PEAK_SCRIPT = textwrap.dedent("""
    import resource, sys
    from guidedbp.cli import main
    try:
        code = main(sys.argv[1:], standalone_mode=False)
    except SystemExit as exit_:
        code = exit_.code
    with open("/proc/self/status") as status:
        peak = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
    used = resource.getrusage(resource.RUSAGE_SELF)
    print(code, peak, used.ru_utime + used.ru_stime)
""")


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc")
def test_81_megapixel_png_is_explained_in_bounded_time_and_memory(model, tmp_path):
    folder = tmp_path / "big"
    folder.mkdir()
    picture = Image.new("RGB", (9000, 9000))
    draw = ImageDraw.Draw(picture)
    draw.rectangle([900, 900, 3000, 4500], fill=(200, 30, 30))
    draw.ellipse([4500, 4500, 8100, 7200], fill=(30, 200, 60))
    picture.save(folder / "huge.png")
    del picture, draw
    assert (folder / "huge.png").stat().st_size < 2_000_000  # under Pillow's bomb limit too
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "-c", _PEAK_SCRIPT, "explain", model, folder, "-o", out, "-q"],
        env=_environment(), capture_output=True, text=True, timeout=600)  # a hang guard
    assert result.returncode == 0, result.stderr
    code, peak_kib, cpu_seconds = result.stdout.split()[-3:]
    assert code in ("0", "None"), result.stderr
    assert float(cpu_seconds) < 60, f"{float(cpu_seconds):.1f} CPU seconds"
    assert int(peak_kib) * 1024 < 2.5e9, f"peak RSS {int(peak_kib) / 2**20:.0f} MiB"
    (record,) = _assert_whole_outputs(out)
    assert record["status"] == "ok", record
    assert set(record["outputs"]) == {"color", "overlay"}
    for relative in record["outputs"].values():
        assert _load_png(out / relative).size == (MAX_SHOWN_SIDE, MAX_SHOWN_SIDE)
