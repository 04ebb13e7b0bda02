"""Targets (issue 21) against an independent reference: each score differentiated by hand.

For every target (``Unit``, ``Class``, ``Region``, ``Similarity``, a score function) and
for vanilla, guided and deconvnet, the engine's maps equal the gradient of the same
score computed with ``tf.GradientTape`` on the same architecture rebuilt with ReLUs
whose backward pass is the rule's (:mod:`tests.targets_reference`): on a regressor, a
two-head model (list and dict outputs), a segmentation model and an embedding model.
SmoothGrad, integrated gradients and occlusion are checked against the same reference
written out, and the segmentation model's known receptive field (three 3x3
convolutions: 7x7) bounds where a region's map can be nonzero.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import keras
import numpy as np
import pytest
import tensorflow as tf

from guidedbp import Explainer
from guidedbp.errors import ArgumentError
from guidedbp.targets import Class, Region, Score, Similarity, Unit

from . import targets_reference as ref

METHODS = ("vanilla", "guided", "deconvnet")
RTOL, ATOL = 1e-5, 1e-6


@dataclass
class Subject:
    """A test model, its reference, images for it, and its explainers (built once)."""

    model: keras.Model
    reference: ref.Reference
    images: np.ndarray
    explainers: dict = field(default_factory=dict)

    def explainer(self, method=METHODS, **options) -> Explainer:
        key = (method, repr(sorted(options.items())))
        if key not in self.explainers:
            self.explainers[key] = Explainer(self.model, method=method, **options)
        return self.explainers[key]

    def explain(self, target, method=METHODS, **options):
        return self.explainer(method, **options).explain(self.images, target)


def _images(size: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0.0, 1.0, (2, size, size, 3)).astype(np.float32)


def _subject(build, form: str = "single", seed: int = 0) -> Subject:
    model = ref.model_of(build(), form)
    return Subject(model, ref.Reference(build, model), _images(model.inputs[0].shape[1], seed))


@pytest.fixture(scope="module")
def regressor() -> Subject:
    return _subject(ref.regressor_graph)


@pytest.fixture(scope="module")
def two_heads() -> dict[str, Subject]:
    """The same heads (one graph, so the same weights) as a list and as a dict."""
    graph = ref.two_head_graph()
    images = _images(12, 1)
    subjects = {}
    for form in ("list", "dict"):
        model = ref.model_of(graph, form)
        subjects[form] = Subject(model, ref.Reference(ref.two_head_graph, model), images)
    return subjects


@pytest.fixture(scope="module")
def segmentation() -> Subject:
    return _subject(ref.segmentation_graph, seed=2)


@pytest.fixture(scope="module")
def embedding() -> Subject:
    return _subject(ref.embedding_graph, seed=3)


def assert_matches(explanation, subject: Subject, score: ref.ScoreFn, methods=METHODS) -> None:
    """Each method's maps and the explanation's scores equal the reference's."""
    expected, scores = subject.reference.maps(subject.images, score, methods)
    for method in methods:
        assert np.any(expected[method] != 0), f"{method}: the reference map is all zero"
        np.testing.assert_allclose(explanation.by_method[method], expected[method],
                                   rtol=RTOL, atol=ATOL, err_msg=method)
    np.testing.assert_allclose(explanation.logits, scores, rtol=RTOL, atol=ATOL)


# -- the reference itself ------------------------------------------------------------------


def test_reference_relu_applies_each_rule_by_hand():
    # x = [1, -1, 2, -3], g = [1, 1, -1, -1] arriving at relu(x).
    # vanilla g * (x > 0); guided also * (g > 0); deconvnet max(g, 0) whatever x.
    x = tf.constant([1.0, -1.0, 2.0, -3.0])
    g = tf.constant([1.0, 1.0, -1.0, -1.0])
    switch = ref.RuleSwitch()
    relu = ref.rule_relu(switch)
    expected = {"vanilla": [1, 0, -1, 0], "guided": [1, 0, 0, 0], "deconvnet": [1, 1, 0, 0]}
    for rule, values in expected.items():
        switch.name = rule
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = relu(x)
        np.testing.assert_array_equal(tape.gradient(y, x, output_gradients=g), values)
        np.testing.assert_array_equal(y, [1, 0, 2, 0])


