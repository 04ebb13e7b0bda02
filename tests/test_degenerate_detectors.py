"""Detectors a hostile user (or a broken export) hands over (issue 39, items 15 and 21).

Built here from the tiny detector of ``test_cli_detections`` (sixteen 8x8 cells, each one
proposal whose box is the cell): with NaN class scores (a NaN bias before the sigmoid),
with every box inverted (``x1, y1, x0, y0``), with one box inverted (the bright red
cell's), and, as a SavedModel, with no proposal at all.

- NaN scores under ``--detections`` said "no detections" and exited 0, where a ``box:``
  target fails each input with the non-finite-score caveat: both fail each input now.
- A detector whose every proposal is inverted, or that has none, failed each input with
  "the model cannot take this image" and a TensorFlow message (or explained nothing
  silently): it is refused before any input is read, saying what is wrong with it.
- An inverted proposal among good ones is no detection (it cannot be explained as one).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from guidedbp.io.manifest import read_manifest

from .helpers import assert_one_line_error, run_cli
from .test_cli_detections import scene, tiny_detector

CELLS = [[8 * col, 8 * row, 8 * col + 8, 8 * row + 8] for row in range(4) for col in range(4)]
#: The bright red cell of scene(): column 2, row 1.
BRIGHT_CELL = 6


def with_boxes(cells) -> object:
    model = tiny_detector()
    model.get_layer("place").set_weights([np.zeros((32, 64), np.float32),
                                          np.array(cells, np.float32).reshape(-1)])
    return model


class NoProposal(tf.Module):
    """32x32 RGB -> boxes (B, 0, 4) and sigmoid scores (B, 0, 2)."""

    def __init__(self):
        self.kernel = tf.Variable(tf.ones((1, 1, 3, 4)))

    @tf.function(input_signature=[tf.TensorSpec((None, 32, 32, 3), tf.float32)])
    def serve(self, images):
        cells = tf.reshape(tf.nn.relu(tf.nn.conv2d(images, self.kernel, 1, "VALID")),
                           (-1, 32 * 32, 4))[:, :0, :]
        return {"boxes": cells, "scores": tf.sigmoid(cells[:, :, :2])}


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("degenerate")
    nan = tiny_detector()
    weights = nan.get_layer("cls").get_weights()
    nan.get_layer("cls").set_weights([weights[0], np.full(2, np.nan, np.float32)])
    nan.save(root / "nan.keras")
    with_boxes([[x1, y1, x0, y0] for x0, y0, x1, y1 in CELLS]).save(root / "inverted.keras")
    one = [list(cell) for cell in CELLS]
    one[BRIGHT_CELL] = one[BRIGHT_CELL][2:] + one[BRIGHT_CELL][:2]
    with_boxes(one).save(root / "one_inverted.keras")
    module = NoProposal()
    tf.saved_model.save(module, str(root / "none"), signatures={"serving_default": module.serve})
    (root / "photos").mkdir()
    Image.fromarray(scene()).save(root / "photos" / "a.png")
    Image.fromarray(scene(2)).save(root / "photos" / "b.png")
    return root


def explain(ws: Path, model: str, out: Path, *args, code: int | None = None):
    return run_cli("explain", ws / model, ws / "photos", "-o", out, "-q", "--no-report",
                   *args, code=code)


def failures(out: Path) -> dict[str, str]:
    return {Path(record["input"]).name: record["error"]
            for record in read_manifest(out / "manifest.jsonl") if record["status"] == "error"}


# -- item 15: NaN scores ---------------------------------------------------------------------


def test_nan_scores_fail_each_input_under_detections_as_under_a_box_target(ws, tmp_path):
    caveat = ("is not finite: the model's output overflows on this image, so its maps mean "
              "nothing; no maps written")
    found = explain(ws, "nan.keras", tmp_path / "found", "--detections", "top:2", code=1)
    assert failures(tmp_path / "found") == {
        name: f"proposal 0's class score (nan) {caveat}" for name in ("a.png", "b.png")}
    assert found.stderr.count("  failed: ") == 2 and "no detection" not in found.stderr
    boxed = explain(ws, "nan.keras", tmp_path / "boxed", "--target", "box:16,8,24,16", code=1)
    assert failures(tmp_path / "boxed") == {
        name: f"box:16,8,24,16's score (nan) {caveat}" for name in ("a.png", "b.png")}
    assert boxed.stderr.count("  failed: ") == 2
    assert not list((tmp_path / "found").rglob("*.png"))


# -- item 21: degenerate detectors ------------------------------------------------------------


@pytest.mark.parametrize("args", [["--detections", "top:2"], ["--target", "box:16,8,24,16"]],
                         ids=["detections", "box"])
@pytest.mark.parametrize(("model", "why"), [
    ("inverted.keras", "every proposal of its boxes output 'boxes' is inverted on a blank "
                       "32x32 image (the first: 8, 8, 0, 0; x1 below x0 or y1 below y0): its "
                       "boxes are not corners x0, y0, x1, y1 in input pixels"),
    ("none", "its boxes output 'boxes' holds no proposal (0 per image at 32x32)"),
], ids=["inverted", "no-proposal"])
def test_a_degenerate_detector_is_refused_before_any_input(ws, tmp_path, args, model, why):
    result = explain(ws, model, tmp_path / "out", *args)
    given = " ".join(args)
    assert_one_line_error(result, f"Error: {given}: no detection of this model can be "
                                  f"explained: {why}")
    assert not (tmp_path / "out").exists()
    info = json.loads(run_cli("inspect", ws / model, "--json", code=0).stdout)
    assert info["detector"]["degenerate"] == why


def test_an_inverted_proposal_is_no_detection(ws, tmp_path):
    out = tmp_path / "out"
    explain(ws, "one_inverted.keras", out, "--detections", "top:1", code=0)
    records = {Path(r["input"]).name: r for r in read_manifest(out / "manifest.jsonl")}
    for name, scale in (("a.png", 1), ("b.png", 2)):
        (target,) = records[name]["targets"]
        # The bright red cell's box is inverted: the dim red one is the best detection.
        assert target["target"]["box"] == [0, 0, 8 * scale, 8 * scale]
        assert target["class"] == 0
