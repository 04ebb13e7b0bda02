"""The engine's generalised guided rule (``guide="all"``) against hand values and the reference.

``guide="all"`` guides every elementwise activation (tests/activation_reference.py has
the rule's definition): each activation alone on the two-layer model of
tests/test_activation_reference.py, equal to its hand-computed map; and Keras
applications built with ``weights=None`` (seeded), a backbone nested in a functional
model, a model saved to .keras and .h5 and the two vision transformers of
tests/vit_models.py (keras-hub's and a plain Keras one), equal to the reference's maps:
the clone's, or for keras-hub's ViT, whose layers do not rebuild from their config, the
patched model's (the two strategies agree on the plain ViT).

Each model is built once, with one reference for all three rules; the plain rule's map
shows that the guided and deconvnet maps differ from the gradient, so that each
engine comparison can fail.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import keras
import numpy as np
import pytest

from guidedbp.engine.explainer import Explainer
from tests import vit_models
from tests.activation_reference import RULES, reference_maps
from tests.test_activation_reference import (
    CASE_IDS,
    CASES,
    IMAGE,
    expected_map,
    relative_error,
    two_layer,
)

METHODS = ("guided", "deconvnet")
SIZE = 32  # the smallest input every application below accepts
CLASSES = 5
TARGET = 3


@pytest.fixture(scope="module")
def two_layer_models() -> dict[str, keras.Model]:
    return {case.id: two_layer(case) for case in CASES}


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("method", METHODS)
def test_each_activation_alone_equals_hand_computed_map(two_layer_models, case, method):
    explainer = Explainer(two_layer_models[case.id], method=method, guide="all")
    for target in (0, 1):
        actual = explainer(IMAGE, target=target)
        assert actual.dtype == np.float32 and actual.shape == IMAGE.shape
        assert relative_error(actual, expected_map(case, method, target)) <= 1e-6


# -- models the reference clones -------------------------------------------------------------


def application(name: str, **kwargs) -> keras.Model:
    keras.utils.set_random_seed(0)
    model = getattr(keras.applications, name)(weights=None, input_shape=(SIZE, SIZE, 3),
                                              **kwargs)
    for layer in model.layers:
        # ConvNeXt's LayerScale starts at 1e-6: the blocks, and their GELUs, would not
        # count, and the guided map would equal the plain one.
        if type(layer).__name__ == "LayerScale":
            layer.set_weights([np.full_like(w, 0.5) for w in layer.get_weights()])
    return model


def nested() -> keras.Model:
    """MobileNetV3Small without top inside a functional model, under a Sequential head
    (GELU, then the softmax the reference strips through the nesting)."""
    backbone = application("MobileNetV3Small", include_top=False, pooling="avg")
    keras.utils.set_random_seed(1)
    head = keras.Sequential([keras.layers.Dense(16, activation="gelu"),
                             keras.layers.Dense(CLASSES, activation="softmax")], name="head")
    inputs = keras.Input((SIZE, SIZE, 3))
    return keras.Model(inputs, head(backbone(inputs)), name="nested")


def mixed() -> keras.Model:
    """Every kind of activation the rule covers, as layers and as fused activations."""
    keras.utils.set_random_seed(2)
    inputs = keras.Input((SIZE, SIZE, 3))
    x = keras.layers.Rescaling(1 / 64)(inputs)
    x = keras.layers.Conv2D(8, 3, activation="relu")(x)
    x = keras.layers.ReLU(max_value=4.0, negative_slope=0.1, threshold=0.5)(
        keras.layers.Conv2D(8, 3)(x))
    prelu = keras.layers.PReLU(shared_axes=[1, 2])
    x = prelu(keras.layers.DepthwiseConv2D(3, padding="same")(x))
    x = keras.layers.LeakyReLU(negative_slope=0.3)(x)
    x = keras.layers.ELU(alpha=1.5)(keras.layers.Conv2D(8, 1)(x))
    x = keras.layers.Activation("mish")(x)
    x = keras.layers.Conv2D(8, 3, activation="hard_swish")(x)
    gate = keras.layers.Conv2D(8, 1, activation="sigmoid")(x)
    x = keras.layers.Multiply()([x, gate])
    x = keras.layers.Conv2D(8, 3, activation="selu")(keras.layers.MaxPooling2D()(x))
    x = keras.layers.Activation("gelu")(keras.layers.BatchNormalization()(x))
    x = keras.layers.Conv2D(8, 1, activation="relu6")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    x = keras.layers.Dense(8, activation="softsign")(x)
    x = keras.layers.Dense(8, activation="tanh")(keras.layers.Dense(8, activation="softplus")(x))
    x = keras.layers.Dense(8, activation="silu")(keras.layers.Dense(8, activation="elu")(x))
    outputs = keras.layers.Dense(CLASSES, activation="softmax")(x)
    model = keras.Model(inputs, outputs, name="mixed")
    prelu.set_weights([np.linspace(-0.5, 0.5, 8, dtype=np.float32).reshape(1, 1, 8)])
    return model


def model_state(model: keras.Model, images: np.ndarray) -> dict[str, object]:
    """What the reference must leave as it was: weights, activations, calls, outputs."""
    layers = model._flatten_layers(include_self=False, recursive=True)
    return {"weights": model.get_weights(),
            "activations": [(layer.name, getattr(layer, "activation", None),
                             getattr(layer, "function", None), vars(layer).get("call"))
                            for layer in layers],
            "outputs": model(images, training=False).numpy()}


@dataclass(frozen=True)
class Subject:
    """A model, its images, and the reference's maps of class ``target`` by rule."""

    model: keras.Model
    images: np.ndarray
    target: int
    maps: dict[str, np.ndarray]
    logits: np.ndarray  # the reference's output
    softmax_head: bool  # whether the model's output is softmax(logits), else the logits
    before: dict[str, object]  # model_state before the references
    after: dict[str, object]  # and after
    seconds: float  # building and the references, for the record