def test_reference_one_convolution_by_hand():
    # 3x3 image [[1, 2, 0], [3, 1, 2], [0, 1, 1]] -> conv 2x2 (kernel [[1, -1], [1, 1]],
    # bias -2) -> relu -> Flatten -> Dense. pre = [[1, 3], [1, -1]];
    # d score / d relu = [[1, -1], [2, 1]] (the dense weights).
    # vanilla g = [[1, -1], [2, 0]], guided [[1, 0], [2, 0]], deconvnet [[1, 0], [2, 1]];
    # the input gradient is g's full correlation with the kernel.
    switch = ref.RuleSwitch()
    inputs = keras.Input((3, 3, 1))
    conv = keras.layers.Conv2D(1, 2, activation=ref.rule_relu(switch))
    dense = keras.layers.Dense(1, use_bias=False)
    model = keras.Model(inputs, dense(keras.layers.Flatten()(conv(inputs))))
    conv.set_weights([np.array([[1, -1], [1, 1]], np.float32).reshape(2, 2, 1, 1),
                      np.array([-2], np.float32)])
    dense.set_weights([np.array([[1], [-1], [2], [1]], np.float32)])
    image = tf.constant(np.array([[1, 2, 0], [3, 1, 2], [0, 1, 1]], np.float32)
                        .reshape(1, 3, 3, 1))
    expected = {"vanilla": [[1, -2, 1], [3, -2, -1], [2, 2, 0]],
                "guided": [[1, -1, 0], [3, -1, 0], [2, 2, 0]],
                "deconvnet": [[1, -1, 0], [3, 0, -1], [2, 3, 1]]}
    for rule, values in expected.items():
        switch.name = rule
        with tf.GradientTape() as tape:
            tape.watch(image)
            score = tf.reduce_sum(model(image))
        np.testing.assert_array_equal(tape.gradient(score, image)[0, :, :, 0], values,
                                      err_msg=rule)


