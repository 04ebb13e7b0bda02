"""The engine against the literal segment-by-segment grad_ys chain.

Random small models with skip connections, concatenations and fan-out
(hypothesis), and Keras applications built with ``weights=None``.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from guidedbp import Explainer
from guidedbp.engine.reference import reference_saliency

ACTIVATIONS = ("relu", "relu6", None)
STEPS = st.lists(
    st.tuples(
        st.sampled_from(("conv", "relu_layer", "relu6_layer", "add", "concat", "tf_relu", "dense")),
        st.integers(0, 1000),  # picks the input tensor(s)
        st.sampled_from(ACTIVATIONS),
        st.integers(1, 4),  # channels
    ),
    min_size=2,
    max_size=7,
)


def relative_error(actual, expected):
    scale = float(np.abs(expected).max())
    if scale == 0.0:
        return float(np.abs(actual).max())
    return float(np.abs(actual - expected).max()) / scale


def build(steps, seed, classes=3, head="softmax"):
    """A random functional DAG over 5x5 maps; each tensor may feed several layers."""
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((5, 5, 2))
    pool = [inputs]
    for kind, pick, activation, channels in steps:
        a = pool[pick % len(pool)]
        b = pool[(pick // 7) % len(pool)]
        if kind == "conv":
            out = keras.layers.Conv2D(channels, 3, padding="same", activation=activation)(a)
        elif kind == "dense":  # a 1x1 conv by another name
            out = keras.layers.Dense(channels, activation=activation)(a)
        elif kind == "relu_layer":
            out = keras.layers.ReLU()(a)
        elif kind == "relu6_layer":
            out = keras.layers.ReLU(max_value=6.0)(keras.layers.Rescaling(4.0)(a))
        elif kind == "tf_relu":
            out = keras.layers.Lambda(tf.nn.relu)(a)
        elif kind == "add":
            if a.shape[-1] != b.shape[-1]:
                b = keras.layers.Conv2D(a.shape[-1], 1)(b)
            out = keras.layers.Add()([a, b])
        else:
            out = keras.layers.Concatenate()([a, b])
        pool.append(out)
    # Every dangling tensor reaches the output, so fan-out matters everywhere.
    tails = [keras.layers.GlobalAveragePooling2D()(t) for t in pool[1:]]
    merged = tails[0] if len(tails) == 1 else keras.layers.Concatenate()(tails)
    hidden = keras.layers.Dense(6, activation="relu")(merged)
    return keras.Model(inputs, keras.layers.Dense(classes, activation=head)(hidden))


@pytest.mark.heavy  # 25 random networks: make test-all
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=STEPS, seed=st.integers(0, 2**16), method=st.sampled_from(("guided", "deconvnet")))
def test_engine_equals_literal_chain_on_random_dags(steps, seed, method):
    model = build(steps, seed)
    images = np.random.default_rng(seed).normal(size=(2, 5, 5, 2)).astype(np.float32)
    engine = Explainer(model, method).explain(images)
    expected = reference_saliency(model, images, engine.targets, method)
    assert relative_error(engine.maps, expected) <= 1e-5


def test_random_dag_guided_differs_from_vanilla():
    steps = [("conv", 0, "relu", 4), ("conv", 1, "relu", 4), ("add", 2 + 7 * 1, None, 4),
             ("conv", 3, "relu6", 3), ("concat", 4 + 7 * 2, None, 1)]
    model = build(steps, 7)
    images = np.random.default_rng(7).normal(size=(2, 5, 5, 2)).astype(np.float32)
    guided = Explainer(model, "guided")(images, 0)
    vanilla = Explainer(model, "vanilla")(images, 0)
    np.testing.assert_allclose(vanilla, reference_saliency(model, images, 0, "vanilla"),
                               rtol=1e-5, atol=1e-7)
    assert relative_error(guided, vanilla) > 0.05


@pytest.mark.parametrize(
    ("name", "size", "guided_activations"),
    [
        # MobileNetV2's ReLU6 in make test; the others in make test-all (the heavy marker).
        pytest.param("ResNet50", 32, {"relu": 49}, marks=pytest.mark.heavy),
        pytest.param("VGG16", 32, {"relu": 15}, marks=pytest.mark.heavy),
        ("MobileNetV2", 32, {"relu6": 35}),
        pytest.param("DenseNet121", 32, {"relu": 121}, marks=pytest.mark.heavy),
    ],
)
def test_keras_applications_equal_reference(name, size, guided_activations):
    keras.utils.set_random_seed(0)
    model = getattr(keras.applications, name)(weights=None, input_shape=(size, size, 3))
    images = np.random.default_rng(0).normal(size=(2, size, size, 3)).astype(np.float32)
    explainer = Explainer(model, "guided")
    explanation = explainer.explain(images)
    assert explainer.report.guided_activations == guided_activations
    assert explainer.report.head == "softmax" and explainer.report.num_classes == 1000
    expected = reference_saliency(model, images, explanation.targets)
    assert relative_error(explanation.maps, expected) <= 1e-5
    assert np.abs(explanation.maps).max() > 0