#: name -> (builder, target, softmax head, reference strategy); the mixed.* builders take
#: the ``saved`` fixture.
SUBJECTS = {
    "EfficientNetB0": (lambda: application("EfficientNetB0", classes=CLASSES), TARGET, True,
                       "clone"),
    "EfficientNetV2B0": (lambda: application("EfficientNetV2B0", classes=CLASSES), TARGET, True,
                         "clone"),
    "ConvNeXtTiny": (lambda: application("ConvNeXtTiny", classes=CLASSES), TARGET, True, "clone"),
    "MobileNetV3Small": (lambda: application("MobileNetV3Small", classes=CLASSES), TARGET, True,
                         "clone"),
    "nested": (nested, TARGET, True, "clone"),
    "mixed.keras": (lambda saved: keras.models.load_model(saved["paths"][".keras"]), TARGET,
                    True, "clone"),
    "mixed.h5": (lambda saved: keras.models.load_model(saved["paths"][".h5"]), TARGET, True,
                 "clone"),
    "plain_vit": (vit_models.plain_vit, vit_models.CLASSES - 1, False, "clone"),
    # Its layers do not rebuild from their config: the reference patches the model itself.
    "keras_hub_vit": (vit_models.keras_hub_vit, vit_models.CLASSES - 1, False, "patch"),
}


def _images() -> np.ndarray:
    return np.random.default_rng(0).uniform(0, 255, (2, SIZE, SIZE, 3)).astype(np.float32)


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[str, object]:
    """The mixed model, saved to .keras and .h5; and its reference maps."""
    model = mixed()
    folder = tmp_path_factory.mktemp("saved")
    paths = {}
    for suffix in (".keras", ".h5"):
        paths[suffix] = folder / f"mixed{suffix}"
        model.save(paths[suffix])
    return {"model": model, "paths": paths,
            "maps": reference_maps(model, _images(), TARGET, METHODS).maps}


