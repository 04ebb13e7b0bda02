"""Engine behaviour: coverage of ReLU forms, the report, tracing, safety of the caller's model."""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from guidedbp import Explainer, NoReluWarning
from guidedbp.engine.reference import reference_saliency

from .models import GRADIENT_METHODS, X12, mlp


def assert_close(actual, expected, rtol=1e-5):
    scale = max(float(np.abs(expected).max()), 1e-30)
    assert float(np.abs(actual - expected).max()) / scale <= rtol


@keras.saving.register_keras_serializable("guidedbp_tests")
class TfNnRelu(keras.layers.Layer):
    """A custom layer calling tf.nn.relu inside call()."""

    def call(self, inputs):
        return tf.nn.relu(inputs) * 1.5


class Exploding(keras.layers.Layer):
    """Raises inside call() while armed: an error in the middle of a trace."""

    armed = False

    def call(self, inputs):
        if Exploding.armed:
            raise RuntimeError("boom")
        return inputs


def every_relu_form_model() -> keras.Model:
    """Fused relu, Activation("relu"), ReLU(), ReLU(6), a nested base model, tf.nn.relu."""
    keras.utils.set_random_seed(1)
    base_in = keras.Input((8, 8, 4))
    base_out = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(base_in)
    base = keras.Model(base_in, keras.layers.ReLU(max_value=6.0)(base_out), name="base")
    inputs = keras.Input((8, 8, 3))
    x = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(inputs)  # Relu 1
    x = keras.layers.Conv2D(4, 3, padding="same")(x)
    x = keras.layers.Activation("relu")(x)  # Relu 2
    y = base(x)  # Relu 3, Relu6 1
    z = keras.layers.Conv2D(4, 1)(x)
    z = keras.layers.ReLU()(z)  # Relu 4
    x = keras.layers.Add()([y, z])
    x = TfNnRelu()(x)  # Relu 5
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(5, activation="softmax")(x)
    return keras.Model(inputs, outputs)


@pytest.fixture(scope="module")
def relu_model():
    return every_relu_form_model()


@pytest.fixture(scope="module")
def images():
    return np.random.default_rng(0).normal(size=(3, 8, 8, 3)).astype(np.float32)


def test_every_relu_form_is_guided(relu_model, images):
    explainer = Explainer(relu_model, "guided")
    maps = explainer(images)
    assert explainer.report.guided_activations == {"relu": 5, "relu6": 1}
    assert explainer.report.head == "softmax"
    assert_close(maps, reference_saliency(relu_model, images))
    vanilla = Explainer(relu_model, "vanilla")(images)
    assert np.abs(maps - vanilla).max() > 1e-3 * np.abs(vanilla).max()


def test_deconvnet_matches_reference(relu_model, images):
    assert_close(Explainer(relu_model, "deconvnet")(images, 2),
                 reference_saliency(relu_model, images, 2, "deconvnet"))


def _other_activations_model() -> keras.Model:
    keras.utils.set_random_seed(2)
    inputs = keras.Input((6, 6, 2))
    x = keras.layers.Conv2D(4, 3, padding="same")(inputs)
    x = keras.layers.LeakyReLU(0.1)(x)
    x = keras.layers.Conv2D(4, 3, padding="same", activation="elu")(x)
    x = keras.layers.Conv2D(4, 3, padding="same", activation="gelu")(x)
    x = keras.layers.Conv2D(4, 3, padding="same", activation="tanh")(x)
    x = keras.layers.Conv2D(4, 3, padding="same", activation="sigmoid")(x)
    x = keras.layers.PReLU()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(3)(x))


OTHER_ACTIVATIONS = {"leaky_relu": 1, "elu": 1, "gelu": 1, "tanh": 1, "sigmoid": 1, "prelu": 1}


def test_other_activations_keep_plain_gradient_in_the_relu_scope():
    model = _other_activations_model()
    images = np.random.default_rng(1).normal(size=(2, 6, 6, 2)).astype(np.float32)
    guided = Explainer(model, "guided", guide="relu")
    with pytest.warns(NoReluWarning, match="equals the plain gradient"):
        guided_maps = guided(images)
    np.testing.assert_array_equal(guided_maps, Explainer(model, "vanilla")(images))
    assert guided.report.guided_activations == {}
    # Keras' GELU is exact by default (an Erfc op); "tanh" here is the tanh layer alone.
    assert guided.report.plain_activations == OTHER_ACTIVATIONS
    assert guided.report.guide == "relu"


