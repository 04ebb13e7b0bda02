"""The targets API around the maps: names, files, caveats, traces and the head's order.

The maps themselves are checked against an independent reference in
tests/test_targets_reference.py; here, what the package's Explainer adds (class names for
regions, image files as references), what an Explanation says about its target, and
that several targets share one traced pass.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

import guidedbp
from guidedbp.caveats import EMPTY_REGION
from guidedbp.demo.samples import packaged_samples
from guidedbp.engine.explainer import Explainer as EngineExplainer
from guidedbp.errors import ArgumentError
from guidedbp.targets import Class, Region, Score, Similarity, Unit


@pytest.fixture(scope="module")
def seg():
    return guidedbp.Explainer("demo-seg", method=("vanilla", "gradcam"))


@pytest.fixture(scope="module")
def shapes(seg):
    samples = {path.name: path for path in map(Path, packaged_samples())}
    paths = [samples[name] for name in ("circle_0.png", "ring_0.png")]
    return paths, np.stack([seg.reference_image(path, (96, 96, 3)) for path in paths])


def test_targets_import_without_tensorflow():
    code = ("import sys, guidedbp.targets as t; t.Region('circle'); t.Unit((0, 1));"
            "print('tensorflow' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "False"


def test_labels_and_their_validation():
    assert [Class(3).label, Unit(2).label, Unit((1, 2, 0)).label] == [
        "class:3", "unit:2", "unit:1,2,0"]
    assert Region("circle").label == "region:circle"
    assert Similarity(np.ones(4)).label == "similar"
    assert Similarity("refs/a.jpg").label == "similar:a.jpg"
    assert Score(lambda out: out).label == "score"

    def area(out):
        return out

    assert Score(area).label == "score:area"
    for bad in (lambda: Unit(-1), lambda: Class(True), lambda: Unit(()),
                lambda: Region(1, mask=np.ones(3)), lambda: Similarity(np.ones((2, 2))),
                lambda: Unit(0, output=1.5)):
        with pytest.raises(ArgumentError):
            bad()


def test_region_by_class_name_is_the_region_by_index(seg, shapes):
    _, images = shapes
    by_name = seg.explain(images, Region("circle"))
    by_index = seg.explain(images, Region(seg.labels.index("circle")))
    np.testing.assert_array_equal(by_name.maps, by_index.maps)
    np.testing.assert_array_equal(by_name.targets, [1, 1])
    # The model finds the circle in the circle's picture, and none in the ring's.
    assert by_name.region_pixels[0] > 20 and by_name.region_pixels[1] == 0
    assert by_name.target.label == "region:circle"


def test_an_empty_region_says_so_and_its_maps_are_zero(seg, shapes):
    _, images = shapes
    explanation = seg.explain(images, Region("circle"))
    assert [c.code for c in explanation.caveats_of(0)] == []
    codes = [c.code for c in explanation.caveats_of(1)]
    assert EMPTY_REGION in codes and "negligible-map" in codes
    assert not explanation.by_method["vanilla"][1].any()
    assert explanation.logits[1] == 0.0


def test_the_region_score_is_the_logit_sum_over_the_argmax(seg, shapes):
    _, images = shapes
    model = seg.model
    head = model.layers[-1]  # a 1x1 convolution with a softmax activation
    features = keras.Model(model.inputs[0], head.input)(images, training=False)
    kernel, bias = (np.asarray(w, np.float64) for w in head.get_weights())
    logits = np.asarray(features, np.float64) @ kernel[0, 0] + bias
    ring = seg.labels.index("ring")
    region = logits.argmax(axis=-1) == ring
    explanation = seg.explain(images, Region("ring"))
    np.testing.assert_array_equal(explanation.region_pixels, region.sum(axis=(1, 2)))
    assert explanation.region_pixels[1] > 20
    np.testing.assert_allclose(explanation.logits, (logits[..., ring] * region).sum(axis=(1, 2)),
                               rtol=1e-5)


def test_a_similarity_reference_file_is_prepared_like_the_inputs(seg, shapes):
    paths, images = shapes
    from_file = seg.explain(images, Similarity(str(paths[0])))
    from_array = seg.explain(images, Similarity(images[0]))
    np.testing.assert_array_equal(from_file.maps, from_array.maps)
    assert from_file.logits[0] == pytest.approx(1.0, abs=1e-6)
    assert from_file.target.label == "similar:circle_0.png"
    embedding = np.asarray(seg.model(images[:1], training=False)).reshape(-1)
    by_vector = seg.explain(images, Similarity(embedding))
    np.testing.assert_allclose(by_vector.logits, from_array.logits, rtol=1e-6)


def test_the_cam_of_a_segmentation_reads_the_map_before_the_head(seg):
    assert seg.report_for((96, 96, 3)).layer != seg.model.layers[-1].name
    explanation = seg.explain(np.zeros((1, 96, 96, 3), np.float32), Unit((5, 5, 0)))
    assert explanation.by_method["gradcam"].shape == (1, 96, 96, 1)


def two_head_model(dict_outputs: bool):
    keras.utils.set_random_seed(3)
    inputs = keras.Input((6, 6, 1))
    hidden = keras.layers.Flatten()(keras.layers.Conv2D(2, 3, activation="relu")(inputs))
    box = keras.layers.Dense(4, name="box")(hidden)
    label = keras.layers.Dense(3, activation="softmax", name="label")(hidden)
    return keras.Model(inputs, {"label": label, "box": box} if dict_outputs else [label, box])


def test_an_output_index_follows_the_models_output_names():
    model = two_head_model(dict_outputs=True)
    images = np.random.default_rng(0).uniform(0, 1, (2, 6, 6, 1)).astype(np.float32)
    raw = model(images)
    for index, name in enumerate(model.output_names):
        explanation = EngineExplainer(model, "vanilla", output=index).explain(images, Unit(0))
        np.testing.assert_allclose(explanation.logits, np.asarray(raw[name])[:, 0], rtol=1e-6)


def test_several_targets_share_one_traced_pass():
    model = two_head_model(dict_outputs=False)
    images = np.random.default_rng(1).uniform(0, 1, (3, 6, 6, 1)).astype(np.float32)
    explainer = EngineExplainer(model, ("guided", "vanilla"), output="box")
    both = explainer.explain_targets(images, [Unit(0), Unit(3), Class(2, output="label")])
    assert explainer.trace_count == 1  # the report comes from that same trace
    assert [e.target.label for e in both] == ["unit:0", "unit:3", "class:2"]
    alone = EngineExplainer(model, ("guided", "vanilla"), output="box").explain(images, Unit(3))
    np.testing.assert_array_equal(both[1].by_method["guided"], alone.by_method["guided"])
    assert np.isnan(both[0].probabilities).all() and not np.isnan(both[2].probabilities).any()
    with tf.GradientTape() as tape:
        tensor = tf.constant(images)
        tape.watch(tensor)
        score = tf.reduce_sum(model(tensor)[1][:, 3])
    np.testing.assert_allclose(both[1].by_method["vanilla"], tape.gradient(score, tensor),
                               rtol=1e-6, atol=1e-7)


def test_top_k_is_for_classifier_outputs(seg):
    with pytest.raises(ArgumentError, match=r"\(None, 24, 24, 7\)"):
        seg.explain_top_k(np.zeros((1, 96, 96, 3), np.float32), 2)
