"""Every method through ``guidedbp explain``, and the comparison panel."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from guidedbp import Explainer
from guidedbp.cli import main
from guidedbp.engine.methods.registry import as_methods
from guidedbp.io.images import decode_image
from guidedbp.io.inputs import output_stem
from guidedbp.io.manifest import read_manifest
from guidedbp.models.preprocess import preprocess
from guidedbp.models.resizing import fit
from guidedbp.render import PANEL_COLUMNS, PANEL_GAP, PANEL_MARGIN

from .models import X4x4, cam_cnn

SIZE = 4
#: The methods that explain a class: every one but D-RISE (detections alone,
#: tests/test_drise.py); what --method all runs on a classifier.
EVERY = as_methods("all")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """cam_cnn saved as .keras, and round(50 * X4x4) saved as an 8-bit grayscale PNG.

    The model takes one channel and raw pixels (preprocess "none"), so the expected
    maps come from the decoded PNG through the same fit and preprocess.
    """
    folder = tmp_path_factory.mktemp("methods")
    model = cam_cnn()
    model_path = folder / "cam.keras"
    model.save(model_path)
    pixels = np.round(X4x4[0, :, :, 0] * 50).astype(np.uint8)
    Image.fromarray(pixels, "L").save(folder / "img.png")
    return folder, model, model_path


def run(*args):
    return CliRunner().invoke(main, ["explain", *args], catch_exceptions=False)


def model_input(folder):
    image = decode_image(folder / "img.png", channels=1)
    fitted, _ = fit(image, (SIZE, SIZE))
    return preprocess(fitted, "none")[None]


@pytest.mark.parametrize("method", EVERY)
def test_each_method_raw_map_equals_the_explainer(setup, method):
    folder, model, model_path = setup
    out = folder / f"out-{method}"
    result = run(str(model_path), str(folder / "img.png"), "-o", str(out), "--method", method,
                 "--raw", "--upsample", "nearest", "--steps", "8", "-q")
    assert result.exit_code == 0, result.output
    record = read_manifest(out / "manifest.jsonl")[0]
    assert record["method"] == method and record["status"] == "ok"
    expected = Explainer(model, method, upsample="nearest", steps=8)(model_input(folder))[0]
    np.testing.assert_allclose(np.load(out / record["raw"]), expected, rtol=1e-6, atol=1e-7)
    for path in record["outputs"].values():
        assert Image.open(out / path).size == (SIZE, SIZE)


def test_all_methods_make_one_comparison_panel(setup):
    folder, model, model_path = setup
    out = folder / "out-all"
    result = run(str(model_path), str(folder / "img.png"), "-o", str(out), "--method", "all",
                 "--render", "panel,color", "--raw", "--tile", "64", "-q")
    assert result.exit_code == 0, result.output
    record = read_manifest(out / "manifest.jsonl")[0]
    assert record["method"] == ",".join(EVERY) and "drise" not in EVERY
    assert record["outputs"]["panel"] == output_stem(str(folder / "img.png")) + ".panel.png"
    assert sorted(record["outputs"]) == sorted(
        ["panel"] + [f"{m}.color" for m in EVERY])
    assert sorted(record["raw"]) == sorted(EVERY)
    panel = np.asarray(Image.open(out / record["outputs"]["panel"]))
    # The original, then one per method: rows of PANEL_COLUMNS tiles, 22 in four rows.
    assert 1 + len(EVERY) == 22 > 3 * PANEL_COLUMNS
    assert panel.shape[1] == 2 * PANEL_MARGIN + PANEL_COLUMNS * 64 + (PANEL_COLUMNS - 1) * PANEL_GAP
    # The first column, below the caption and titles, is the original picture (gray -> RGB)
    # enlarged 16 times, nearest-neighbour.
    tile = np.kron(np.asarray(Image.open(folder / "img.png")), np.ones((16, 16), np.uint8))
    left = PANEL_MARGIN
    top = next(row for row in range(panel.shape[0])
               if np.array_equal(panel[row : row + 64, left:left + 64, 0], tile))
    column = panel[top : top + 64, left:left + 64]
    assert np.array_equal(column[..., 0], column[..., 2])
    # Each method's raw map is that method's explainer output.
    gradcam = np.load(out / record["raw"]["gradcam"])
    np.testing.assert_allclose(gradcam, Explainer(model, "gradcam")(model_input(folder))[0],
                               rtol=1e-6)


def test_smoothgrad_through_the_cli_is_seeded(setup):
    folder, model, model_path = setup
    maps = []
    for seed in ("3", "3", "4"):
        out = folder / f"out-smooth-{len(maps)}"
        result = run(str(model_path), str(folder / "img.png"), "-o", str(out), "--smooth", "4",
                     "--noise", "0.2", "--seed", seed, "--raw", "-q")
        assert result.exit_code == 0, result.output
        maps.append(np.load(out / (output_stem(str(folder / "img.png")) + ".guided.npy")))
    np.testing.assert_array_equal(maps[0], maps[1])
    assert not np.array_equal(maps[0], maps[2])
    expected = Explainer(model, "guided", smooth=4, noise=0.2, seed=3)(model_input(folder))[0]
    np.testing.assert_allclose(maps[0], expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [(["--method", "saliency"], "saliency: choose from guided"),
     (["--method", "gradcam", "--layer", "nope"], "no layer named 'nope'"),
     (["--baseline", "grey"], "'grey' is not one of"),
     (["--smooth", "-2"], "-2 is not in the range")],
)
def test_bad_method_options_exit_2(setup, args, fragment):
    folder, _, model_path = setup
    result = CliRunner().invoke(main, ["explain", str(model_path), str(folder / "img.png"),
                                       "-o", str(folder / "bad"), *args])
    assert result.exit_code == 2
    assert fragment in result.output
    assert "Traceback" not in result.output
