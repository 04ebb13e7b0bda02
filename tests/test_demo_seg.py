"""The bundled shapes segmentation model (``demo-seg``, ``data/shapes_seg.keras``), the
receptive-field helper, the region metrics and ``guidedbp evaluate demo-seg``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import guidedbp.demo
from guidedbp.demo import CLASS_NAMES, make_scenes
from guidedbp.demo.metrics import dilate, energy_inside_dilated
from guidedbp.demo.segmentation import (
    SEG_CLASS_NAMES,
    confusion,
    downsample_mask,
    iou_per_class,
    label_maps,
    pixel_accuracy,
)
from tests.helpers import run_cli

DATA = Path(guidedbp.demo.__file__).with_name("data")
MODEL_PATH = DATA / "shapes_seg.keras"
LABELS_PATH = DATA / "shapes_seg_labels.txt"
HELDOUT_SEED = 12345  # neither a training seed (0, 900001) nor train_seg.py's report seed (1)


@pytest.fixture(scope="module")
def loaded():
    pytest.importorskip("keras")
    from guidedbp.models.loading import load_model

    return load_model("demo-seg")


# -- the model ---------------------------------------------------------------------------


def test_the_spec_loads_the_bundled_segmentation_model(loaded):
    assert (loaded.source, loaded.format) == ("demo-seg", "demo")
    assert loaded.model.name == "shapes_seg_cnn"
    assert loaded.labels == ["background", *CLASS_NAMES] == list(SEG_CLASS_NAMES)
    assert loaded.input_shape == (96, 96, 3) and loaded.preprocess == "none"
    assert loaded.model.output_shape == (None, 24, 24, 7)
    head = loaded.model.layers[-1]
    assert (head.name, head.get_config()["activation"]) == ("probabilities", "softmax")


def test_model_file_is_small_and_labelled():
    from guidedbp.models.loading import DEMO_SEG_SPEC, DEMO_SPECS, check_model_path

    assert MODEL_PATH.stat().st_size <= 1024 * 1024
    assert LABELS_PATH.read_text(encoding="utf-8").splitlines() == list(SEG_CLASS_NAMES)
    assert DEMO_SPECS[DEMO_SEG_SPEC] == "shapes_seg" and DEMO_SEG_SPEC == "demo-seg"
    check_model_path("demo-seg")  # a spec, no file of that name needed


def test_the_layers_are_relu_convs_pools_and_an_upsampling(loaded):
    kinds = {type(layer).__name__ for layer in loaded.model.layers}
    assert kinds == {"InputLayer", "Rescaling", "Conv2D", "MaxPooling2D", "UpSampling2D"}
    activations = [layer.get_config()["activation"] for layer in loaded.model.layers
                   if type(layer).__name__ == "Conv2D"]
    assert activations == ["relu"] * 6 + ["softmax"]


def test_model_segments_heldout_shapes(loaded):
    from guidedbp.demo.train_seg import segmentation_scores

    scores = segmentation_scores(loaded.model, make_scenes(100, HELDOUT_SEED))
    # Measured when it was trained: pixel accuracy 0.977, mean IoU 0.811, the worst class
    # (star) 0.683 here; 0.979, 0.814 and 0.669 on 1,000 shapes of seed 1 (SOURCES.md).
    assert scores["pixel_accuracy"] >= 0.96
    assert scores["mean_iou"] >= 0.75
    assert min(scores[f"iou_{name}"] for name in SEG_CLASS_NAMES) >= 0.6


def test_build_model_matches_the_bundled_file(loaded):
    from guidedbp.demo.train_seg import build_model

    model = build_model()
    assert [layer.get_config() for layer in model.layers][1:] == \
        [layer.get_config() for layer in loaded.model.layers][1:]


# -- labels and scores -------------------------------------------------------------------


def test_label_maps_mark_cells_at_least_half_covered():
    mask = np.zeros((1, 8, 8), bool)
    mask[0, :2, :6] = True  # cell (0, 0): 8 of 16 pixels, cell (0, 1): 4
    mask[0, 4:7, 4:7] = True  # cell (1, 1): 9 of 16 pixels
    assert downsample_mask(mask, 4)[0].tolist() == [[True, False], [False, True]]
    scenes = make_scenes(3, seed=HELDOUT_SEED, distractors=True)
    truth = label_maps(scenes, 4)
    assert truth.shape == (3, 24, 24)
    for i in range(3):
        assert set(np.unique(truth[i]).tolist()) == {0, scenes.labels[i] + 1,
                                                     scenes.distractor_labels[i] + 1}
        cells = downsample_mask(scenes.masks[i][None], 4)[0]
        assert np.all(truth[i][cells] == scenes.labels[i] + 1)
    with pytest.raises(ValueError, match="stride=5"):
        downsample_mask(scenes.masks, 5)


def test_confusion_iou_and_accuracy():
    truth = np.array([[0, 0, 1, 1]])
    predicted = np.array([[0, 1, 1, 1]])
    matrix = confusion(predicted, truth, 3)
    assert matrix.tolist() == [[1, 1, 0], [0, 2, 0], [0, 0, 0]]
    ious = iou_per_class(matrix)
    assert ious[:2].tolist() == [0.5, 2 / 3] and np.isnan(ious[2])
    assert pixel_accuracy(matrix) == 0.75


def test_dilate_is_a_square_of_the_half_width_clipped_to_the_image():
    mask = np.zeros((1, 9, 9), bool)
    mask[0, 4, 4] = True
    grown = dilate(mask, 2)
    rows, cols = np.nonzero(grown[0])
    assert (rows.min(), rows.max(), cols.min(), cols.max(), grown.sum()) == (2, 6, 2, 6, 25)
    corner = np.zeros((1, 9, 9), bool)
    corner[0, 0, 8] = True
    assert dilate(corner, 3).sum() == 16 and np.array_equal(dilate(mask, 0), mask)
    with pytest.raises(ValueError, match="half_width=-1"):
        dilate(mask, -1)


def test_energy_inside_dilated():
    magnitude = np.zeros((2, 9, 9))
    magnitude[:, 4, 4] = 1.0
    magnitude[:, 4, 8] = 3.0  # 4 px right of the mask pixel
    mask = np.zeros((2, 9, 9), bool)
    mask[:, 4, 4] = True
    assert energy_inside_dilated(magnitude, mask, 3).tolist() == [0.25, 0.25]
    assert energy_inside_dilated(magnitude, mask, 4).tolist() == [1.0, 1.0]


# -- receptive fields --------------------------------------------------------------------


def _chain(*layers, size: int = 40):
    import keras

    inputs = keras.Input((size, size, 2))
    x = inputs
    for layer in layers:
        x = layer(x)
    return keras.Model(inputs, x)


def test_receptive_field_of_hand_computed_chains():
    keras = pytest.importorskip("keras")
    from keras import layers

    from guidedbp.demo.receptive import receptive_field

    def conv(k=3, **options):
        return layers.Conv2D(1, k, **options)

    cases = [
        # three 3x3 convs: 1 + 2 + 2 + 2
        ((conv(), conv(), conv()), 7),
        # conv3 (3), pool2 (+1, jump 2), conv3 (+2*2)
        ((conv(), layers.MaxPooling2D(), conv()), 8),
        # 5x5 (5), 3x3 dilated 2 (+4), 3x3 stride 2 (+2, jump 2), 3x3 (+2*2)
        ((conv(5), conv(dilation_rate=2), conv(strides=2), conv()), 15),
        # padding moves the window, never widens it
        ((conv(padding="same"), layers.AveragePooling2D(3, 2, padding="same"), conv()), 3 + 2 + 4),
        # pool (2, jump 2), upsample (jump 1): nearest neighbour adds nothing; conv3 then
        # reads 3 upsampled pixels = 2 pooled cells = 4 pixels, +2 from the first conv
        ((conv(padding="same"), layers.MaxPooling2D(), layers.UpSampling2D(),
          conv(padding="same")), 6),
        # a 1x1 conv and per-pixel layers add nothing
        ((layers.Rescaling(0.5), conv(), layers.ReLU(), conv(1), layers.Softmax()), 3),
    ]
    for chain, expected in cases:
        assert receptive_field(_chain(*chain)) == expected, [type(x).__name__ for x in chain]
    # Branches: the wider one counts.
    inputs = keras.Input((20, 20, 1))
    wide = layers.Conv2D(1, 7, padding="same")(inputs)
    narrow = layers.Conv2D(1, 3, padding="same")(inputs)
    branched = keras.Model(inputs, layers.Add()([wide, layers.Conv2D(1, 3, padding="same")(
        narrow)]))
    assert receptive_field(branched) == 7
    # Non-square kernels: the larger side.
    assert receptive_field(_chain(layers.Conv2D(1, (3, 9)))) == 9


def test_receptive_field_refuses_global_layers():
    pytest.importorskip("keras")
    from keras import layers

    from guidedbp.demo.receptive import receptive_field

    with pytest.raises(ValueError, match="GlobalAveragePooling2D"):
        receptive_field(_chain(layers.Conv2D(1, 3), layers.GlobalAveragePooling2D()))
    with pytest.raises(ValueError, match="Flatten"):
        receptive_field(_chain(layers.Conv2D(1, 3), layers.Flatten()))


def test_receptive_field_of_the_segmentation_model(loaded):
    from guidedbp.demo.receptive import input_window, reach, receptive_field

    model = loaded.model
    # conv1 3, pool +1 (jump 2), conv2 +4, pool +2 (jump 4), conv3 +8, pool +4 (jump 8),
    # conv4 +16, conv5 +16, upsample (jump 4), conv6 +8, 1x1 head: 62.
    assert receptive_field(model) == 62
    # The windows of output cells 0 and 1 (rows; columns alike): a 4x4 cell is not the
    # window's centre, so a mask grown by 34 px, not 30, holds every cell's window.
    assert [input_window(model, q, axis) for q in (0, 1) for axis in (0, 1)] == \
        [(-31, 30), (-31, 30), (-23, 38), (-23, 38)]
    assert reach(model) == 34


def test_receptive_field_is_what_one_output_pixel_depends_on():
    """Empirically, on the segmentation network with positive weights (every ReLU on, and
    a pixel made bright wins every max pool it reaches): the input columns and rows whose
    change moves output pixel (q, q) are exactly the computed window, clipped."""
    keras = pytest.importorskip("keras")
    from guidedbp.demo.receptive import input_window
    from guidedbp.demo.train_seg import build_model

    model = build_model()
    model.set_weights([np.abs(w) + 0.01 for w in model.get_weights()])
    features = keras.Model(model.input, model.get_layer("conv6").output)  # before softmax
    q = 13
    base = np.full((1, 96, 96, 3), 128.0, np.float32)
    for axis in (0, 1):
        probes = np.repeat(base, 96, axis=0)
        for line in range(96):
            if axis == 0:
                probes[line, line, :, :] = 255.0
            else:
                probes[line, :, line, :] = 255.0
        moved = np.asarray(features(probes))[:, q, q, 0] != np.asarray(features(base))[0, q, q, 0]
        lo, hi = input_window(model, q, axis)
        assert np.nonzero(moved)[0].tolist() == list(range(max(lo, 0), min(hi, 95) + 1))


# -- regions -----------------------------------------------------------------------------


def test_a_region_map_is_zero_beyond_the_receptive_field_of_its_mask(loaded):
    from guidedbp import Explainer
    from guidedbp.demo.receptive import reach
    from guidedbp.targets import Region

    scenes = make_scenes(4, seed=HELDOUT_SEED)
    images = scenes.images.astype(np.float32)
    explainer = Explainer(loaded, ("vanilla", "guided", "gradcam"))
    half_width = reach(loaded.model)
    for index in range(4):
        region = Region(int(scenes.labels[index]) + 1, mask=scenes.masks[index])
        explanation = explainer.explain(images[index : index + 1], region)
        grown = dilate(scenes.masks[index : index + 1], half_width)
        for method in ("vanilla", "guided"):
            magnitude = np.abs(explanation.by_method[method]).max(axis=-1)
            assert not np.any(magnitude[~grown]), (index, method)
            # Not vacuous: the map reaches well beyond the mask itself.
            assert np.any(magnitude[~dilate(scenes.masks[index : index + 1], 8)]), index
        assert explanation.region_pixels[0] > 0


# -- evaluate ----------------------------------------------------------------------------


def test_evaluate_demo_seg_prints_the_region_columns():
    result = run_cli("evaluate", "demo-seg", "--shapes", "4", "--seed", HELDOUT_SEED,
                     "--method", "vanilla,gradcam", code=0)
    out = result.output
    assert "explains its shape's region" in out
    assert "share of map energy inside the mask" in out
    assert "share of map energy within 34 px of the mask (the region's receptive field, " \
           "62 px)" in out
    assert "the model's own segmentation (2304 output pixels)" in out
    within = out.split("within 34 px")[1].split("\n")
    overall = next(line for line in within if line.startswith("overall"))
    assert overall.split()[1:3] == ["4", "1.000"]  # vanilla: all its energy in reach


def test_evaluate_demo_seg_json():
    result = run_cli("evaluate", "demo-seg", "--shapes", "3", "--seed", HELDOUT_SEED,
                     "--method", "guided", "--distractors", "--json", code=0)
    record = json.loads(result.stdout)
    assert (record["target"], record["receptive_field"], record["reach"]) == ("region", 62, 34)
    assert list(record["segmentation"]["iou"]) == list(SEG_CLASS_NAMES)
    assert record["segmentation"]["pixels"] == 3 * 24 * 24
    overall = [row for row in record["results"] if row["class"] == "overall"]
    assert [(row["method"], row["n"]) for row in overall] == [("guided", 3)]
    assert {"pointing_game", "energy_inside", "energy_within_reach",
            "pointing_game_other"} <= set(overall[0])
    assert overall[0]["energy_within_reach"] >= overall[0]["energy_inside"]


@pytest.mark.parametrize("arguments, message", [
    (("--shapes", "2", "--metric", "deletion"), "a segmentation model takes pointing,energy"),
    (("--shapes", "2", "--costs"), "--costs times class targets"),
])
def test_evaluate_demo_seg_refuses_what_needs_a_classifier(arguments, message):
    result = run_cli("evaluate", "demo-seg", *arguments, code=2)
    assert message in result.output


@pytest.mark.parametrize("module", ["guidedbp.demo.receptive", "guidedbp.demo.segmentation",
                                    "guidedbp.demo.metrics", "guidedbp.demo.train_seg"])
def test_the_docstring_examples_hold(module):
    import doctest
    import importlib

    pytest.importorskip("keras")
    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0