@pytest.fixture(scope="module")
def subjects(saved) -> Callable[[str], Subject]:
    """Each subject by name, built and its references computed once for the module."""
    built: dict[str, Subject] = {}

    def named(name: str) -> Subject:
        if name not in built:
            started = time.perf_counter()
            build, target, softmax_head, strategy = SUBJECTS[name]
            if name == "keras_hub_vit":
                pytest.importorskip("keras_hub")
            model = build(saved) if name.startswith("mixed") else build()
            images = _images()
            before = model_state(model, images)
            # One reference per model for all three rules (the plain one for the check
            # that the rules change the map), its Rule switched between gradient passes.
            references = reference_maps(model, images, target, strategy=strategy)
            built[name] = Subject(model, images, target, references.maps, references.logits,
                                  softmax_head, before, model_state(model, images),
                                  time.perf_counter() - started)
        return built[name]

    return named


#: Whole applications and keras-hub's ViT: make test-all (the heavy marker); make test keeps
#: the small subjects, every kind of activation among them.
HEAVY_SUBJECTS = ("EfficientNetB0", "EfficientNetV2B0", "ConvNeXtTiny", "keras_hub_vit")


@pytest.fixture(scope="module", params=[
    pytest.param(name, marks=pytest.mark.heavy) if name in HEAVY_SUBJECTS else name
    for name in SUBJECTS])
def subject(request, subjects) -> Subject:
    return subjects(request.param)


def test_subject_reference_differs_from_plain_gradient(subject):
    plain = subject.maps["plain"]
    assert np.isfinite(plain).all() and np.abs(plain).max() > 0
    for rule in METHODS:
        assert np.isfinite(subject.maps[rule]).all() and np.abs(subject.maps[rule]).max() > 0
        assert relative_error(subject.maps[rule], plain) > 0.05, rule
    assert relative_error(subject.maps["guided"], subject.maps["deconvnet"]) > 0.05


def test_subject_reference_outputs_the_logits(subject):
    outputs = subject.before["outputs"]
    logits = keras.ops.softmax(subject.logits).numpy() if subject.softmax_head else subject.logits
    np.testing.assert_allclose(logits, outputs, rtol=1e-5, atol=1e-7)


def test_subject_reference_leaves_the_model_unchanged(subject):
    before, after = subject.before, subject.after
    assert len(before["weights"]) == len(after["weights"])
    for old, new in zip(before["weights"], after["weights"]):
        np.testing.assert_array_equal(old, new)
    assert before["activations"] == after["activations"]
    np.testing.assert_array_equal(before["outputs"], after["outputs"])


def test_engine_equals_reference(subject):
    # Both rules from one explainer: one forward pass, one backward pass per rule.
    explainer = Explainer(subject.model, method=METHODS, guide="all")
    explanation = explainer.explain(subject.images, target=subject.target)
    for method in METHODS:
        actual = explanation.by_method[method]
        assert actual.dtype == np.float32 and actual.shape == subject.images.shape
        assert relative_error(actual, subject.maps[method]) <= 1e-4, method


@pytest.mark.parametrize("suffix", [".keras", ".h5"])
def test_reloaded_model_has_the_original_reference(saved, subjects, suffix):
    reloaded = subjects(f"mixed{suffix}")  # its references, from the reloaded model
    for rule in METHODS:
        np.testing.assert_allclose(reloaded.maps[rule], saved["maps"][rule],
                                   rtol=1e-6, atol=1e-7)


def test_both_strategies_agree_on_the_plain_vit(subjects):
    # The clone (checked against hand values and the engine) vouches for the patching,
    # which alone reaches keras-hub's ViT.
    vit = subjects("plain_vit")
    patched = reference_maps(vit.model, vit.images, vit.target, strategy="patch")
    for rule in RULES:
        np.testing.assert_allclose(patched.maps[rule], vit.maps[rule], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(patched.logits, vit.logits, rtol=1e-6, atol=1e-6)
