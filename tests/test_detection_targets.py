"""Detection targets (issue 35) against an independent reference, and their bad inputs.

A small plain Keras detector (:func:`tests.targets_reference.detector_graph`: three ReLU
convolutions, no pooling, one proposal per cell of a 4 x 4 grid, ``boxes`` and sigmoid
``scores`` outputs) is explained for D-RISE's similarity ``max_j IoU(box, box_j) *
p_j[label] ** score_weight``. Every gradient method's map equals ``tf.GradientTape``'s
gradient of that similarity written out by hand on the same architecture rebuilt with
ReLUs whose backward pass is the rule's (guided, deconvnet), as
``tests/test_targets_reference.py`` does for the other targets; Grad-CAM and HiResCAM
against the same gradient at the last feature map every proposal reads; integrated
gradients and SmoothGrad against the reference's own loops. A detection's map is zero
outside the receptive field of the proposal it matched.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import keras
import numpy as np
import pytest
import tensorflow as tf

from guidedbp import Explainer
from guidedbp.caveats import NO_DETECTION
from guidedbp.errors import ArgumentError
from guidedbp.models.labels import ClassNameError
from guidedbp.models.loading import load_model
from guidedbp.targets import Detection, Unit

from . import targets_reference as ref
from .models import tiny_cnn

RULES = {"vanilla": "vanilla", "guided": "guided", "deconvnet": "deconvnet"}
RTOL, ATOL = 1e-5, 1e-6
#: Each image's target: a proposal's box moved by a fraction of a pixel on each side (so
#: that no side lies on a proposal's), in two different cells.
CELLS = (5, 10)
OFFSET = np.array([0.3, -0.4, 0.9, 0.5], np.float32)


@dataclass
class Subject:
    """The detector, its reference, two images, the clean proposals, explainers."""

    model: keras.Model
    reference: ref.Reference
    images: np.ndarray
    boxes: np.ndarray  # (2, 16, 4) the proposals' corners on the clean images
    probabilities: np.ndarray  # (2, 16, 3)
    explainers: dict = field(default_factory=dict)

    def explain(self, target, method=tuple(RULES), **options):
        key = (method, repr(sorted(options.items())))
        if key not in self.explainers:
            self.explainers[key] = Explainer(self.model, method=method, **options)
        return self.explainers[key].explain(self.images, target)

    @property
    def corners(self) -> np.ndarray:
        """float32 ``(2, 4)``: each image's target box."""
        return np.stack([self.boxes[i, cell] + OFFSET for i, cell in enumerate(CELLS)])


@pytest.fixture(scope="module")
def subject() -> Subject:
    model = ref.model_of(ref.detector_graph(), "dict")
    reference = ref.Reference(ref.detector_graph, model)
    images = np.random.default_rng(0).uniform(0.0, 1.0, (2, 16, 16, 3)).astype(np.float32)
    outputs = reference.outputs(images)
    return Subject(model, reference, images, outputs.heads["boxes"].numpy(),
                   outputs.heads["scores"].numpy())


def assert_matches(explanation, subject: Subject, score: ref.ScoreFn, methods=RULES) -> None:
    """Each method's maps and the scores equal the reference's (each map not all zero)."""
    for method, rule in methods.items():
        expected, scores = subject.reference.gradient(subject.images, score, rule)
        assert np.any(expected != 0), f"{method}: the reference map is all zero"
        np.testing.assert_allclose(explanation.by_method[method], expected, rtol=RTOL,
                                   atol=ATOL, err_msg=method)
    np.testing.assert_allclose(explanation.logits, scores, rtol=RTOL, atol=ATOL)


# -- the similarity and its gradient ---------------------------------------------------------


def test_gradient_maps_equal_the_reference(subject):
    corners = subject.corners
    explanation = subject.explain(Detection(corners, label=2))
    assert_matches(explanation, subject, ref.detection(corners, np.array([2, 2])))
    assert explanation.targets.tolist() == [2, 2]
    # The box overlaps several proposals; the one it matched is its own cell's.
    for index, cell in enumerate(CELLS):
        iou = ref.overlaps(corners[index], subject.boxes[index])
        assert (iou > 0).sum() >= 2, iou
        row, overlap, score = ref.best_match(corners[index], 2, subject.boxes[index],
                                             subject.probabilities[index])
        assert row == cell
        np.testing.assert_allclose(explanation.detections[index],
                                   [*subject.boxes[index, cell], overlap, score], rtol=1e-5)


