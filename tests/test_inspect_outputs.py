"""Models that output no probability vector load, and ``inspect`` describes each output.

A regressor, a model with two named outputs, a segmentation model and an embedding
model, built here and saved as ``.keras``; a SavedModel whose signature has two outputs
(a dict): without ``output_key`` it loads them all, by name, for ``output=`` to pick.
"""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from guidedbp.engine.explainer import Explainer
from guidedbp.engine.targets.kinds import Region, Unit
from guidedbp.errors import ModelLoadError
from guidedbp.models.loading import load_model
from guidedbp.models.outputs import OutputInfo

from .helpers import run_cli

IMAGES = np.random.default_rng(0).uniform(0, 255, (2, 8, 8, 3)).astype(np.float32)
SCORE = "score function (API)"


def trunk(inputs):
    x = keras.layers.Rescaling(1 / 255)(inputs)
    return keras.layers.Conv2D(4, 3, padding="same", activation="relu", name="conv")(x)


def regressor():
    inputs = keras.Input((8, 8, 3))
    pooled = keras.layers.GlobalAveragePooling2D()(trunk(inputs))
    return keras.Model(inputs, keras.layers.Dense(1, name="age")(pooled))


def two_heads():
    inputs = keras.Input((8, 8, 3))
    pooled = keras.layers.GlobalAveragePooling2D()(trunk(inputs))
    label = keras.layers.Dense(5, activation="softmax", name="label")(pooled)
    box = keras.layers.Dense(4, name="box")(pooled)
    return keras.Model(inputs, [label, box])


def segmenter():
    inputs = keras.Input((8, 8, 3))
    return keras.Model(inputs, keras.layers.Conv2D(3, 1, activation="softmax",
                                                   name="seg")(trunk(inputs)))


def embedder():
    inputs = keras.Input((8, 8, 3))
    pooled = keras.layers.GlobalAveragePooling2D()(trunk(inputs))
    return keras.Model(inputs, keras.layers.Dense(16, name="embedding")(pooled))


class TwoOutputs(tf.Module):
    """A signature returning class probabilities and a box, by name."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    @tf.function(input_signature=[tf.TensorSpec((None, 8, 8, 3), tf.float32)])
    def serve(self, images):
        label, box = self.model(images)
        return {"probabilities": label, "box": box}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("outputs")
    keras.utils.set_random_seed(0)
    for name, build in [("regressor", regressor), ("two_heads", two_heads),
                        ("segmenter", segmenter), ("embedder", embedder)]:
        build().save(folder / f"{name}.keras")
    module = TwoOutputs(two_heads())
    tf.saved_model.save(module, str(folder / "saved"), signatures={"serving_default": module.serve})
    return folder


def inspect_json(path, *args) -> dict:
    result = run_cli("inspect", path, "--json", *args)
    assert result.exit_code == 0, (result.stderr, result.exception)
    return json.loads(result.stdout)


def inspect_outputs(path, *args) -> list[str]:
    """The text description's ``output`` lines."""
    result = run_cli("inspect", path, *args)
    assert result.exit_code == 0, (result.stderr, result.exception)
    return [line[12:] for line in result.stdout.splitlines() if line.startswith("output ")]


def test_a_regressor(models):
    # One unit with no sigmoid or softmax is a value, not a class (a binary classifier's
    # single logit has a sigmoid head: tests/test_target_checks.py).
    info = inspect_json(models / "regressor.keras")
    assert info["outputs"] == [{"name": "age", "shape": [None, 1], "head": None,
                                "targets": ["unit", "score"]}]
    assert (info["notes"], info["default_target"]) == ([], "unit:0")
    assert inspect_outputs(models / "regressor.keras") == [
        f"age (batch, 1), no head: unit (a value: no sigmoid or softmax, so no class), "
        f"{SCORE}"]


def test_two_named_outputs(models):
    info = inspect_json(models / "two_heads.keras")
    assert info["outputs"] == [
        {"name": "label", "shape": [None, 5], "head": "softmax",
         "targets": ["class", "unit", "score"]},
        {"name": "box", "shape": [None, 4], "head": None,
         "targets": ["unit", "similar", "class", "score"]},
    ]
    assert info["guided_activations"] == {"relu": 1}
    assert inspect_outputs(models / "two_heads.keras") == [
        f"label (batch, 5), softmax head: class, unit, {SCORE}",
        f"box (batch, 4), no head: unit, similar, class (if logits), {SCORE}",
    ]


def test_a_segmentation_model(models):
    info = inspect_json(models / "segmenter.keras")
    assert info["outputs"] == [{"name": "seg", "shape": [None, 8, 8, 3], "head": "softmax",
                                "targets": ["region", "unit", "score"]}]
    assert info["classes"] == 0  # not a classifier: no class count, no classes line
    assert inspect_outputs(models / "segmenter.keras") == [
        f"seg (batch, 8, 8, 3), softmax head: region, unit, {SCORE}"]
    text = run_cli("inspect", models / "segmenter.keras").stdout
    assert "\nclasses " not in text and "\nhead " not in text


def test_an_embedding_model(models):
    info = inspect_json(models / "embedder.keras")
    assert info["outputs"] == [{"name": "embedding", "shape": [None, 16], "head": None,
                                "targets": ["unit", "similar", "class", "score"]}]
    assert inspect_outputs(models / "embedder.keras") == [
        f"embedding (batch, 16), no head: unit, similar, class (if logits), {SCORE}"]