@pytest.mark.parametrize("name", ["regressor", "segmentation", "embedding"])
def test_reference_vanilla_is_the_models_own_gradient(name, request):
    subject = request.getfixturevalue(name)
    images = tf.constant(subject.images)
    with tf.GradientTape() as tape:
        tape.watch(images)
        output = subject.model(images, training=False)
        total = tf.reduce_sum(tf.reshape(output, (len(subject.images), -1))[:, 2])
    plain = tape.gradient(total, images).numpy()
    head = subject.reference.heads[0]
    maps, scores = subject.reference.gradient(subject.images, ref.unit(head, 2), "vanilla")
    np.testing.assert_allclose(maps, plain, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(scores, tf.reshape(output, (2, -1))[:, 2], rtol=1e-6)
    assert not np.array_equal(*subject.reference.maps(
        subject.images, ref.unit(head, 2), ("vanilla", "guided"))[0].values())


# -- regressor: Unit, Class, a score function ------------------------------------------------


@pytest.mark.parametrize("index", [0, 2])
def test_unit_on_regressor(regressor, index):
    target = Unit(index)
    explanation = regressor.explain(target)
    assert_matches(explanation, regressor, ref.unit("regression", index))
    assert explanation.targets.tolist() == [index, index]
    assert explanation.target is target
    assert explanation.region_pixels is None


def test_class_and_int_on_a_linear_head_are_the_output_unit(regressor):
    # No softmax or sigmoid to strip: the class's logit is the output itself.
    for target in (Class(1), 1):
        explanation = regressor.explain(target)
        assert_matches(explanation, regressor, ref.unit("regression", 1))
        assert explanation.targets.tolist() == [1, 1]


def test_score_function_on_regressor(regressor):
    def product(out):
        return out[:, 0] * out[:, 2]

    expected = ref.of_heads(lambda heads: heads["regression"][:, 0] * heads["regression"][:, 2])
    for target in (product, Score(product, name="product")):
        explanation = regressor.explain(target)
        assert_matches(explanation, regressor, expected)
        assert explanation.targets.tolist() == [-1, -1]


# -- two heads: output= by name and by index, list and dict ----------------------------------


@pytest.mark.parametrize("form, output", [("list", "box"), ("list", 1), ("dict", "box")])
def test_explainer_output_picks_the_head(two_heads, form, output):
    subject = two_heads[form]
    explanation = subject.explain(Unit(1), output=output)
    assert_matches(explanation, subject, ref.unit("box", 1))


@pytest.mark.parametrize("form", ["list", "dict"])
def test_target_output_overrides_the_explainers(two_heads, form):
    subject = two_heads[form]
    for explainer_output in (None, "label"):
        explanation = subject.explain(Unit(3, output="box"), output=explainer_output)
        assert_matches(explanation, subject, ref.unit("box", 3))
    # The other way round: the explainer reads the box, the target the label's logit.
    explanation = subject.explain(Class(2, output="label"), output="box")
    assert_matches(explanation, subject, ref.class_logit("label", 2))


def test_class_on_a_softmax_head_is_its_logit_and_unit_its_probability(two_heads):
    subject = two_heads["list"]
    for target in (Class(2), 2):
        explanation = subject.explain(target, output="label")
        assert_matches(explanation, subject, ref.class_logit("label", 2))
    # Nothing stripped: the probability itself, through the softmax.
    explanation = subject.explain(Unit(2), output="label")
    assert_matches(explanation, subject, ref.unit("label", 2))


def test_default_target_on_the_chosen_head_is_its_top_class(two_heads):
    subject = two_heads["list"]
    logits = subject.reference.outputs(subject.images).logits["label"].numpy()
    top = np.argmax(logits, axis=1)
    explanation = subject.explain(None, output="label")
    assert explanation.targets.tolist() == top.tolist()
    for row, cls in enumerate(top):
        maps, scores = subject.reference.maps(subject.images[row:row + 1],
                                              ref.class_logit("label", int(cls)))
        for method in METHODS:
            np.testing.assert_allclose(explanation.by_method[method][row:row + 1], maps[method],
                                       rtol=RTOL, atol=ATOL, err_msg=method)
        np.testing.assert_allclose(explanation.logits[row], scores[0], rtol=RTOL)


def test_score_function_without_output_receives_the_whole_output(two_heads):
    expected = ref.of_heads(lambda heads: heads["box"][:, 0] - 3 * heads["label"][:, 1])
    list_explanation = two_heads["list"].explain(lambda out: out[1][:, 0] - 3 * out[0][:, 1])
    assert_matches(list_explanation, two_heads["list"], expected)
    dict_explanation = two_heads["dict"].explain(
        lambda out: out["box"][:, 0] - 3 * out["label"][:, 1])
    assert_matches(dict_explanation, two_heads["dict"], expected)


def test_explain_targets_reads_each_targets_head(two_heads):
    subject = two_heads["dict"]
    targets = [Unit(0, output="box"), Class(3, output="label"), Unit(1, output="label")]
    together = subject.explainer().explain_targets(subject.images, targets)
    for explanation, score in zip(together, [ref.unit("box", 0), ref.class_logit("label", 3),
                                             ref.unit("label", 1)]):
        assert_matches(explanation, subject, score)


def test_score_function_with_output_receives_that_head(two_heads):
    subject = two_heads["list"]
    expected = ref.of_heads(lambda heads: heads["box"][:, 0] + 2 * heads["box"][:, 3])
    explanation = subject.explain(Score(lambda box: box[:, 0] + 2 * box[:, 3], output="box"))
    assert_matches(explanation, subject, expected)


# -- segmentation: Region, Unit on a map -----------------------------------------------------


def _present_class(subject: Subject) -> int:
    """A class that is the argmax somewhere in every image."""
    output = subject.reference.outputs(subject.images).heads["segmentation"].numpy()
    counts = np.stack([(np.argmax(output, -1) == c).sum(axis=(1, 2))
                       for c in range(ref.SEGMENTATION_CLASSES)])
    present = np.flatnonzero((counts > 0).all(axis=1) & (counts < 16 * 16).all(axis=1))
    assert len(present), f"no class is the argmax of part of every image: {counts}"
    return int(present[0])


def test_region_of_the_argmax(segmentation):
    c = _present_class(segmentation)
    mask = ref.argmax_mask(segmentation.reference, segmentation.images, "segmentation", c)
    explanation = segmentation.explain(Region(c))
    assert_matches(explanation, segmentation, ref.region("segmentation", c, mask))
    assert explanation.targets.tolist() == [c, c]
    assert explanation.region_pixels.tolist() == mask.sum(axis=(1, 2)).tolist()


def test_region_of_a_mask_per_image(segmentation):
    rng = np.random.default_rng(5)
    masks = rng.uniform(size=(2, 16, 16)) < 0.3
    explanation = segmentation.explain(Region(1, masks.astype(np.float32)))
    assert_matches(explanation, segmentation, ref.region("segmentation", 1, masks))
    assert explanation.region_pixels.tolist() == masks.sum(axis=(1, 2)).tolist()


@pytest.mark.parametrize("size", [(8, 8), (6, 5), (20, 24)])
def test_region_mask_of_another_size_is_resized_by_nearest_neighbour(segmentation, size):
    small = np.random.default_rng(6).uniform(size=size) < 0.4
    mask = ref.resized_mask(small, (16, 16), 2)
    explanation = segmentation.explain(Region(2, small.astype(np.uint8)))
    assert_matches(explanation, segmentation, ref.region("segmentation", 2, mask))
    assert explanation.region_pixels.tolist() == mask.sum(axis=(1, 2)).tolist()


def test_unit_on_a_map_by_tuple_and_by_flat_index(segmentation):
    index = (4, 11, 1)
    flat = int(np.ravel_multi_index(index, (16, 16, ref.SEGMENTATION_CLASSES)))
    for target in (Unit(index), Unit(flat)):
        # Nothing stripped: one pixel's probability, through the softmax.
        assert_matches(segmentation.explain(target), segmentation, ref.unit("segmentation", index))


def test_explain_targets_equals_separate_calls(segmentation):
    c = _present_class(segmentation)
    mask = np.zeros((16, 16), np.float32)
    mask[2:9, 3:7] = 1
    targets = [Unit(7), Region(c), Region(0, mask)]
    explainer = segmentation.explainer()
    together = explainer.explain_targets(segmentation.images, targets)
    assert [explanation.target for explanation in together] == targets
    for target, joint in zip(targets, together):
        alone = explainer.explain(segmentation.images, target)
        for method in METHODS:
            np.testing.assert_allclose(joint.by_method[method], alone.by_method[method],
                                       rtol=1e-6, atol=1e-8, err_msg=method)
        np.testing.assert_allclose(joint.logits, alone.logits, rtol=1e-6)
    argmax = ref.argmax_mask(segmentation.reference, segmentation.images, "segmentation", c)
    given = ref.resized_mask(mask, (16, 16), 2)
    for joint, score in zip(together, [ref.unit("segmentation", 7),
                                       ref.region("segmentation", c, argmax),
                                       ref.region("segmentation", 0, given)]):
        assert_matches(joint, segmentation, score)


def test_region_masks_follow_their_images_across_batches(segmentation):
    # One image per batch: each batch must read its own image's mask, for the traced
    # pass and for SmoothGrad's copies.
    masks = np.random.default_rng(12).uniform(size=(2, 16, 16)) < 0.3
    score = ref.region("segmentation", 2, masks)
    explanation = segmentation.explain(Region(2, masks), batch_size=1)
    assert_matches(explanation, segmentation, score)
    smoothed = segmentation.explain(Region(2, masks), method=("guided",), batch_size=1,
                                    smooth=2, noise=0.2, seed=4)
    expected = ref.smoothgrad(segmentation.reference, segmentation.images, score, "guided",
                              2, 0.2, 4)
    np.testing.assert_allclose(smoothed.maps, expected, rtol=RTOL, atol=ATOL)


def test_region_map_is_zero_outside_the_receptive_field(segmentation):
    # Three 3x3 convolutions, stride 1: a logit sees the 7x7 square around its pixel, so
    # the map of a region is zero beyond 3 pixels of it, for every rule.
    mask = np.zeros((16, 16), np.float32)
    mask[6:9, 9:11] = 1
    field_rows, field_columns = slice(3, 12), slice(6, 14)
    explanation = segmentation.explain(Region(1, mask))
    expected, _ = segmentation.reference.maps(segmentation.images,
                                              ref.region("segmentation", 1,
                                                         np.stack([mask != 0] * 2)))
    for method in METHODS:
        for maps in (explanation.by_method[method], expected[method]):
            outside = maps.copy()
            outside[:, field_rows, field_columns] = 0.0
            assert np.all(outside == 0.0), f"{method}: nonzero outside the receptive field"
            for image in maps:
                assert np.any(image[field_rows, field_columns] != 0.0), method
    assert_matches(explanation, segmentation,
                   ref.region("segmentation", 1, np.stack([mask != 0] * 2)))


# -- embedding: Similarity -----------------------------------------------------------------


def test_similarity_to_an_embedding(embedding):
    reference_embedding = np.random.default_rng(8).normal(size=8).astype(np.float32)
    explanation = embedding.explain(Similarity(reference_embedding))
    assert_matches(explanation, embedding, ref.similarity("embedding", reference_embedding))
    assert explanation.targets.tolist() == [-1, -1]
    assert np.all(np.abs(explanation.logits) <= 1 + 1e-6)


def test_similarity_to_an_image(embedding):
    image = _images(12, 9)[0]
    reference_embedding = embedding.model(image[None], training=False).numpy()[0]
    explanation = embedding.explain(Similarity(image))
    assert_matches(explanation, embedding, ref.similarity("embedding", reference_embedding))


# -- averaging and perturbation methods on targets ------------------------------------------


def test_smoothgrad_of_a_unit(regressor):
    explanation = regressor.explain(Unit(1), smooth=4, noise=0.2, seed=7)
    # The score is the clean image's; the maps average the noisy copies'.
    np.testing.assert_allclose(explanation.logits, regressor.reference.scores(
        regressor.images, ref.unit("regression", 1)), rtol=RTOL)
    for method in METHODS:
        expected = ref.smoothgrad(regressor.reference, regressor.images,
                                  ref.unit("regression", 1), method, 4, 0.2, 7)
        np.testing.assert_allclose(explanation.by_method[method], expected, rtol=RTOL,
                                   atol=ATOL, err_msg=method)


def test_smoothgrad_keeps_the_region_of_the_clean_image(segmentation):
    c = _present_class(segmentation)
    mask = ref.argmax_mask(segmentation.reference, segmentation.images, "segmentation", c)
    explanation = segmentation.explain(Region(c), method=("guided",), smooth=3, noise=0.3,
                                       seed=2)
    expected = ref.smoothgrad(segmentation.reference, segmentation.images,
                              ref.region("segmentation", c, mask), "guided", 3, 0.3, 2)
    np.testing.assert_allclose(explanation.maps, expected, rtol=RTOL, atol=ATOL)
    assert explanation.region_pixels.tolist() == mask.sum(axis=(1, 2)).tolist()


def test_integrated_gradients_of_a_unit(regressor):
    explanation = regressor.explain(Unit(2), method=("integrated-gradients",), steps=6)
    # Black baseline: 0 in the input space of a model taking raw values.
    expected = ref.integrated_gradients(regressor.reference, regressor.images,
                                        ref.unit("regression", 2),
                                        np.zeros((12, 12, 3), np.float32), 6)
    np.testing.assert_allclose(explanation.maps, expected, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(explanation.logits, regressor.reference.scores(
        regressor.images, ref.unit("regression", 2)), rtol=RTOL)


def test_integrated_gradients_of_a_similarity(embedding):
    reference_embedding = np.random.default_rng(10).normal(size=8).astype(np.float32)
    explanation = embedding.explain(Similarity(reference_embedding),
                                    method=("integrated-gradients",), steps=4, baseline="white")
    expected = ref.integrated_gradients(embedding.reference, embedding.images,
                                        ref.similarity("embedding", reference_embedding),
                                        np.full((12, 12, 3), 255.0, np.float32), 4)
    np.testing.assert_allclose(explanation.maps, expected, rtol=RTOL, atol=ATOL)


def test_occlusion_of_a_unit(regressor):
    # patch 4, stride 3 on 12 pixels: starts 0, 3, 6, 9 (the last cut by the edge).
    explanation = regressor.explain(Unit(0), method=("occlusion",), patch=4, stride=3,
                                    fill=0.0)
    expected = ref.occlusion(regressor.reference, regressor.images,
                             ref.unit("regression", 0), 4, 3, 0.0)
    assert np.any(expected != 0)
    np.testing.assert_allclose(explanation.maps, expected, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(explanation.logits,
                               regressor.reference.scores(regressor.images,
                                                          ref.unit("regression", 0)),
                               rtol=RTOL)


def test_occlusion_keeps_the_region_of_the_clean_image(segmentation):
    c = _present_class(segmentation)
    mask = ref.argmax_mask(segmentation.reference, segmentation.images, "segmentation", c)
    explanation = segmentation.explain(Region(c), method=("occlusion",), patch=6, stride=5,
                                       fill=0.0)
    expected = ref.occlusion(segmentation.reference, segmentation.images,
                             ref.region("segmentation", c, mask), 6, 5, 0.0)
    np.testing.assert_allclose(explanation.maps, expected, rtol=RTOL, atol=1e-5)


# -- one-line errors -------------------------------------------------------------------------


def _error(call, *fragments: str) -> str:
    with pytest.raises(ArgumentError) as caught:
        call()
    message = str(caught.value)
    assert "\n" not in message, message
    # guidedbp.errors: library messages name Python parameters, never command-line flags.
    assert "--" not in message, message
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_region_on_a_flat_output_is_refused(regressor):
    _error(lambda: regressor.explain(Region(0)), "Region")


@pytest.mark.parametrize("target", [None, 0, Class(0)], ids=["None", "int", "Class"])
def test_class_on_a_map_output_is_refused(segmentation, target):
    _error(lambda: segmentation.explain(target))


@pytest.mark.parametrize("target", [None, 0, Class(0)], ids=["None", "int", "Class"])
def test_class_without_output_on_two_heads_is_refused(two_heads, target):
    message = _error(lambda: two_heads["list"].explain(target))
    assert "output" in message, message


def test_score_function_of_the_wrong_shape_is_refused(regressor):
    _error(lambda: regressor.explain(lambda out: out), "Score function", "3)")


@pytest.mark.parametrize("form", ["list", "dict"])
def test_unknown_output_name_lists_the_names(two_heads, form):
    subject = two_heads[form]
    _error(lambda: subject.explain(Unit(0, output="boxes")), "boxes", "label", "box")
    _error(lambda: Explainer(subject.model, method="vanilla", output="boxes").explain(
        subject.images, Unit(0)), "boxes", "label", "box")