def test_gradient_times_input_is_the_reference_gradient_times_the_image(subject):
    corners = subject.corners
    explanation = subject.explain(Detection(corners, label=0), method=("gradient-input",))
    gradient, _ = subject.reference.gradient(subject.images, ref.detection(corners, [0, 0]),
                                             "vanilla")
    np.testing.assert_allclose(explanation.maps, gradient * subject.images, rtol=RTOL,
                               atol=ATOL)


def _feature_gradient(subject: Subject, score: ref.ScoreFn) -> tuple[np.ndarray, np.ndarray]:
    """``det3``'s output ``A`` (every proposal's cell, the last map every path to the
    detection passes) and the plain gradient of ``score`` with respect to it."""
    model = subject.reference.model
    features = model.get_layer("det3").output
    values = tf.constant(keras.Model(model.input, features)(subject.images, training=False))

    def layer(name, tensor):
        return model.get_layer(name)(tensor)

    with tf.GradientTape() as tape:
        tape.watch(values)
        boxes = layer("boxes", layer("box_raw", layer("box_head", values)))
        scores = layer("scores", layer("class_logits", layer("class_head", values)))
        outputs = ref.Outputs({"boxes": boxes, "scores": scores}, {})
        total = tf.reduce_sum(score(outputs, np.arange(len(subject.images))))
    return values.numpy(), tape.gradient(total, values).numpy()


def test_class_activation_maps_read_the_feature_map_every_proposal_shares(subject):
    # Grad-CAM relu(sum_k mean(g_k) A_k) and HiResCAM relu(sum_k g_k A_k) at det3, each
    # 4x4 cell repeated over its 4x4 pixels (nearest): the box head's own map (what a
    # classifier's rule finds behind the boxes output) holds no class score's gradient.
    corners = subject.corners
    features, gradient = _feature_gradient(subject, ref.detection(corners, [2, 2]))
    explanation = subject.explain(Detection(corners, label=2), method=("gradcam", "hirescam"),
                                  upsample="nearest")
    expected = {
        "gradcam": (gradient.mean(axis=(1, 2), keepdims=True) * features).sum(-1),
        "hirescam": (gradient * features).sum(-1)}
    for method, cam in expected.items():
        cam = np.repeat(np.repeat(np.maximum(cam, 0), 4, axis=1), 4, axis=2)[..., None]
        assert all(np.any(image != 0) for image in cam), method
        np.testing.assert_allclose(explanation.by_method[method], cam, rtol=RTOL, atol=ATOL,
                                   err_msg=method)


def test_label_none_takes_the_best_matchs_class_on_the_clean_image(subject):
    corners = subject.corners
    labels = np.array([ref.best_label(corners[i], subject.boxes[i], subject.probabilities[i])
                       for i in range(2)])
    explanation = subject.explain(Detection(corners))
    assert explanation.targets.tolist() == labels.tolist()
    assert_matches(explanation, subject, ref.detection(corners, labels))


def test_smoothgrad_keeps_the_clean_images_label(subject):
    # The labels are resolved on the clean images, then fixed for the noisy copies: at
    # this noise, some copies' best match has another class (checked), which a label
    # resolved per copy would follow.
    corners, samples, noise, seed = subject.corners, 4, 0.4, 3
    labels = np.array([ref.best_label(corners[i], subject.boxes[i], subject.probabilities[i])
                       for i in range(2)])
    moved = 0
    for index, image in enumerate(subject.images):
        rng = np.random.default_rng([seed, index])
        sigma = noise * float(image.max() - image.min())
        copies = image[None] + rng.normal(0.0, sigma, (samples, *image.shape))
        outputs = subject.reference.outputs(copies.astype(np.float32))
        for boxes, probabilities in zip(outputs.heads["boxes"].numpy(),
                                        outputs.heads["scores"].numpy()):
            moved += ref.best_label(corners[index], boxes, probabilities) != labels[index]
    assert moved > 0, "no noisy copy would change the label: the test shows nothing"
    explanation = subject.explain(Detection(corners), method=("guided",), smooth=samples,
                                  noise=noise, seed=seed)
    expected = ref.smoothgrad(subject.reference, subject.images,
                              ref.detection(corners, labels), "guided", samples, noise, seed)
    np.testing.assert_allclose(explanation.maps, expected, rtol=RTOL, atol=ATOL)
    assert explanation.targets.tolist() == labels.tolist()