def test_labels_are_checked_against_the_outputs_classes(models, tmp_path):
    labels = tmp_path / "three.txt"
    labels.write_text("road\ncar\nsky\n")
    assert inspect_json(models / "segmenter.keras", "--labels", labels)["notes"] == []
    labels.write_text("road\ncar\n")
    assert "2 labels for 3 classes" in inspect_json(models / "segmenter.keras", "--labels",
                                                    labels)["notes"]
    # Either head of a two-head model may be what the labels name.
    labels.write_text("a\nb\nc\nd\n")
    assert inspect_json(models / "two_heads.keras", "--labels", labels)["notes"] == []
    labels.write_text("a\nb\nc\n")
    assert "3 labels for 4 or 5 classes" in inspect_json(
        models / "two_heads.keras", "--labels", labels)["notes"]


def test_a_saved_model_with_two_outputs_is_inspected_by_name(models):
    info = inspect_json(models / "saved")
    # The signature's outputs, in tf.nest's (sorted) order of its keys.
    assert info["outputs"] == [
        {"name": "box", "shape": [None, 4], "head": None,
         "targets": ["unit", "similar", "class", "score"]},
        {"name": "probabilities", "shape": [None, 5], "head": "softmax",
         "targets": ["class", "unit", "score"]},
    ]
    assert inspect_outputs(models / "saved", "--output-key", "box") == [
        f"box (batch, 4), no head: unit, similar, class (if logits), {SCORE}"]


def test_a_saved_model_with_two_outputs_loads_both_for_output_to_pick(models):
    loaded = load_model(models / "saved")
    outputs = loaded(IMAGES)
    assert list(outputs) == ["box", "probabilities"]
    assert loaded.model.output_names == ["box", "probabilities"]
    assert outputs["box"].shape == (2, 4) and outputs["probabilities"].shape == (2, 5)

    box = Explainer(loaded.model, "vanilla", output="box").explain(IMAGES, Unit(2))
    np.testing.assert_allclose(box.logits, outputs["box"].numpy()[:, 2], rtol=1e-5)
    images = tf.constant(IMAGES)
    with tf.GradientTape() as tape:
        tape.watch(images)
        score = tf.reduce_sum(loaded(images)["box"][:, 2])
    np.testing.assert_allclose(box.maps, tape.gradient(score, images).numpy(), rtol=1e-4,
                               atol=1e-7)

    label = Explainer(loaded.model, "guided", output="probabilities").explain(IMAGES)
    np.testing.assert_array_equal(label.targets,
                                  outputs["probabilities"].numpy().argmax(axis=1))


def test_output_key_keeps_one_output_as_before(models):
    loaded = load_model(models / "saved", output_key="probabilities")
    assert loaded.model.output_names == ["probabilities"]
    probabilities = loaded(IMAGES).numpy()
    assert probabilities.shape == (2, 5)
    explained = Explainer(loaded.model, "guided").explain(IMAGES)
    np.testing.assert_array_equal(explained.targets, probabilities.argmax(axis=1))
    with pytest.raises(ModelLoadError, match=r"has no output 'boxes' \(it has: box, "
                                             r"probabilities\)"):
        load_model(models / "saved", output_key="boxes")


def test_keras_models_with_any_output_load_and_explain(models):
    region = Explainer(load_model(models / "segmenter.keras").model, "guided")
    explained = region.explain(IMAGES, Region(1))
    assert explained.region_pixels is not None
    regression = Explainer(load_model(models / "regressor.keras").model, "guided")
    assert regression.explain(IMAGES, Unit(0)).logits.shape == (2,)


@pytest.mark.parametrize("shape, head, targets, words", [
    ((None, 1), "sigmoid", ("unit", "class", "score"),
     "unit (regression) / class (binary), score function (API)"),
    ((None, 10), "sigmoid", ("class", "unit", "score"), "class, unit, score function (API)"),
    ((None, 32, 32, 21), None, ("region", "unit", "score"),
     "region, unit, score function (API)"),
    ((None, 7, 64), None, ("unit", "score"), "unit, score function (API)"),
])
def test_targets_that_fit_each_shape(shape, head, targets, words):
    output = OutputInfo("out", shape, head)
    assert (output.targets, output.describe_targets()) == (targets, words)


def test_a_saved_models_outputs_are_listed_like_a_keras_models(models):
    graph = load_model(models / "saved").model
    assert graph.output_names == ["box", "probabilities"]
    assert [tuple(spec.shape) for spec in graph.outputs] == [(None, 4), (None, 5)]
    alone = load_model(models / "saved", output_key="box").model
    assert (alone.output_names, [tuple(s.shape) for s in alone.outputs]) == (["box"], [(None, 4)])


def test_explain_reads_one_output_of_a_saved_model_by_name(models, tmp_path):
    from PIL import Image

    Image.fromarray(IMAGES[0].astype(np.uint8)).save(tmp_path / "a.png")
    run = run_cli("explain", models / "saved", tmp_path / "a.png", "-o", tmp_path / "out",
                  "--model-output", "box", "--target", "unit:2")
    assert run.exit_code == 0, (run.output, run.exception)
    (record,) = [json.loads(line) for line in
                 (tmp_path / "out" / "manifest.jsonl").read_text().splitlines()]
    (target,) = record["targets"]
    assert (target["target"]["output"], target["target"]["spec"]) == ("box", "unit:2")
    # several outputs and none chosen: one line, before any input is read
    refused = run_cli("explain", models / "saved", tmp_path / "a.png", "-o", tmp_path / "no")
    assert refused.exit_code == 2
    assert "2 outputs ('box' (None, 4), 'probabilities' (None, 5))" in refused.stderr
