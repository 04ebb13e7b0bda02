"""``guidedbp evaluate``: pointing game and energy inside the mask, on a model whose maps
are known."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from .helpers import run_cli
from .models import corner_cnn


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """The model of :func:`tests.models.corner_cnn` (class 0 is the top-left block) and
    labels; images "on" and "sub/off" (constant 100) with masks that do and do not
    cover the top-left block."""
    folder = tmp_path_factory.mktemp("evaluate")
    corner_cnn().save(folder / "m.keras")
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
    return run_cli("evaluate", setup / "m.keras", setup / "images", "--masks", setup / "masks",
                   "--labels", setup / "labels.txt", "--json", *args)


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
    result = run_cli("evaluate", setup / "m.keras", setup / "images", "--masks", setup / "masks",
                     "--method", "guided", "--tolerance", "2")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[2].startswith("pointing game (within 2 px)")
    assert lines[4].split() == ["0", "2", "0.500"]
    assert lines[5].split() == ["overall", "2", "0.500"]


def test_missing_mask_and_usage_errors(setup, tmp_path):
    (tmp_path / "extra.png").write_bytes((setup / "images" / "on.png").read_bytes())
    result = run_cli("evaluate", setup / "m.keras", tmp_path, "--masks", setup / "masks")
    assert result.exit_code == 2 and "no mask in" in result.output and "extra.png" in result.output
    result = run_cli("evaluate", setup / "m.keras")
    assert result.exit_code == 2 and "--shapes N" in result.output
    result = run_cli("evaluate", setup / "m.keras", tmp_path)
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
        for index, sample in enumerate(samples):
            np.testing.assert_array_equal(sample.picture, scenes.images[index])
            np.testing.assert_array_equal(sample.mask, mask[index])
            np.testing.assert_array_equal(sample.other_mask, other[index])
            assert sample.label == labels[index]
    assert all(sample.other_mask is None for sample in _synthetic(2, 11, False))
