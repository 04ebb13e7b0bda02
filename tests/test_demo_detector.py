"""The bundled shapes detector (``demo-det``, ``data/shapes_det.keras``), its ``GridBoxes``
layer, the shapes' true boxes, the training targets and the detections helper."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

import guidedbp.demo
from guidedbp.demo import CLASS_NAMES, make_scenes
from guidedbp.demo.detection import (
    Detected,
    detection_recall,
    detections,
    mask_boxes,
    pairwise_iou,
    scene_boxes,
)

DATA = Path(guidedbp.demo.__file__).with_name("data")
MODEL_PATH = DATA / "shapes_det.keras"
LABELS_PATH = DATA / "shapes_det_labels.txt"
HELDOUT_SEED = 12345  # neither a training seed (0, 900001) nor train_det.py's report seed (1)


@pytest.fixture(scope="module")
def loaded():
    pytest.importorskip("keras")
    from guidedbp.models.loading import load_model

    return load_model("demo-det")  # unsafe_deserialization stays False


@pytest.fixture(scope="module")
def heldout():
    return make_scenes(100, seed=HELDOUT_SEED, distractors=True)


# -- the bundled model -------------------------------------------------------------------


def test_the_spec_loads_the_bundled_detector(loaded):
    from guidedbp.models.outputs import OutputInfo, model_outputs

    assert (loaded.source, loaded.format) == ("demo-det", "demo")
    assert loaded.model.name == "shapes_det_cnn"
    assert loaded.labels == list(CLASS_NAMES)
    assert loaded.input_shape == (96, 96, 3) and loaded.preprocess == "none"
    outputs = loaded.model(np.zeros((2, 96, 96, 3), np.float32), training=False)
    assert sorted(outputs) == ["boxes", "scores"]
    assert tuple(outputs["boxes"].shape) == (2, 144, 4)
    assert tuple(outputs["scores"].shape) == (2, 144, 6)
    assert {outputs[name].dtype.name for name in outputs} == {"float32"}
    # The sigmoid is the scores' last op, so guidedbp sees the head (inspect prints it).
    assert model_outputs(loaded.model, (96, 96, 3)) == [
        OutputInfo("boxes", (None, 144, 4), None), OutputInfo("scores", (None, 144, 6), "sigmoid")]


def test_inspect_shows_the_two_outputs_and_the_shape_names(loaded):
    from tests.helpers import run_cli

    result = run_cli("inspect", "demo-det", code=0)
    assert "demo-det (demo)" in result.output
    assert "boxes (batch, 144, 4)" in result.output
    assert "scores (batch, 144, 6), sigmoid head" in result.output
    assert all(name in result.output for name in CLASS_NAMES)


def test_model_file_is_small_labelled_and_free_of_lambdas():
    from guidedbp.models.loading import DEMO_DET_SPEC, DEMO_SPECS, check_model_path

    assert MODEL_PATH.stat().st_size <= 1024 * 1024
    assert LABELS_PATH.read_text(encoding="utf-8").splitlines() == list(CLASS_NAMES)
    assert DEMO_SPECS[DEMO_DET_SPEC] == "shapes_det" and DEMO_DET_SPEC == "demo-det"
    check_model_path("demo-det")  # a spec, no file of that name needed
    with zipfile.ZipFile(MODEL_PATH) as archive:
        config = json.loads(archive.read("config.json"))
    layers = config["config"]["layers"]
    assert "Lambda" not in {layer["class_name"] for layer in layers}
    grid = [layer for layer in layers if layer["class_name"] == "GridBoxes"]
    assert [(layer["registered_name"], layer["module"]) for layer in grid] == [
        ("guidedbp>GridBoxes", "guidedbp.models.layers")]


def test_a_fresh_interpreter_loads_the_detector_and_a_copy_of_it(loaded, tmp_path):
    # Nothing imported beforehand: the loader itself makes GridBoxes known, for the
    # bundled file and for a user's own .keras file with the layer, in safe mode.
    copy = tmp_path / "my_detector.keras"
    loaded.model.save(copy)
    code = (
        "import sys, numpy as np, guidedbp\n"
        "assert 'guidedbp.models.layers' not in sys.modules\n"
        "for spec in ('demo-det', sys.argv[1]):\n"
        "    model = guidedbp.load_model(spec).model\n"
        "    print(float(np.asarray(model(np.full((1, 96, 96, 3), 99.0, 'float32'))"
        "['boxes']).sum()))\n"
    )
    result = subprocess.run([sys.executable, "-c", code, str(copy)], capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    expected = float(np.asarray(loaded.model(np.full((1, 96, 96, 3), 99.0, np.float32))
                                ["boxes"]).sum())
    assert [float(line) for line in result.stdout.split()] == pytest.approx([expected] * 2)


def test_the_layers_are_relu_convs_pools_and_the_two_heads(loaded):
    kinds = {type(layer).__name__ for layer in loaded.model.layers}
    assert kinds == {"InputLayer", "Rescaling", "Conv2D", "MaxPooling2D", "GridBoxes",
                     "Reshape", "Activation"}
    activations = {layer.name: layer.get_config()["activation"]
                   for layer in loaded.model.layers if type(layer).__name__ == "Conv2D"}
    assert activations == {**{f"conv{i}": "relu" for i in range(1, 6)}, "box_conv": "relu",
                           "class_conv": "relu", "distances": "softplus",
                           "class_logits": "linear"}
    assert loaded.model.get_layer("scores").get_config()["activation"] == "sigmoid"
    assert loaded.model.count_params() <= 300_000


def test_build_model_matches_the_bundled_file(loaded):
    from guidedbp.demo.train_det import build_model

    model = build_model()
    assert [layer.get_config() for layer in model.layers][1:] == \
        [layer.get_config() for layer in loaded.model.layers][1:]


def test_bundled_boxes_are_ordered_and_inside_the_image(loaded, heldout):
    rng = np.random.default_rng(5)
    images = np.concatenate([
        rng.uniform(0, 255, (8, 96, 96, 3)),  # noise
        np.zeros((1, 96, 96, 3)), np.full((1, 96, 96, 3), 255.0),  # flat extremes
        rng.normal(127, 400, (2, 96, 96, 3)),  # far outside 0..255
        heldout.images[:4],
    ]).astype(np.float32)
    boxes = np.asarray(loaded.model(images, training=False)["boxes"])
    x0, y0, x1, y1 = np.moveaxis(boxes, -1, 0)
    assert (x0 < x1).all() and (y0 < y1).all()
    assert boxes.min() >= 0.0 and boxes.max() <= 96.0
    assert ((x1 - x0) >= 1.0).all() and ((y1 - y0) >= 1.0).all()  # min_distance: 0.5 px a side


def test_model_detects_heldout_shapes(loaded, heldout):
    from guidedbp.demo.train_det import detection_scores

    scores = detection_scores(loaded.model, heldout)
    # Measured when it was trained: see SOURCES.md (shapes_det.keras) for these 100 scenes
    # and 500 of seed 1.
    assert scores["objects"] == 200
    assert scores["recall"] >= 0.7
    assert scores["mean_iou"] >= 0.75
    assert scores["false_per_image"] <= 0.5


# -- GridBoxes ---------------------------------------------------------------------------


def test_grid_boxes_by_hand():
    from guidedbp.models.layers import GridBoxes

    distances = np.zeros((1, 2, 3, 4), np.float32)
    distances[0, 0, 1] = [1.0, 0.5, 0.25, 2.0]  # cell (row 0, col 1): centre (12, 4)
    distances[0, 1, 2] = [0.0, 0.0, 3.0, 3.0]  # cell (1, 2): centre (20, 12)
    boxes = np.asarray(GridBoxes(8)(distances))
    assert boxes.shape == (1, 6, 4)
    assert boxes[0, 1].tolist() == [4.0, 0.0, 14.0, 20.0]
    assert boxes[0, 5].tolist() == [20.0, 12.0, 44.0, 36.0]
    assert boxes[0, 0].tolist() == [4.0, 4.0, 4.0, 4.0]  # zero distances: a point
    padded = np.asarray(GridBoxes(8, min_distance=0.25, clip=True)(distances))
    assert padded[0, 0].tolist() == [2.0, 2.0, 6.0, 6.0]
    assert padded[0, 1].tolist() == [2.0, 0.0, 16.0, 16.0]  # cut to the 24x16 image
    assert padded[0, 5].tolist() == [18.0, 10.0, 24.0, 16.0]
    with pytest.raises(ValueError, match="stride=0"):
        GridBoxes(0)
    with pytest.raises(ValueError, match="min_distance=-1"):
        GridBoxes(4, min_distance=-1)


def test_grid_boxes_round_trip_through_a_keras_file(tmp_path):
    import keras

    from guidedbp.models.layers import GridBoxes

    inputs = keras.Input((4, 5, 2))
    distances = keras.layers.Conv2D(4, 1, activation="softplus")(inputs)
    boxes = GridBoxes(4, min_distance=0.125, clip=True, name="grid")(distances)
    model = keras.Model(inputs, boxes)
    path = tmp_path / "grid.keras"
    model.save(path)
    again = keras.models.load_model(path, safe_mode=True)
    layer = again.get_layer("grid")
    assert type(layer) is GridBoxes
    assert layer.get_config() == model.get_layer("grid").get_config()
    assert (layer.stride, layer.min_distance, layer.clip) == (4, 0.125, True)
    images = np.random.default_rng(0).normal(0, 3, (3, 4, 5, 2)).astype(np.float32)
    assert np.array_equal(np.asarray(again(images)), np.asarray(model(images)))
    assert again.output_shape == (None, 20, 4)


# -- the shapes' boxes and the training targets ------------------------------------------


def test_mask_boxes_are_the_tight_half_open_boxes():
    masks = np.zeros((3, 6, 10), bool)
    masks[0, 2:5, 3:8] = True
    masks[1, 0, 9] = True  # one pixel in the corner
    boxes = mask_boxes(masks)
    assert boxes.dtype == np.float32
    assert boxes.tolist() == [[3, 2, 8, 5], [9, 0, 10, 1], [0, 0, 0, 0]]
    with pytest.raises(ValueError, match="shape"):
        mask_boxes(masks[0])


def test_scene_boxes_hold_the_target_then_the_distractor():
    scenes = make_scenes(4, seed=HELDOUT_SEED, distractors=True)
    boxes, labels = scene_boxes(scenes)
    assert boxes.shape == (4, 2, 4) and labels.tolist() == \
        np.stack([scenes.labels, scenes.distractor_labels], 1).tolist()
    for i in range(4):
        for k, mask in enumerate((scenes.masks[i], scenes.distractor_masks[i])):
            rows, cols = np.nonzero(mask)
            assert boxes[i, k].tolist() == [cols.min(), rows.min(), cols.max() + 1,
                                            rows.max() + 1]
    single = scene_boxes(make_scenes(2, seed=HELDOUT_SEED))
    assert single[1][:, 1].tolist() == [-1, -1] and not single[0][:, 1].any()


def test_flipped_and_turned_boxes_are_those_of_the_flipped_and_turned_masks():
    from guidedbp.demo.train import dihedral
    from guidedbp.demo.train_det import dihedral_boxes

    scenes = make_scenes(24, seed=HELDOUT_SEED, distractors=True)
    boxes, _ = scene_boxes(scenes)
    choices = np.random.default_rng(3).integers(0, 8, 24)  # the draw dihedral makes
    assert set(choices.tolist()) == set(range(8))
    turned = [dihedral(masks[..., None], np.random.default_rng(3))[..., 0]
              for masks in (scenes.masks, scenes.distractor_masks)]
    expected = np.stack([mask_boxes(turned[0]), mask_boxes(turned[1])], axis=1)
    assert np.array_equal(dihedral_boxes(boxes, choices), expected)


def test_cell_targets_mark_the_cells_near_each_centre_the_smaller_object_first():
    from guidedbp.demo.train_det import cell_targets

    # A 32 px box centred at (32, 32): cells whose centres (4, 12, 20...) lie within 8 px
    # of it, columns and rows 3 and 4. A whole-image box holds a 16 px box (cells at
    # 28 and 36, within 4 px of 32): 6x6 cells for the big one, 4 of them the small one's.
    boxes = np.array([[[16, 16, 48, 48], [0, 0, 0, 0]],
                      [[0, 0, 96, 96], [24, 24, 40, 40]]], np.float32)
    labels = np.array([[2, -1], [0, 5]])
    classes, cell_boxes, positive = cell_targets(boxes, labels)
    assert classes.shape == (2, 144, 6) and cell_boxes.shape == (2, 144, 4)
    cells = positive.reshape(2, 12, 12)
    assert np.argwhere(cells[0]).tolist() == [[3, 3], [3, 4], [4, 3], [4, 4]]
    assert (classes[0][positive[0]] == np.eye(6)[2]).all() and not classes[0][~positive[0]].any()
    assert (cell_boxes[0][positive[0]] == [16, 16, 48, 48]).all()
    assert not cell_boxes[0][~positive[0]].any()
    assert np.argwhere(cells[1]).min(0).tolist() == [3, 3] and cells[1].sum() == 36
    small = np.zeros((12, 12), bool)
    small[3:5, 3:5] = True
    assert (classes[1].reshape(12, 12, 6)[small] == np.eye(6)[5]).all()
    assert (classes[1].reshape(12, 12, 6)[cells[1] & ~small] == np.eye(6)[0]).all()
    assert (cell_boxes[1].reshape(12, 12, 4)[small] == [24, 24, 40, 40]).all()


def test_one_training_run_on_8_images_saves_a_loadable_detector(tmp_path):
    pytest.importorskip("keras")
    # In a child process: training turns on TensorFlow's op determinism for good.
    output = tmp_path / "tiny_det.keras"
    code = ("import sys; from pathlib import Path; from guidedbp.demo.train_det import train; "
            "train(Path(sys.argv[1]), train_images=8, epochs=1, batch_size=8)")
    result = subprocess.run([sys.executable, "-c", code, str(output)], capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "epoch 1/1: class loss" in result.stdout
    assert output.with_name("tiny_det_labels.txt").read_text().splitlines() == list(CLASS_NAMES)
    from guidedbp.models.loading import load_model

    model = load_model(str(output)).model
    assert model.name == "shapes_det_cnn"
    assert sorted(model(np.zeros((1, 96, 96, 3), np.float32))) == ["boxes", "scores"]


# -- decoding: suppression and recall ----------------------------------------------------


def test_detections_suppress_overlaps_per_class():
    boxes = np.array([
        [[0, 0, 10, 10], [1, 0, 11, 10], [0, 0, 10, 20], [50, 50, 60, 60]],
        [[0, 0, 10, 10], [0, 0, 10, 11], [5, 5, 6, 6], [7, 7, 9, 9]],
    ], np.float32)
    scores = np.array([
        [[0.9, 0.2], [0.95, 0.8], [0.6, 0.1], [0.3, 0.85]],
        [[0.7, 0.0], [0.7, 0.0], [0.1, 0.0], [0.0, 0.29]],
    ])
    # Image 0, class 0: box 1 (0.95) first; box 0 overlaps it 90/110 > 0.5: dropped; box 2
    # overlaps it 90/210: kept; box 3 scores 0.3, the threshold: kept. Class 1: boxes 3
    # and 1, apart. Image 1: a tie at 0.7, the lower index kept, box 1 (IoU 100/110)
    # dropped; nothing else reaches 0.3.
    found = detections(boxes, scores)
    assert found == [
        [Detected((1.0, 0.0, 11.0, 10.0), 0, 0.95), Detected((50.0, 50.0, 60.0, 60.0), 1, 0.85),
         Detected((1.0, 0.0, 11.0, 10.0), 1, 0.8), Detected((0.0, 0.0, 10.0, 20.0), 0, 0.6),
         Detected((50.0, 50.0, 60.0, 60.0), 0, 0.3)],
        [Detected((0.0, 0.0, 10.0, 10.0), 0, 0.7)],
    ]
    assert [len(image) for image in detections(boxes, scores, threshold=0.5)] == [4, 1]
    assert detections(boxes, scores, top=2)[0] == found[0][:2]
    # At iou=1 nothing overlaps enough to go: box 0 of image 0 stays.
    loose = detections(boxes, scores, iou=1.0)
    assert Detected((0.0, 0.0, 10.0, 10.0), 0, 0.9) in loose[0] and len(loose[1]) == 2
    box, label, score = found[1][0]  # a named tuple unpacks
    assert (label, score) == (0, 0.7)


def test_detections_refuse_bad_arguments():
    boxes, scores = np.zeros((1, 3, 4)), np.zeros((1, 3, 2))
    with pytest.raises(ValueError, match=r"scores must have shape \(B, N, C\)"):
        detections(boxes, np.zeros((1, 4, 2)))
    with pytest.raises(ValueError, match=r"boxes must have shape \(B, N, 4\)"):
        detections(np.zeros((3, 4)), scores)
    with pytest.raises(ValueError, match="threshold=1.5"):
        detections(boxes, scores, threshold=1.5)
    with pytest.raises(ValueError, match="iou=0"):
        detections(boxes, scores, iou=0)
    with pytest.raises(ValueError, match="top=0"):
        detections(boxes, scores, top=0)


def test_pairwise_iou_and_detection_recall_by_hand():
    assert pairwise_iou(np.array([[0, 0, 10, 10], [0, 0, 0, 0]]),
                        np.array([[5, 0, 15, 10], [20, 20, 30, 30], [0, 0, 0, 0]])).tolist() \
        == [[50 / 150, 0.0, 0.0], [0.0, 0.0, 0.0]]
    truth_boxes = np.array([[[0, 0, 10, 10], [20, 20, 30, 30]],
                            [[0, 0, 10, 10], [0, 0, 0, 0]]], np.float32)
    truth_labels = np.array([[0, 1], [1, -1]])
    boxes = np.array([[[0, 0, 10, 10], [20, 20, 30, 35]],
                      [[0, 0, 10, 10], [0, 0, 10, 30]]], np.float32)
    # Image 1's exact box scores 0.4 for class 1, under the threshold: its best candidate
    # is the tall box, IoU 1/3.
    scores = np.array([[[0.9, 0.0], [0.0, 0.6]], [[0.9, 0.4], [0.0, 0.7]]])
    figures = detection_recall(boxes, scores, truth_boxes, truth_labels)
    assert figures == pytest.approx({"recall": 2 / 3, "mean_iou": (1 + 2 / 3) / 2,
                                     "mean_best_iou": (1 + 2 / 3 + 1 / 3) / 3, "objects": 3})
    lenient = detection_recall(boxes, scores, truth_boxes, truth_labels, threshold=0.3)
    assert lenient["recall"] == 1.0
    with pytest.raises(ValueError, match="truth_boxes"):
        detection_recall(boxes, scores, truth_boxes[:1], truth_labels[:1])


def test_the_detection_modules_import_no_tensorflow():
    code = ("import sys, guidedbp.demo.detection, guidedbp.demo.train_det; "
            "print('tensorflow' in sys.modules, 'keras' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.split() == ["False", "False"]


def test_the_docstring_examples_hold():
    import doctest

    pytest.importorskip("keras")
    import guidedbp.demo.detection
    import guidedbp.demo.train_det
    import guidedbp.models.layers

    for module in (guidedbp.demo.detection, guidedbp.demo.train_det, guidedbp.models.layers):
        assert doctest.testmod(module).failed == 0, module.__name__