def test_other_activations_are_guided_by_default():
    model = _other_activations_model()
    images = np.random.default_rng(1).normal(size=(2, 6, 6, 2)).astype(np.float32)
    guided = Explainer(model, "guided")
    guided_maps = guided(images)
    vanilla_maps = Explainer(model, "vanilla")(images)
    assert np.abs(guided_maps - vanilla_maps).max() > 0.1 * np.abs(vanilla_maps).max()
    assert guided.report.guided_activations == OTHER_ACTIVATIONS
    assert (guided.report.plain_activations, guided.report.guide) == ({}, "all")
    # Deconvnet keeps the ReLU family's scope unless told: here it equals the gradient.
    deconvnet = Explainer(model, "deconvnet")
    with pytest.warns(NoReluWarning):
        np.testing.assert_array_equal(deconvnet(images), vanilla_maps)
    assert deconvnet.report.guide == "relu"


def test_swish_and_approximate_gelu_are_reported():
    inputs = keras.Input((4, 4, 1))
    x = keras.layers.Dense(3, activation="swish")(inputs)
    x = keras.layers.Activation(lambda t: keras.activations.gelu(t, approximate=True))(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    model = keras.Model(inputs, keras.layers.Dense(2, activation="relu")(x))
    every = Explainer(model)
    every(np.ones((1, 4, 4, 1), np.float32))
    # swish is x * sigmoid(x): one silu, not a sigmoid; the tanh GELU is one gelu.
    assert every.report.guided_activations == {"silu": 1, "gelu": 1, "relu": 1}
    assert every.report.plain_activations == {}
    relu_only = Explainer(model, guide="relu")
    relu_only(np.ones((1, 4, 4, 1), np.float32))
    assert relu_only.report.guided_activations == {"relu": 1}
    assert relu_only.report.plain_activations == {"silu": 1, "gelu": 1}


def test_no_retrace_over_batch_sizes(relu_model):
    explainer = Explainer(relu_model, "guided", batch_size=4)
    rng = np.random.default_rng(3)
    for size in (1, 2, 3, 4, 5, 8, 9, 1, 2, 7):
        maps = explainer(rng.normal(size=(size, 8, 8, 3)).astype(np.float32))
        assert maps.shape == (size, 8, 8, 3) and maps.dtype == np.float32
    assert explainer.trace_count == 1


def test_batches_give_the_same_maps_as_one_pass(relu_model, images):
    whole = Explainer(relu_model, batch_size=32)(images)
    np.testing.assert_allclose(Explainer(relu_model, batch_size=1)(images), whole,
                               rtol=1e-5, atol=1e-7)


def snapshot(model):
    return {
        "weights": [w.copy() for w in model.get_weights()],
        "layers": [
            (layer.name, type(layer), getattr(layer, "activation", None), layer.call.__func__,
             sorted(vars(layer)))
            for layer in model._flatten_layers(include_self=True, recursive=True)
        ],
    }


def assert_same(before, after):
    assert before["layers"] == after["layers"]
    for a, b in zip(before["weights"], after["weights"]):
        np.testing.assert_array_equal(a, b)


def plain_relu_gradient():
    """tf's own Relu gradient outside guidedbp, in a graph: must stay plain."""

    @tf.function
    def grad(x):
        return tf.gradients(tf.reduce_sum(tf.nn.relu(x) * -1.0), x)[0]

    return grad(tf.constant([1.0, -1.0])).numpy()


def test_callers_model_is_unchanged(relu_model, images):
    before = snapshot(relu_model)
    for method in GRADIENT_METHODS:
        Explainer(relu_model, method)(images)
    assert_same(before, snapshot(relu_model))
    # The model still computes what it did, with plain gradients.
    with tf.GradientTape() as tape:
        x = tf.constant(images)
        tape.watch(x)
        score = tf.reduce_sum(relu_model(x)[:, 0])
    eager = tape.gradient(score, x).numpy()
    np.testing.assert_allclose(eager, _plain_probability_gradient(relu_model, images),
                               rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(plain_relu_gradient(), [-1.0, 0.0])


def _plain_probability_gradient(model, images):
    @tf.function
    def grad(x):
        return tf.gradients(tf.reduce_sum(model(x)[:, 0]), x)[0]

    return grad(tf.constant(images)).numpy()


def test_model_unchanged_after_error_mid_trace():
    model = keras.Sequential([keras.Input((1, 1, 2)), Exploding(), mlp()])
    before = snapshot(model)
    Exploding.armed = True
    try:
        with pytest.raises(RuntimeError, match="boom"):
            Explainer(model, "guided")(X12, 0)
    finally:
        Exploding.armed = False
    assert_same(before, snapshot(model))
    np.testing.assert_array_equal(plain_relu_gradient(), [-1.0, 0.0])
    # The same model explains correctly afterwards (hand value from test_engine_exact).
    np.testing.assert_array_equal(Explainer(model, "guided")(X12, 0).ravel(), [1, 1])


def test_mixed_precision_returns_float32():
    keras.utils.set_random_seed(4)
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        inputs = keras.Input((8, 8, 3))
        x = keras.layers.Conv2D(4, 3, activation="relu")(inputs)
        x = keras.layers.GlobalAveragePooling2D()(x)
        outputs = keras.layers.Dense(3, activation="softmax", dtype="float32")(x)
        model = keras.Model(inputs, outputs)
    finally:
        keras.config.set_dtype_policy(previous)
    images = np.random.default_rng(5).normal(size=(2, 8, 8, 3)).astype(np.float32)
    explainer = Explainer(model)
    explanation = explainer.explain(images)
    assert explanation.maps.dtype == np.float32 and explanation.maps.shape == images.shape
    assert explanation.probabilities.dtype == np.float32
    assert explainer.report.guided_activations == {"relu": 1} and explainer.report.head == "softmax"
    assert_close(explanation.maps, reference_saliency(model, images), rtol=1e-2)


def test_report_before_any_call_traces_once(relu_model):
    explainer = Explainer(relu_model)
    assert explainer.report.guided_activations == {"relu": 5, "relu6": 1}
    assert explainer.report.num_classes == 5
    explainer(np.zeros((2, 8, 8, 3), np.float32))
    assert explainer.trace_count == 1
    assert "guided activations: relu 5, relu6 1 (--guide all)" in str(explainer.report)
    assert explainer.report.as_dict()["head_bypassed"] == "softmax"


def test_free_spatial_dims_take_any_size():
    keras.utils.set_random_seed(6)
    inputs = keras.Input((None, None, 3))
    x = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(3)(keras.layers.GlobalMaxPooling2D()(x)))
    explainer = Explainer(model)
    for size in (5, 9, 16):
        images = np.random.default_rng(size).normal(size=(1, size, size, 3)).astype(np.float32)
        assert_close(explainer(images), reference_saliency(model, images))
    assert explainer.trace_count == 1


@pytest.mark.parametrize(
    ("images", "target", "message"),
    [
        (np.zeros((1, 2), np.float32), None, r"\(N, H, W, C\)"),
        (np.zeros((1, 1, 2), np.float32), None, r"images\[None\]"),
        (np.zeros((0, 1, 1, 2), np.float32), None, "empty"),
        (np.zeros((1, 2, 2, 2), np.float32), None, "HxWxC 1x1x2, got 2x2x2"),
        (np.array([[[["a", "b"]]]]), None, "numeric"),
        (np.zeros((1, 1, 1, 2), np.float32), 2, "out of range.*2 classes"),
        (np.zeros((1, 1, 1, 2), np.float32), -1, ">= 0"),
        (np.zeros((2, 1, 1, 2), np.float32), [0], "1 classes for 2 images"),
        (np.zeros((1, 1, 1, 2), np.float32), "cat", "no class names"),
            (np.zeros((1, 1, 1, 2), np.float32), 1.5, "sequence of ints"),
    ],
)
def test_bad_arguments_raise_value_error(images, target, message):
    with pytest.raises(ValueError, match=message):
        Explainer(mlp())(images, target)


def test_bad_method_and_batch_size():
    with pytest.raises(ValueError, match="'smooth' is not one of guided, vanilla, deconvnet"):
        Explainer(mlp(), "smooth")
    with pytest.raises(ValueError, match="batch_size=0"):
        Explainer(mlp(), batch_size=0)


def test_no_warning_for_relu_models(relu_model, images):
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoReluWarning)
        Explainer(relu_model)(images[:1])
