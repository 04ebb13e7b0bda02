"""``guidedbp evaluate``: pointing game and energy inside the mask, on a model whose maps are known."""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from guidedbp.cli import main


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """8x8x1 -> Conv2D(1, 1x1, relu, w=1) -> Flatten -> Dense(2): class 0 sums the top-left
    2x2 block, class 1 is half the sum of the bottom-right 2x2 block.

    On a constant image of 100, logits are [400, 200]: class 0 is the top-1, and its
    guided (and vanilla) map is 1 on the top-left block, 0 elsewhere.
    """
    folder = tmp_path_factory.mktemp("evaluate")
    inputs = keras.Input((8, 8, 1))
    conv = keras.layers.Conv2D(1, 1, activation="relu")
    dense = keras.layers.Dense(2, use_bias=False)
    model = keras.Model(inputs, dense(keras.layers.Flatten()(conv(inputs))))
    conv.set_weights([np.ones((1, 1, 1, 1), np.float32), np.zeros(1, np.float32)])
    weights = np.zeros((8, 8, 2), np.float32)
    weights[:2, :2, 0] = 1.0
    weights[6:, 6:, 1] = 0.5
    dense.set_weights([weights.reshape(64, 2)])
    model.save(folder / "m.keras")
    (folder / "labels.txt").write_text("corner\nfar\n")
    images, masks = folder / "images", folder / "masks"
    (images / "sub").mkdir(parents=True)
    (masks / "sub").mkdir(parents=True)
    flat = np.full((8, 8), 100, np.uint8)
    Image.fromarray(flat, "L").save(images / "on.png")
    Image.fromarray(flat, "L").save(images / "sub" / "off.jpg", quality=100)
    on = np.zeros((8, 8), np.uint8)
    on[:3, :3] = 255  # covers the top-left block and one pixel more each way
    off = np.zeros((8, 8), np.uint8)
    off[6:, 6:] = 255  # the far corner: 6*sqrt(2) = 8.5 px from the maximum at (0, 0)
    Image.fromarray(on, "L").save(masks / "on.png")
    Image.fromarray(off, "L").save(masks / "sub" / "off.png")
    return folder


def evaluate(setup, *args):
    return CliRunner().invoke(main, ["evaluate", str(setup / "m.keras"), str(setup / "images"),
                                     "--masks", str(setup / "masks"), "--labels",
                                     str(setup / "labels.txt"), "--json", *args])


def test_pointing_game_and_energy(setup):
    result = evaluate(setup, "--method", "guided,vanilla", "--tolerance", "2")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["results"]
    # Both images are class 0 ("corner"): the map is the top-left block. "on" hits with all
    # its energy inside; "off" misses (8.5 px > 2) with none inside.
    expected = {"n": 2, "pointing_game": 0.5, "energy_inside": 0.5}
    for method in ("guided", "vanilla"):
        by_class = {r["class"]: r for r in rows if r["method"] == method}
        assert set(by_class) == {"corner", "overall"}
        for name in ("corner", "overall"):
            assert {k: by_class[name][k] for k in expected} == expected


def test_tolerance_is_a_distance_in_pixels(setup):
    # The far mask's nearest pixel (6, 6) is sqrt(72) = 8.49 px from the maximum (0, 0).
    for tolerance, rate in (("8.4", 0.5), ("8.5", 1.0)):
        rows = json.loads(evaluate(setup, "--method", "guided", "--tolerance", tolerance).output)
        assert rows["results"][-1]["pointing_game"] == rate


def test_table_output(setup):
    result = CliRunner().invoke(main, ["evaluate", str(setup / "m.keras"), str(setup / "images"),
                                       "--masks", str(setup / "masks"), "--method", "guided",
                                       "--tolerance", "2"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[2].startswith("pointing game (within 2 px)")
    assert lines[4].split() == ["0", "2", "0.500"]
    assert lines[5].split() == ["overall", "2", "0.500"]


def test_missing_mask_and_usage_errors(setup, tmp_path):
    (tmp_path / "extra.png").write_bytes((setup / "images" / "on.png").read_bytes())
    result = CliRunner().invoke(main, ["evaluate", str(setup / "m.keras"), str(tmp_path),
                                       "--masks", str(setup / "masks")])
    assert result.exit_code == 2 and "no mask in" in result.output and "extra.png" in result.output
    result = CliRunner().invoke(main, ["evaluate", str(setup / "m.keras")])
    assert result.exit_code == 2 and "--shapes N" in result.output
    result = CliRunner().invoke(main, ["evaluate", str(setup / "m.keras"), str(tmp_path)])
    assert result.exit_code == 2 and "need --masks" in result.output


def test_synthetic_samples_explain_the_asked_object():
    from guidedbp.cli.evaluate import _synthetic
    from guidedbp.demo import make_scenes

    scenes = make_scenes(3, 11, distractors=True)
    for explain_distractor, mask, other, labels in (
        (False, scenes.masks, scenes.distractor_masks, scenes.labels),
        (True, scenes.distractor_masks, scenes.masks, scenes.distractor_labels),
    ):
        samples = _synthetic(3, 11, True, explain_distractor)
        for index, (_, picture, sample_mask, label, sample_other) in enumerate(samples):
            np.testing.assert_array_equal(picture, scenes.images[index])
            np.testing.assert_array_equal(sample_mask, mask[index])
            np.testing.assert_array_equal(sample_other, other[index])
            assert label == labels[index]
    assert all(other is None for *_, other in _synthetic(2, 11, False))
