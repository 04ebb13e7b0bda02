"""``guidedbp explain --target box:... / --detections top:K``: a detector's detections.

One tiny plain detector, built here and saved once as .keras: a 32x32 picture cut into
sixteen 8x8 cells, each cell one proposal whose box is the cell itself and whose two
class scores (``red``, ``green``) are ``sigmoid(8 * relu(r - g) - 3)`` and
``sigmoid(8 * relu(g - r) - 3)`` of the cell's mean red and green (0..1). So a pure red
cell scores ``sigmoid(5)`` for red, a cell of red 160 ``sigmoid(8 * 160 / 255 - 3)``, a
black one ``sigmoid(-3)`` (no detection at 0.3): every expected value below is worked out
from that, not read from the code. Boxes are checked through the run's resizing (the
same box drawn on an image twice the size maps to the same model-input box), the
pictures by their pixels (the target box white, the matched proposal dashed magenta),
the manifest and the resumed runs by their fields.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import keras
import numpy as np
import pytest
from PIL import Image

import guidedbp
from guidedbp.io.images import decode_image
from guidedbp.io.manifest import read_manifest
from guidedbp.models.preprocess import prepare
from guidedbp.pipeline.boxes import Box
from guidedbp.pipeline.detections import box_slug
from guidedbp.render import MATCHED_BOX, PANEL_MARGIN, TARGET_BOX
from guidedbp.targets import Detection

from .helpers import assert_one_line_error, run_cli

LABELS = ["red", "green"]


def sigmoid(value: float) -> float:
    return 1 / (1 + math.exp(-value))


#: The class scores of a pure red cell, and of a cell of red 160.
BRIGHT, DIM = sigmoid(5), sigmoid(8 * 160 / 255 - 3)


def tiny_detector() -> keras.Model:
    """32x32 RGB -> ``{"boxes": (B, 16, 4), "scores": (B, 16, 2)}``, one proposal per
    8x8 cell (row-major), its box the cell (``x0, y0, x1, y1``)."""
    inputs = keras.Input((32, 32, 3))
    cells = keras.layers.AveragePooling2D(8)(keras.layers.Rescaling(1 / 255)(inputs))
    hidden = keras.layers.Conv2D(2, 1, activation="relu", name="hidden")(cells)
    logits = keras.layers.Reshape((16, 2))(keras.layers.Conv2D(2, 1, name="cls")(hidden))
    scores = keras.layers.Activation("sigmoid", name="scores")(logits)
    boxes = keras.layers.Dense(64, name="place")(keras.layers.Flatten()(hidden))
    model = keras.Model(inputs, {"boxes": keras.layers.Reshape((16, 4), name="boxes")(boxes),
                                 "scores": scores})
    model.get_layer("hidden").set_weights([
        np.array([[1, -1], [-1, 1], [0, 0]], np.float32).reshape(1, 1, 3, 2),
        np.zeros(2, np.float32)])
    model.get_layer("cls").set_weights([np.eye(2, dtype=np.float32).reshape(1, 1, 2, 2) * 8,
                                        np.full(2, -3, np.float32)])
    cells_xyxy = [[8 * col, 8 * row, 8 * col + 8, 8 * row + 8]
                  for row in range(4) for col in range(4)]
    model.get_layer("place").set_weights([np.zeros((32, 64), np.float32),
                                          np.array(cells_xyxy, np.float32).reshape(-1)])
    return model


def scene(scale: int = 1) -> np.ndarray:
    """A bright red cell at column 2, row 1 (box 16,8,24,16), a dim red one at the top
    left (box 0,0,8,8), at ``scale`` times 32x32."""
    picture = np.zeros((32, 32, 3), np.uint8)
    picture[8:16, 16:24, 0] = 255
    picture[0:8, 0:8, 0] = 160
    return np.kron(picture, np.ones((scale, scale, 1), np.uint8))


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Path:
    """det.keras, a classifier, labels.txt, photos/ (a.png, its double b.png, a black
    c.png) and wide/ (the same wide picture at 32x64 and 64x128)."""
    root = tmp_path_factory.mktemp("detections")
    tiny_detector().save(root / "det.keras")
    inputs = keras.Input((32, 32, 3))
    features = keras.layers.Conv2D(2, 3, activation="relu")(inputs)
    keras.Model(inputs, keras.layers.Dense(2, activation="softmax")(
        keras.layers.GlobalAveragePooling2D()(features))).save(root / "clf.keras")
    (root / "labels.txt").write_text("\n".join(LABELS) + "\n")
    (root / "photos").mkdir()
    Image.fromarray(scene()).save(root / "photos/a.png")
    Image.fromarray(scene(2)).save(root / "photos/b.png")
    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(root / "photos/c.png")
    wide = np.zeros((32, 64, 3), np.uint8)
    wide[8:16, 20:28, 0] = 255
    for folder, factor in (("wide1", 1), ("wide2", 2)):
        (root / folder).mkdir()
        Image.fromarray(np.kron(wide, np.ones((factor, factor, 1), np.uint8))).save(
            root / folder / "w.png")
    return root


@pytest.fixture
def here(ws, monkeypatch) -> Path:
    monkeypatch.chdir(ws)
    return ws


def explain(*args, code: int = 0):
    return run_cli("explain", "det.keras", *args, "--labels", "labels.txt", "-q",
                   "--no-report", code=code)


def records(out: Path) -> dict[str, dict]:
    return {record["input"]: record for record in read_manifest(out / "manifest.jsonl")}


def pixels(path: Path) -> np.ndarray:
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


# -- a box target --------------------------------------------------------------------------


def test_a_box_target_is_explained_recorded_and_named(here, tmp_path):
    out = tmp_path / "out"
    explain("photos/a.png", "-o", out, "--target", "box:16,8,24,16:red", "--method",
            "guided,gradcam", "--render", "panel,color", "--raw")
    entry = records(out)["photos/a.png"]["targets"][0]
    stem = "a.png.box-16-8-24-16-0-red"
    assert entry["outputs"] == {"guided.color": f"{stem}.guided.color.png",
                                "gradcam.color": f"{stem}.gradcam.color.png",
                                "panel": f"{stem}.panel.png"}
    assert all((out / path).is_file() for path in entry["outputs"].values())
    target = entry["target"]
    assert {key: target[key] for key in ("spec", "kind", "output", "index", "name", "box",
                                         "label", "threshold", "box_input")} == {
        "spec": "box:16,8,24,16:red", "kind": "box", "output": None, "index": 0,
        "name": "red", "box": [16, 8, 24, 16], "label": "red", "threshold": 0.3,
        "box_input": [16, 8, 24, 16]}
    matched = target["matched"]
    assert matched["box"] == matched["box_input"] == [16, 8, 24, 16]
    assert matched["iou"] == pytest.approx(1.0)
    assert matched["score"] == pytest.approx(BRIGHT, abs=1e-6)
    assert (entry["class"], entry["label"]) == (0, "red")
    assert entry["score"] == pytest.approx(BRIGHT, abs=1e-6)  # its class score
    assert entry["value"] == pytest.approx(BRIGHT, abs=1e-6)  # IoU 1 x class score
    assert entry["description"] == f"box:16,8,24,16:red matched red p={BRIGHT:.3f}, IoU 1.00"
    assert entry["caveats"] == []
    # The maps are the engine's own for that box on the prepared image.
    loaded = guidedbp.load_model("det.keras")
    image = prepare(decode_image("photos/a.png"), loaded.input_shape, loaded.preprocess)[2]
    reference = guidedbp.Explainer(loaded, "guided").explain(
        image[None], Detection([16, 8, 24, 16], label=0))
    np.testing.assert_allclose(np.load(out / entry["raw"]["guided"]),
                               reference.by_method["guided"][0], rtol=1e-5, atol=1e-9)
    assert np.abs(reference.by_method["guided"][0]).sum() > 0


def test_a_box_with_no_label_takes_the_class_it_is_detected_as(here, tmp_path):
    out = tmp_path / "out"
    explain("photos/a.png", "-o", out, "--target", "box:0,0,8,8")
    entry = records(out)["photos/a.png"]["targets"][0]
    assert (entry["class"], entry["label"], entry["target"]["label"]) == (0, None, None)
    assert entry["score"] == pytest.approx(DIM, abs=1e-6)
    assert entry["outputs"]["color"] == "a.png.box-0-0-8-8.guided.color.png"
    assert entry["description"].startswith("box:0,0,8,8 matched red p=")


def test_boxes_are_written_back_exactly_and_a_long_name_is_cut(here, tmp_path):
    """Corners were written with 6 significant digits: two boxes 1e-7 apart were "listed
    twice", and a box's part of a file name had no bound (box:0,0,1e300,1e300 wrote its
    301 digits: "File name too long"). Now each box is written back exactly, and a name
    part past 64 characters is cut and its digest put after, as long input names are."""
    out = tmp_path / "out"
    near, far = "box:16.0000001,8,24,16", "box:16.123456789012,8.5,24.123456789012,16:red"
    explain("photos/a.png", "-o", out, "--target", "box:16,8,24,16", "--target", near,
            "--target", far)
    entries = records(out)["photos/a.png"]["targets"]
    assert [entry["target"]["spec"] for entry in entries] == ["box:16,8,24,16", near, far]
    stems = [entry["outputs"]["color"].removesuffix(".guided.color.png") for entry in entries]
    assert stems[:2] == ["a.png.box-16-8-24-16", "a.png.box-16.0000001-8-24-16"]
    long = "box-16.123456789012-8.5-24.123456789012-16-0-red"  # 48 characters: kept
    assert stems[2] == f"a.png.{long}"
    slug = box_slug(Box((0.125, 0.25, 999999.5, 999999.75)), 0, "a long class name of a big shape")
    assert len(slug) == 64 and slug.startswith("box-0.125-0.25-999999.5-999999.75-0-a-lon")
    assert re.fullmatch(r".*~[0-9a-f]{12}", slug)
    assert all((out / entry["outputs"]["color"]).is_file() for entry in entries)


def test_a_box_nothing_detects_carries_the_caveat(here, tmp_path):
    out = tmp_path / "out"
    explain("photos/c.png", "-o", out, "--target", "box:16,8,24,16:red")
    entry = records(out)["photos/c.png"]["targets"][0]
    codes = [caveat["code"] for caveat in entry["caveats"]]
    assert "no-detection" in codes
    text = next(c["text"] for c in entry["caveats"] if c["code"] == "no-detection")
    assert text.startswith("no detection matches box:16,8,24,16:red: the best proposal has "
                           f"IoU 1.00 and class score {sigmoid(-3):.2f}")


@pytest.mark.parametrize(("resize", "expected"), [
    ("stretch", [10, 8, 14, 16]),  # x halved, y kept
    ("crop", [4, 8, 12, 16]),  # the centre 32 columns of 64: 16 cut on the left
    ("pad", [10, 12, 14, 16]),  # halved, 8 rows of padding above
])
def test_a_box_maps_through_the_resizing_at_any_image_size(here, tmp_path, resize, expected):
    explain("wide1", "-o", tmp_path / "small", "--resize", resize, "--target", "box:20,8,28,16")
    explain("wide2", "-o", tmp_path / "large", "--resize", resize, "--target",
            "box:40,16,56,32")
    small = records(tmp_path / "small")["wide1/w.png"]["targets"][0]["target"]
    large = records(tmp_path / "large")["wide2/w.png"]["targets"][0]["target"]
    assert small["box_input"] == large["box_input"] == expected
    # the proposal each matched, on the model's input and back on each file's pixels
    assert small["matched"]["box_input"] == large["matched"]["box_input"]
    assert [2 * value for value in small["matched"]["box"]] == large["matched"]["box"]


def test_a_box_outside_an_image_fails_that_input_alone(here, tmp_path):
    out = tmp_path / "out"
    result = explain("photos/a.png", "photos/b.png", "-o", out, "--target",
                     "box:40,40,60,60", code=1)
    found = records(out)
    assert found["photos/b.png"]["status"] == "ok"
    assert found["photos/a.png"]["status"] == "error"
    assert found["photos/a.png"]["error"] == "box:40,40,60,60 lies outside the 32x32 image"
    assert "failed: photos/a.png: box:40,40,60,60 lies outside the 32x32 image" in result.stderr


def test_a_box_cropped_away_fails_with_its_reason(here, tmp_path):
    out = tmp_path / "out"
    explain("wide1", "-o", out, "--resize", "crop", "--target", "box:0,0,10,10", code=1)
    error = records(out)["wide1/w.png"]["error"]
    assert error == ("box:0,0,10,10 lies outside the part of the 64x32 image the model sees "
                     "(crop to 32x32 keeps its centre)")


# -- the pictures --------------------------------------------------------------------------


def test_the_boxes_are_drawn_on_a_render(here, tmp_path):
    """At the model's size, 1-pixel lines: the target box 15,7,25,17 in white, the proposal
    it matches (16,8,24,16, IoU 0.64) in magenta dashes, black just outside each."""
    out = tmp_path / "out"
    explain("photos/a.png", "-o", out, "--target", "box:15,7,25,17", "--render", "color",
            "--output-size", "model")
    entry = records(out)["photos/a.png"]["targets"][0]
    assert entry["target"]["matched"]["iou"] == pytest.approx(64 / 100)
    drawn = pixels(out / entry["outputs"]["color"])
    assert drawn.shape == (32, 32, 3)
    white, magenta = np.all(drawn == TARGET_BOX, -1), np.all(drawn == MATCHED_BOX, -1)
    ring = np.zeros((32, 32), bool)
    ring[7, 15:25] = ring[16, 15:25] = ring[7:17, 15] = ring[7:17, 24] = True
    assert white[ring].all() and white.sum() == ring.sum()
    inner = np.zeros((32, 32), bool)
    inner[8, 16:24] = inner[15, 16:24] = inner[8:16, 16] = inner[8:16, 23] = True
    assert magenta[inner].sum() >= 12 and magenta.sum() == magenta[inner].sum()
    assert (drawn[6, 15:25] == 0).all() and (drawn[17, 15:25] == 0).all()  # halo outside


def test_a_panel_draws_the_box_on_the_picture_and_every_map(here, tmp_path):
    out = tmp_path / "out"
    explain("photos/b.png", "-o", out, "--target", "box:32,16,48,32:red", "--method",
            "guided,gradcam", "--render", "panel")
    entry = records(out)["photos/b.png"]["targets"][0]
    panel = pixels(out / entry["outputs"]["panel"])
    magenta = np.all(panel == MATCHED_BOX, -1)
    columns = np.nonzero(magenta.any(axis=0))[0]
    # three tiles (the picture, guided, gradcam), each 224 px for 64 px of picture
    runs = np.split(columns, np.nonzero(np.diff(columns) > 1)[0] + 1)
    assert len(runs) == 3
    factor = 224 / 64
    first = runs[0]
    assert (first[0], first[-1]) == (PANEL_MARGIN + 32 * factor,
                                     PANEL_MARGIN + 48 * factor - 1)
    rows = np.nonzero(magenta[:, first[0]:first[-1] + 1].any(axis=1))[0]
    assert rows[-1] - rows[0] + 1 == 16 * factor
    white = np.all(panel == TARGET_BOX, -1)
    assert white[rows[0], first[0]:first[-1] + 1].sum() > 0  # the target under the dashes


# -- --detections top:K ---------------------------------------------------------------------


def test_the_best_detections_of_each_image_are_explained(here, tmp_path):
    out = tmp_path / "out"
    result = run_cli("explain", "det.keras", "photos", "-o", out, "--labels", "labels.txt",
                     "--no-report", "--detections", "top:2", code=0)
    assert "1 input with fewer than 2 detections above 0.3 (1 with none)" in result.stderr
    found = records(out)
    for name, scale in (("a.png", 1), ("b.png", 2)):
        record = found[f"photos/{name}"]
        assert record["detections"] == {"top": 2, "found": 2, "threshold": 0.3}
        first, second = record["targets"]
        assert [first["target"]["spec"], second["target"]["spec"]] == ["det:1", "det:2"]
        assert first["target"]["box"] == [16 * scale, 8 * scale, 24 * scale, 16 * scale]
        assert second["target"]["box"] == [0, 0, 8 * scale, 8 * scale]
        assert first["target"]["box_input"] == [16, 8, 24, 16]
        # each cell's red score from its mean colour on the prepared (resized) input
        fitted = prepare(decode_image(f"photos/{name}"), (32, 32, 3), "none")[2] / 255
        for entry, (row, col) in ((first, (1, 2)), (second, (0, 0))):
            red, green = fitted[8 * row : 8 * row + 8, 8 * col : 8 * col + 8, :2].mean((0, 1))
            assert entry["score"] == pytest.approx(sigmoid(8 * max(red - green, 0) - 3),
                                                   abs=1e-5)
        if scale == 1:
            assert (first["score"], second["score"]) == pytest.approx((BRIGHT, DIM), abs=1e-5)
        assert first["outputs"] == {render: f"photos/{name}.det-1-red.guided.{render}.png"
                                    for render in ("color", "overlay")}
        assert second["outputs"]["color"] == f"photos/{name}.det-2-red.guided.color.png"
        assert first["description"] == f"det:1 red p={first['score']:.3f}, IoU 1.00"
        assert first["target"]["detections"] == "top:2"
    none = found["photos/c.png"]
    assert (none["status"], none["targets"], none["detections"]) == (
        "ok", [], {"top": 2, "found": 0, "threshold": 0.3})
    assert sorted(path.name for path in (out / "photos").iterdir()
                  if path.name.startswith("c.png")) == []


def test_the_threshold_decides_what_is_a_detection(here, tmp_path):
    out = tmp_path / "out"
    result = run_cli("explain", "det.keras", "photos/a.png", "-o", out, "--labels",
                     "labels.txt", "--no-report", "--detections", "top:3",
                     "--detection-threshold", "0.9", code=0)
    record = records(out)["photos/a.png"]
    assert BRIGHT > 0.9 > DIM
    assert record["detections"] == {"top": 3, "found": 1, "threshold": 0.9}
    assert [t["target"]["box"] for t in record["targets"]] == [[16, 8, 24, 16]]
    assert "1 input with fewer than 3 detections above 0.9" in result.stderr


# -- resuming ------------------------------------------------------------------------------


def test_resuming_recomputes_a_changed_box_or_label(here, tmp_path):
    out = tmp_path / "out"
    explain("photos/a.png", "-o", out, "--target", "box:16,8,24,16")
    again = explain("photos/a.png", "-o", out, "--target", "box:16,8,24,16", "--skip-existing")
    assert records(out)["photos/a.png"]["targets"][0]["target"]["box"] == [16, 8, 24, 16]
    del again
    result = run_cli("explain", "det.keras", "photos/a.png", "-o", out, "--labels",
                     "labels.txt", "--no-report", "--target", "box:15,8,24,16",
                     "--skip-existing", code=0)
    assert "1 recomputed (for other classes or targets)" in result.stderr
    assert records(out)["photos/a.png"]["targets"][0]["target"]["box"] == [15, 8, 24, 16]
    result = run_cli("explain", "det.keras", "photos/a.png", "-o", out, "--labels",
                     "labels.txt", "--no-report", "--target", "box:15,8,24,16:green",
                     "--skip-existing", code=0)
    assert "1 recomputed (for other classes or targets)" in result.stderr
    assert records(out)["photos/a.png"]["targets"][0]["label"] == "green"
    result = run_cli("explain", "det.keras", "photos/a.png", "-o", out, "--labels",
                     "labels.txt", "--no-report", "--target", "box:15,8,24,16:green",
                     "--skip-existing", code=0)
    assert "0 explained, 1 skipped (outputs exist)" in result.stderr


def test_resuming_detections_keys_on_k_and_the_threshold(here, tmp_path):
    out = tmp_path / "out"
    base = ("explain", "det.keras", "photos", "-o", out, "--labels", "labels.txt",
            "--no-report", "--skip-existing")
    run_cli(*base, "--detections", "top:2", code=0)
    again = run_cli(*base, "--detections", "top:2", code=0)
    assert "0 explained, 3 skipped (outputs exist)" in again.stderr
    more = run_cli(*base, "--detections", "top:1", code=0)
    assert "3 recomputed (for other classes or targets)" in more.stderr
    assert [len(records(out)[f"photos/{n}.png"]["targets"]) for n in "abc"] == [1, 1, 0]
    higher = run_cli(*base, "--detections", "top:1", "--detection-threshold", "0.5", code=0)
    assert "3 recomputed (for other classes or targets)" in higher.stderr


# -- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "fragment"), [
    (["--target", "box:1,2,3"], "a box is four numbers X0,Y0,X1,Y1 (its corners, in the "
                                "image's pixels), got 3 numbers"),
    (["--target", "box:1,2,x,4"], "'x' is not a number"),
    (["--target", "box:5,2,3,4"], "is inverted: X1 (3) must be greater than X0 (5)"),
    (["--target", "box:1,6,3,4"], "is inverted: Y1 (4) must be greater than Y0 (6)"),
    (["--target", "box:1,2,1,4"], "is empty: X1 equals X0, so the box has no area"),
    (["--target", "box:nan,2,3,4"], "'nan' is not a finite number"),
    (["--target", "box:1,2,3,inf"], "'inf' is not a finite number"),
    (["--target", "box:0,0,1e300,1e300"], "'1e300' is out of range: a corner lies within "
                                          "1,000,000 pixels of the image's top left corner"),
    (["--detections", "top:²"], "'top:²' must be top:K"),
    (["--detections", "top:0"], "'top:0' must be top:K, K a whole number from 1 to 100"),
    (["--detections", "top:x"], "'top:x' must be top:K"),
    (["--detection-threshold", "1.5"], "1.5 is not in the range 0<=x<=1"),
])
def test_a_bad_box_or_detections_is_a_usage_error(ws, tmp_path, args, fragment):
    result = run_cli("explain", ws / "det.keras", ws / "photos", "-o", tmp_path / "out", *args)
    assert result.exit_code == 2 and "Traceback" not in result.output
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("Error: Invalid value for '--") and fragment in line, line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args", [["--target", "box:1,2,3,4"], ["--detections", "top:2"]])
def test_a_model_that_is_no_detector_is_refused_before_any_input(ws, tmp_path, args):
    result = run_cli("explain", ws / "clf.keras", ws / "photos", "-o", tmp_path / "out", *args)
    given = "--target box:1,2,3,4" if args[0] == "--target" else "--detections top:2"
    assert_one_line_error(result, f"Error: {given} needs a detector, a model with a boxes "
                          "output (batch, proposals, 4) and a class scores output (batch, "
                          "proposals, classes); the model's outputs are")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("args", "fragment"), [
    (["--target", "box:1,2,3,4:blue"], "--target box:1,2,3,4:blue: unknown class 'blue'"),
    (["--target", "box:1,2,3,4:5"], "--target box:1,2,3,4:5:"),
    (["--target", "box:1,2,3,4", "--target", "unit:0"],
     "--target box:1,2,3,4 explains a detector's detection: it cannot go with --target unit:0"),
    (["--detections", "top:2", "--target", "box:1,2,3,4"],
     "--detections top:2 explains the detections the model finds: it cannot go with "
     "--target box:1,2,3,4"),
    (["--target", "box:1,2,3,4", "--target", "box:1,2,3,4.0"], "is listed twice"),
])
def test_detection_targets_that_cannot_mean_anything_are_one_line(ws, tmp_path, args,
                                                                   fragment):
    result = run_cli("explain", ws / "det.keras", ws / "photos", "-o", tmp_path / "out",
                     "--labels", ws / "labels.txt", *args)
    assert_one_line_error(result, fragment)
    assert not (tmp_path / "out").exists()


def test_check_refuses_a_box_target_in_one_line(ws):
    result = run_cli("check", ws / "det.keras", "--target", "box:1,2,3,4", "--checks", "loads")
    assert_one_line_error(result, "--target box:1,2,3,4 explains a detector's detections: "
                                  "only explain runs take it")


# -- inspect -------------------------------------------------------------------------------


def test_inspect_says_a_detector_is_one(ws):
    text = run_cli("inspect", ws / "det.keras", code=0).stdout
    line = next(line for line in text.splitlines() if line.startswith("detector"))
    assert line == ("detector    boxes 'boxes', class scores 'scores': 16 proposals of 2 "
                    "classes; explain one with --target box:X0,Y0,X1,Y1[:C] (its corners in "
                    "the image's pixels) or --detections top:K")
    info = json.loads(run_cli("inspect", ws / "det.keras", "--json", code=0).stdout)
    assert info["detector"] == {"kind": "boxes", "boxes": "boxes", "scores": "scores",
                                "proposals": 16, "classes": 2, "degenerate": None}
    other = json.loads(run_cli("inspect", ws / "clf.keras", "--json", code=0).stdout)
    assert other["detector"] is None


# -- the bundled detector ------------------------------------------------------------------


def test_the_demo_detector_finds_what_its_own_decoder_keeps(tmp_path):
    """demo-det on generated scenes: each image's top detections are those the demo's own
    decoder (guidedbp.demo.detection.detections, written apart from the engine's) keeps
    from the model's raw output; each scene's object is among them (IoU >= 0.5 with its
    true box, its class right); a scene drawn twice the size gives boxes twice as large."""
    from guidedbp.demo.detection import detections, pairwise_iou, scene_boxes
    from guidedbp.demo.shapes import make_scenes

    scenes = make_scenes(4, seed=7, distractors=True)
    truth, truth_labels = scene_boxes(scenes)
    (tmp_path / "scenes").mkdir()
    for index, picture in enumerate(scenes.images):
        Image.fromarray(picture).save(tmp_path / "scenes" / f"s{index}.png")
    (tmp_path / "large").mkdir()
    Image.fromarray(np.kron(scenes.images[0], np.ones((2, 2, 1), np.uint8))).save(
        tmp_path / "large" / "s0.png")
    out = tmp_path / "out"
    run_cli("explain", "demo-det", tmp_path / "scenes", tmp_path / "large", "-o", out, "-q",
            "--no-report", "--detections", "top:2", code=0)
    found = {Path(record["input"]).parent.name + "/" + Path(record["input"]).name: record
             for record in read_manifest(out / "manifest.jsonl")}
    loaded = guidedbp.load_model("demo-det")
    raw = loaded.model(scenes.images.astype(np.float32), training=False)
    expected = detections(np.asarray(raw["boxes"]), np.asarray(raw["scores"]), top=2)
    for index, kept in enumerate(expected):
        targets = found[f"scenes/s{index}.png"]["targets"]
        assert [t["class"] for t in targets] == [d.label for d in kept]
        assert [t["score"] for t in targets] == pytest.approx([d.score for d in kept],
                                                              abs=1e-5)
        for target, detection in zip(targets, kept):
            assert target["target"]["box"] == pytest.approx(detection.box, abs=1e-3)
            assert target["label"] == loaded.labels[detection.label]
        assert any(t["class"] == truth_labels[index, 0] and pairwise_iou(
            np.array(t["target"]["box"])[None], truth[index, :1])[0, 0] >= 0.5
            for t in targets)
    # the large image reduced to the model's 96x96 as a run reduces it, its boxes doubled
    reduced = prepare(decode_image(tmp_path / "large" / "s0.png"), loaded.input_shape,
                      loaded.preprocess)[2]
    raw = loaded.model(reduced[None], training=False)
    kept = detections(np.asarray(raw["boxes"]), np.asarray(raw["scores"]), top=2)[0]
    large = found["large/s0.png"]["targets"]
    assert [t["class"] for t in large] == [d.label for d in kept] == \
        [d.label for d in expected[0]]
    np.testing.assert_allclose([t["target"]["box"] for t in large],
                               [[2 * v for v in d.box] for d in kept], atol=2e-3)


def test_suppression_keeps_what_the_demo_decoder_keeps():
    """The engine's per-class greedy suppression against the demo's, written apart, on
    random overlapping proposals of three classes."""
    from guidedbp.demo.detection import detections
    from guidedbp.engine.targets.detect import suppress

    rng = np.random.default_rng(4)
    for _ in range(20):
        corners = rng.uniform(0, 40, (60, 2))
        boxes = np.concatenate([corners, corners + rng.uniform(4, 20, (60, 2))], axis=1)
        scores = rng.uniform(0, 1, (60, 3))
        rows, labels = suppress(boxes, scores, 0.3, 7)
        expected = detections(boxes[None], scores[None], 0.3, 0.5, top=7)[0]
        assert [(int(label), float(scores[row, label]), tuple(boxes[row]))
                for row, label in zip(rows, labels)] == \
            [(d.label, d.score, d.box) for d in expected]


def test_the_examples_of_the_detection_modules_hold():
    import doctest

    from guidedbp.cli import inspect
    from guidedbp.engine.targets import detect
    from guidedbp.pipeline import beside, detections, options
    from guidedbp.render import marks

    for module in (detections, detect, beside, options, marks, inspect):
        assert doctest.testmod(module).failed == 0, module.__name__


def test_a_detections_class_activation_map_names_the_layer_it_used(tmp_path):
    """demo-det's class head and box head share conv5, the last feature map a detection's
    whole gradient passes through: the layer Grad-CAM uses for a detection, which the
    manifest, explain_image and inspect name (a class target's default layer, behind the
    first output, is another)."""
    scene_file = Path(__file__).resolve().parents[1] / "sample_images/scenes/scene_0.png"
    out = tmp_path / "out"
    run_cli("explain", "demo-det", scene_file, "-o", out, "-q", "--no-report",
            "--method", "gradcam", "--detections", "top:1", "--raw", code=0)
    (record,) = read_manifest(out / "manifest.jsonl")
    assert record["layers"] == {"gradcam": "conv5"}
    box = record["targets"][0]["target"]["box"]
    one = guidedbp.explain_image("demo-det", scene_file, Detection(box, label="ring"),
                                 methods=("gradcam",))
    assert one.layers == {"gradcam": "conv5"}
    # the map is the one computed at conv5 named outright
    named = guidedbp.explain_image("demo-det", scene_file, Detection(box, label="ring"),
                                   methods=("gradcam",), layer="conv5")
    np.testing.assert_array_equal(one.maps["gradcam"], named.maps["gradcam"])
    assert np.any(one.maps["gradcam"] != 0)
    assert "\ncam layer   conv5\n" in run_cli("inspect", "demo-det", code=0).output
