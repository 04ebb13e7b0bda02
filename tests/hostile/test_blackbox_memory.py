"""The black-box methods at their allowed limits: memory bounded by the batch, not by the
masks, samples or designs, a system that cannot fit refused before any work, and no run
at the limits that takes minutes.

Before issue 33, ``kernelshap --samples 100000 --grid 64`` on one 64x64 image took 9.15 GB
and 251 s: the design (100,000 x 4,096 float64, 3.2 GB) and its copies were held whole,
and the regression solved by least squares. Now every method draws, scores and folds
its masks or design a block at a time; what exists whole is KernelSHAP's and LIME's
4097 x 4097 system (:func:`guidedbp.engine.methods.regression.fixed_bytes`).

Two measures:

- In this process, with a numpy function as the model: the memory numpy allocates
  (``tracemalloc``) is the same for a method's N copies per image as for 8 N, as a
  block holds it (made small here), where it grew with N before.
- The command, ``python -m guidedbp explain`` in a subprocess on one 64x64 image, at each
  method's upper bounds (``--grid 64`` with 100,000 masks or samples, 24 Sobol designs:
  98,352 passes): the peak RSS (``VmHWM``) the run adds to that of the same command with
  the defaults, and its CPU seconds.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from guidedbp.engine.methods import blackbox as _blackbox
from guidedbp.engine.methods import copies as _copies
from guidedbp.engine.methods import regression as _regression
from guidedbp.engine.options import MAX_BLACKBOX_PASSES, MAX_GRID

from ..helpers import assert_one_line_error, run_cli, subprocess_environment
from ..models import colour_cnn

# Each black-box method at its upper bounds, minutes of CPU:
# make test-all runs these, make test leaves them out (the heavy marker).
pytestmark = pytest.mark.heavy

FILL = np.zeros(3, np.float32)


def _scores(side: int):
    rng = np.random.default_rng(0)
    weights = rng.normal(size=(side * side * 3, 2)).astype(np.float32)
    return lambda copies, rows: np.tanh(copies.reshape(len(copies), -1) @ weights)


def _run(method: str, count: int, side: int = 32, grid: int = 16) -> None:
    images = np.random.default_rng(1).uniform(0, 1, (1, side, side, 3)).astype(np.float32)
    scores, keys = _scores(side), [[0, 0]]
    if method == "rise":
        _blackbox.rise(images, 2, scores, 64, FILL, keys, count, grid, 0.5)
    elif method == "sobol":
        _blackbox.sobol(images, 2, scores, 64, FILL, max(2, count // (grid * grid + 2)), grid)
    else:
        getattr(_regression, method)(images, 2, scores, 64, FILL, keys, count, grid)


def _traced_peak(method: str, count: int) -> int:
    tracemalloc.start()
    try:
        _run(method, count)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("method", ["rise", "kernelshap", "lime", "sobol"])
def test_memory_does_not_grow_with_the_copies(method, monkeypatch):
    """16,000 copies of a 32x32 image over a 16x16 grid take the memory 2,000 do (both
    above RISE's block of 1,024 masks drawn at once), within what KernelSHAP's bits of
    drawn coalitions add (a bit per region and half-sample): before, the masks or designs
    were held whole, 8 times as large (KernelSHAP's 33 MB of float64 coalitions and their
    sorted copies; RISE's 4 MB of masks; Sobol's 16 MB design)."""
    monkeypatch.setattr(_copies, "DESIGN_BYTES", 64 * 1024)
    monkeypatch.setattr(_regression, "DESIGN_BYTES", 64 * 1024)
    _run(method, 100)  # imports, caches and TensorFlow's first Sobol sample: not measured
    small, large = _traced_peak(method, 2000), _traced_peak(method, 16000)
    bits = 16000 // 2 * 256 // 8  # KernelSHAP's drawn halves at 16,000 samples
    assert large - small < bits + 256 * 1024, (small, large)
    # One batch of 64 copies (a few float32 arrays of 64 x 32 x 32 x 3), the 257^2 system
    # with its copies and RISE's block of 1,024 masks (float64 draws, bool cells) bound
    # it, whatever the copies.
    batch, system, block = 6 * 64 * 32 * 32 * 3 * 4, 4 * 257 * 257 * 8, 1024 * 256 * 10
    assert large < batch + system + block + bits, (small, large)


# -- the command at the upper bounds ------------------------------------------------------------


#: Each method's flags at its upper bounds; Sobol's designs x (grid^2 + 2) passes must stay
#: within the same bound on passes, 24 x 4098 = 98,352 at grid 64.
LIMITS = {
    "rise": ["--masks", MAX_BLACKBOX_PASSES],
    "kernelshap": ["--samples", MAX_BLACKBOX_PASSES],
    "lime": ["--samples", MAX_BLACKBOX_PASSES],
    "sobol": ["--designs", MAX_BLACKBOX_PASSES // (MAX_GRID ** 2 + 2)],
}

# Runs the command twice in one process, its defaults then the limits, and prints the
# peak RSS (VmHWM, KiB) after each and the CPU seconds of the second.
_SCRIPT = textwrap.dedent("""
    import resource, sys
    from guidedbp.cli import main

    def run(args):
        try:
            main(args, standalone_mode=False)
        except SystemExit as exit_:
            assert exit_.code in (0, None), exit_.code
        with open("/proc/self/status") as status:
            return int(next(line.split()[1] for line in status if line.startswith("VmHWM:")))

    def cpu():
        used = resource.getrusage(resource.RUSAGE_SELF)
        return used.ru_utime + used.ru_stime

    split = sys.argv.index("--")
    base = run(sys.argv[1:split])
    before = cpu()
    peak = run(sys.argv[split + 1:])
    print("MEASURED", base, peak, cpu() - before)
""")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("blackbox-memory")
    colour_cnn((64, 64, 3)).save(folder / "tiny64.keras")
    pixels = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(folder / "a.png")
    return folder


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc")
@pytest.mark.parametrize("method", list(LIMITS))
def test_each_method_at_its_limits_holds_a_batch_and_its_system(workspace, tmp_path, method):
    """At the upper bounds the run adds to the peak RSS of the same command at the
    defaults at most what it holds by design: the system of KernelSHAP and LIME
    (``fixed_bytes``: 400 MiB for KernelSHAP at grid 64, the 4097^2 float64 system, the
    solver's copy and the Cholesky test's, and a block of the design; 272 MiB for LIME),
    and for every method the 256 copies of a batch with their masks and temporaries, the
    model's activations for them and RISE's block of 1,024 masks drawn (allowed 256 MiB;
    measured 106 MiB for RISE, whose defaults score 100 copies in their one batch).
    Before, the design alone was 3.2 GB at these bounds (1.6 GB for Sobol's float32 one,
    410 MB of RISE's masks). Measured on 2 cores: +106 / +459 / +280 / +38 MiB and 34 /
    66 / 97 / 20 CPU s for RISE, KernelSHAP, LIME and Sobol; the bound of 180 CPU s (90 s
    on 2 cores) keeps a run at the limits from taking minutes. KernelSHAP's values add up
    to the score's gain (efficiency): the least squares before missed it by 4.5e-5 of
    0.067 here."""
    common = [workspace / "tiny64.keras", workspace / "a.png", "--method", method, "-q",
              "--no-report", "--batch-size", "256", "--render", "color", "--raw"]
    defaults = ["explain", *common, "-o", tmp_path / "defaults"]
    limits = ["explain", *common, "-o", tmp_path / "limits", "--grid", MAX_GRID,
              *LIMITS[method]]
    done = subprocess.run([sys.executable, "-c", _SCRIPT, *map(str, defaults), "--",
                           *map(str, limits)], env=subprocess_environment(),
                          capture_output=True, text=True, timeout=900)  # a hang guard
    assert done.returncode == 0, done.stderr
    base, peak, seconds = done.stdout.split("MEASURED")[-1].split()
    added = (int(peak) - int(base)) * 1024
    held = _regression.fixed_bytes(method, MAX_GRID ** 2, MAX_BLACKBOX_PASSES) \
        if method in _blackbox.REGRESSION_METHODS else 0
    assert added < held + 256 * 2**20, \
        f"{method}: {added / 2**20:.0f} MiB over the defaults' {int(base) / 1024:.0f} MiB"
    assert float(seconds) < 180, f"{method}: {float(seconds):.0f} CPU seconds"
    saliency = np.load(tmp_path / "limits" / f"a.png.{method}.npy").astype(np.float64)
    assert saliency.shape == (64, 64, 1) and np.isfinite(saliency).all() and saliency.any()
    if method == "kernelshap":  # one region per pixel: the map sums the Shapley values
        gain = _logit_gain(workspace / "tiny64.keras", workspace / "a.png")
        assert abs(saliency.sum() - gain) < 1e-5 * abs(gain) + 1e-7, (saliency.sum(), gain)


def _logit_gain(model_path: Path, image: Path) -> float:
    """The top class's logit on the image less that on the fill (127.5 everywhere): what
    KernelSHAP's values add up to (efficiency)."""
    import keras

    model = keras.models.load_model(model_path)
    dense = model.layers[-1]
    pixels = np.asarray(Image.open(image), np.float32)[None]
    batch = np.concatenate([pixels, np.full_like(pixels, 127.5)])
    logits = keras.Model(model.inputs, dense.input).predict(batch, verbose=0) @ \
        dense.get_weights()[0] + dense.get_weights()[1]
    top = int(np.argmax(logits[0]))
    return float(logits[0, top] - logits[1, top])


# -- refused before any work -------------------------------------------------------------------


def test_a_system_that_cannot_fit_is_refused_naming_a_grid_that_fits(workspace, tmp_path,
                                                                      monkeypatch):
    """With 100 MiB free, KernelSHAP's 4097^2 system at grid 64 is refused at once, in one
    line with the sizes; the grid it names runs with the same free memory, and the next
    one up is refused."""
    from guidedbp.engine import inputs as _inputs

    monkeypatch.setattr(_inputs, "available_memory", lambda: 100 * 2**20)
    args = ["explain", workspace / "tiny64.keras", workspace / "a.png", "--method",
            "kernelshap", "--samples", 5000, "-q"]
    result = run_cli(*args, "--grid", 64, "-o", tmp_path / "refused")
    line = assert_one_line_error(result, "--grid 64: kernelshap solves a system of 4097x4097 "
                                         "float64 over its 4096 regions, 400 MiB with the "
                                         "solver's copies, and 100 MiB are free: try --grid ")
    assert not (tmp_path / "refused").exists()
    fits = int(re.search(r"try --grid (\d+)$", line)[1])
    assert 8 < fits < 64
    run_cli(*args, "--grid", fits, "-o", tmp_path / "fits", code=0)
    assert (tmp_path / "fits" / "a.png.kernelshap.color.png").exists()
    assert_one_line_error(run_cli(*args, "--grid", fits + 1, "-o", tmp_path / "over"),
                          f"--grid {fits + 1}: kernelshap solves a system")