def test_integrated_gradients(subject):
    corners = subject.corners
    explanation = subject.explain(Detection(corners, label=2),
                                  method=("integrated-gradients",), steps=5)
    # Black baseline: 0 in the input space of a model taking raw values.
    expected = ref.integrated_gradients(subject.reference, subject.images,
                                        ref.detection(corners, [2, 2]),
                                        np.zeros((16, 16, 3), np.float32), 5)
    assert np.any(expected != 0)
    np.testing.assert_allclose(explanation.maps, expected, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("weight", [0, 0.5, 2])
def test_score_weight_is_the_class_scores_exponent(subject, weight):
    # 0: the IoU alone (no class score's gradient in the map).
    corners = subject.corners
    explanation = subject.explain(Detection(corners, label=1, score_weight=weight))
    assert_matches(explanation, subject, ref.detection(corners, [1, 1], weight))
    plain = subject.explain(Detection(corners, label=1))
    assert not np.allclose(explanation.by_method["vanilla"], plain.by_method["vanilla"])


def test_box_formats_and_image_size_read_the_same_box(subject):
    corners = subject.corners
    plain = subject.explain(Detection(corners, label=0))
    x0, y0, x1, y1 = corners.T
    given = {
        "yxyx": Detection(np.stack([y0, x0, y1, x1], 1), label=0, box_format="yxyx"),
        "xywh": Detection(np.stack([x0, y0, x1 - x0, y1 - y0], 1), label=0,
                          box_format="xywh"),
        # An image of 32 rows and 64 columns stretched to 16 x 16: x / 4, y / 2.
        "image_size": Detection(corners * [4, 2, 4, 2], label=0, image_size=(32, 64)),
    }
    for name, target in given.items():
        explanation = subject.explain(target)
        for method in RULES:
            np.testing.assert_allclose(explanation.by_method[method], plain.by_method[method],
                                       rtol=1e-6, atol=1e-9, err_msg=f"{name} {method}")
        np.testing.assert_allclose(explanation.logits, plain.logits, rtol=1e-6, err_msg=name)
        np.testing.assert_allclose(explanation.detections, plain.detections, rtol=1e-6)


def test_boxes_format_reads_a_models_boxes_in_their_own_format(subject):
    # The same detector with its boxes output written yxyx relative to the image: read
    # with boxes_format="rel_yxyx", the same proposals, scores and maps.
    boxes = subject.model.get_layer("boxes").output
    relative = keras.layers.Lambda(
        lambda b: keras.ops.stack([b[..., 1], b[..., 0], b[..., 3], b[..., 2]], -1) / 16.0,
        name="rel")(boxes)
    model = keras.Model(subject.model.inputs, {
        "boxes": relative, "scores": subject.model.get_layer("scores").output})
    corners = subject.corners
    explanation = Explainer(model, method="vanilla").explain(
        subject.images, Detection(corners, label=2, boxes_format="rel_yxyx"))
    expected, scores = subject.reference.gradient(subject.images,
                                                  ref.detection(corners, [2, 2]), "vanilla")
    np.testing.assert_allclose(explanation.maps, expected, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(explanation.logits, scores, rtol=1e-5)


def test_a_detections_own_box_is_explained_by_its_class_score(subject):
    # At IoU 1 the overlap's sides lie on the box's: the IoU's gradient there is 0 (each
    # side's two slopes split evenly), so the map is the class score's own gradient.
    own = subject.boxes[np.arange(2), list(CELLS)]
    explanation = subject.explain(Detection(own, label=2))
    assert_matches(explanation, subject, ref.detection(own, [2, 2]))
    class_score = ref.of_heads(lambda heads: tf.stack(
        [heads["scores"][i, cell, 2] for i, cell in enumerate(CELLS)]))
    assert_matches(explanation, subject, class_score)
    np.testing.assert_allclose(explanation.detections[:, 4], [1, 1])


def test_a_detections_map_is_zero_beyond_its_proposals_reach(subject):
    # No pooling: proposal j reads det3's cell j alone, which sees the input's 9 x 9
    # square around it (ref.detector_reach); the max over proposals passes the gradient
    # to the matched one only, so nothing outside its reach moves the score.
    corners = subject.corners
    explanation = subject.explain(Detection(corners, label=2))
    for index, cell in enumerate(CELLS):
        rows, columns = ref.detector_reach(cell)
        for method in RULES:
            image = explanation.by_method[method][index]
            outside = image.copy()
            outside[rows, columns] = 0
            assert np.all(outside == 0), f"{method}: nonzero beyond the proposal's reach"
            assert np.any(image[rows, columns] != 0), method
            # The reach is a part of the image, not all of it.
            assert (rows.stop - rows.start) * (columns.stop - columns.start) < 16 * 16


def test_two_detections_in_one_pass_equal_separate_calls(subject):
    corners = subject.corners
    targets = [Detection(corners, label=0), Detection(corners[::-1].copy(), label=2)]
    together = subject.explainers.setdefault(
        "together", Explainer(subject.model, method=tuple(RULES))).explain_targets(
        subject.images, targets)
    for target, joint in zip(targets, together):
        alone = subject.explain(target)
        for method in RULES:
            np.testing.assert_allclose(joint.by_method[method], alone.by_method[method],
                                       rtol=1e-6, atol=1e-9, err_msg=method)


# -- bad input: one line ---------------------------------------------------------------------


def _error(call, *fragments: str, error: type = ArgumentError) -> str:
    with pytest.raises(error) as caught:
        call()
    message = str(caught.value)
    assert "\n" not in message, message
    assert "--" not in message, message  # library messages name Python parameters
    for fragment in fragments:
        assert fragment in message, message
    return message


@pytest.mark.parametrize("box, fragments", [
    ((2, 2, 2, 8), ("(2, 2, 2, 8)", "empty")),
    ((8, 2, 2, 8), ("(8, 2, 2, 8)", "inverted")),
    ((1, float("nan"), 4, 4), ("nan", "not finite")),
    ((1, 1, float("inf"), 4), ("inf", "not finite")),
    ((1, 2, 3), ("4 numbers", "(3,)")),
    ((1, 2, 3, 4, 5), ("4 numbers", "(5,)")),
    ("abcd", ("not four numbers",)),
], ids=["empty", "inverted", "nan", "inf", "three", "five", "text"])
def test_a_bad_box_is_one_line(box, fragments):
    _error(lambda: Detection(box), "Detection box", *fragments)


def test_a_box_wholly_outside_the_image_is_one_line(subject):
    _error(lambda: subject.explain(Detection((20, 3, 30, 9), label=0)),
           "Detection box (20, 3, 30, 9)", "outside the 16x16 image")
    _error(lambda: subject.explain(Detection((10, 40, 40, 60), label=0, image_size=(32, 64))),
           "outside the 64x32 image")


def test_a_box_partly_outside_is_explained_as_given(subject):
    corners = np.array([[-3.0, -2.5, 4.5, 4.2], [13.2, 12.1, 19.5, 18.0]], np.float32)
    explanation = subject.explain(Detection(corners, label=0))
    assert_matches(explanation, subject, ref.detection(corners, [0, 0]))


def test_per_image_boxes_must_match_the_images(subject):
    _error(lambda: subject.explain(Detection(np.tile(subject.corners[:1], (3, 1)), label=0)),
           "Detection has 3 boxes for 2 images")


def test_a_label_out_of_range_is_one_line(subject):
    _error(lambda: subject.explain(Detection(subject.corners, label=9)),
           "Detection label 9 is out of range", "3 classes", "(0..2)")
    _error(lambda: Detection(subject.corners, label=-1), "Detection label")


def test_a_label_may_be_a_class_name(subject, tmp_path):
    labels = tmp_path / "labels.txt"
    labels.write_text("circle\nsquare\ntriangle\n")
    explainer = Explainer(load_model(subject.model, labels=str(labels)), method="vanilla")
    named = explainer.explain(subject.images, Detection(subject.corners, label="triangle"))
    indexed = subject.explain(Detection(subject.corners, label=2))
    np.testing.assert_array_equal(named.maps, indexed.by_method["vanilla"])
    assert named.targets.tolist() == [2, 2]
    assert named.target.label.endswith(":triangle"), named.target.label
    _error(lambda: explainer.explain(subject.images, Detection(subject.corners, label="hexagon")),
           "unknown class 'hexagon'", "circle, square, triangle", error=ClassNameError)


def test_a_model_that_is_no_detector_is_one_line():
    model = tiny_cnn(0)
    images = np.zeros((1, *model.inputs[0].shape[1:]), np.float32)
    _error(lambda: Explainer(model, method="vanilla").explain(images, Detection((1, 1, 3, 3))),
           "a Detection target needs a detector", "the model's outputs are")


def test_a_box_no_proposal_detects_carries_the_no_detection_caveat(subject):
    corners = subject.corners
    clean = subject.explain(Detection(corners, label=2))
    assert all(not clean.caveats_of(i) for i in range(2)), clean.caveats_of(0)
    # No class score reaches 0.99 (the sigmoids sit near 0.5).
    strict = subject.explain(Detection(corners, label=2, threshold=0.99))
    for index in range(2):
        (caveat,) = strict.caveats_of(index)
        assert caveat.code == NO_DETECTION
        overlap, score = strict.detections[index, 4:]
        assert caveat.text == (
            f"no detection matches {strict.target.label}: the best proposal has IoU "
            f"{overlap:.2f} and class score {score:.2f} (a detection needs IoU >= 0.5 and "
            "score >= 0.99), so its maps explain a weak proposal")
    # A box over a corner of four cells: no proposal overlaps it by half.
    between = subject.explain(Detection((5.0, 5.0, 11.0, 11.0), label=2))
    assert between.detections[0, 4] < 0.5
    assert [c.code for c in between.caveats_of(0)] == [NO_DETECTION]


def test_a_detection_and_another_target_kind_share_the_explainer(subject):
    # A Unit of one class score of one proposal beside the detection: the same pass.
    corners = subject.corners
    unit = int(np.ravel_multi_index((CELLS[0], 2), (16, 3)))
    detection, single = subject.explainers.setdefault(
        "mixed", Explainer(subject.model, method="vanilla")).explain_targets(
        subject.images, [Detection(corners, label=2), Unit(unit, output="scores")])
    expected, _ = subject.reference.gradient(subject.images, ref.unit("scores", unit),
                                             "vanilla")
    np.testing.assert_allclose(single.maps, expected, rtol=RTOL, atol=ATOL)
    gradient, _ = subject.reference.gradient(subject.images, ref.detection(corners, [2, 2]),
                                             "vanilla")
    np.testing.assert_allclose(detection.maps, gradient, rtol=RTOL, atol=ATOL)


def test_a_sigmoid_head_before_a_reshape_is_read_once():
    # Dense(sigmoid) then Reshape to (N, C): the scores are probabilities already (a
    # second sigmoid would read 0.5 as 0.62); a Dense without a head is logits.
    inputs = keras.Input((8, 8, 3))
    flat = keras.layers.Flatten()(inputs)
    boxes = keras.layers.Reshape((4, 4), name="boxes")(keras.layers.Dense(16)(flat))
    outputs = {}
    for name, activation in (("probabilities", "sigmoid"), ("logits", None)):
        dense = keras.layers.Dense(8, activation=activation, kernel_initializer="zeros",
                                   bias_initializer="zeros")(flat)
        outputs[name] = keras.layers.Reshape((4, 2))(dense)
    images = np.zeros((1, 8, 8, 3), np.float32)
    for name in outputs:
        model = keras.Model(inputs, {"boxes": boxes, "scores": outputs[name]})
        explanation = Explainer(model, method="vanilla").explain(
            images, Detection((0.0, 0.0, 4.0, 4.0), label=1, threshold=0.0))
        # every class score is sigmoid(0) = 0.5: read once either way
        assert explanation.detections[0, 5] == pytest.approx(0.5), name
