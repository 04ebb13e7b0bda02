"""Tiny hand-computable models shared by the engine tests.

Each builder returns a fresh ``keras.Model`` with fixed weights; the expected
maps for them are worked out by hand in the tests that use them.
"""

from __future__ import annotations

import keras
import numpy as np


def _set(layer, *arrays):
    layer.set_weights([np.asarray(a, np.float32) for a in arrays])


def mlp(head: str | None = None) -> keras.Model:
    """x (1x1x2 image) -> Dense(3, relu) -> Dense(2, relu) -> Dense(2[, head]).

    W1 = [[1, -1, 1], [1, 1, -1]], W2 = [[1, 1], [-1, 2], [2, 2]],
    W3 = [[1, 0.5], [-1, 0.5]], no biases.
    """
    inputs = keras.Input((1, 1, 2))
    flat = keras.layers.Flatten()(inputs)
    hidden1 = keras.layers.Dense(3, activation="relu", use_bias=False)
    hidden2 = keras.layers.Dense(2, activation="relu", use_bias=False)
    top = keras.layers.Dense(2, activation=head, use_bias=False)
    model = keras.Model(inputs, top(hidden2(hidden1(flat))), name="mlp")
    _set(hidden1, [[1, -1, 1], [1, 1, -1]])
    _set(hidden2, [[1, 1], [-1, 2], [2, 2]])
    _set(top, [[1, 0.5], [-1, 0.5]])
    return model


def cnn() -> keras.Model:
    """3x3x1 image -> Conv2D(1, 2x2, valid, bias -2, relu) -> Flatten -> Dense(2).

    kernel [[1, -1], [1, 1]], dense W = [[1, 0], [-1, 0], [2, 0], [1, 1]].
    """
    inputs = keras.Input((3, 3, 1))
    conv = keras.layers.Conv2D(1, 2, activation="relu")
    dense = keras.layers.Dense(2, use_bias=False)
    model = keras.Model(inputs, dense(keras.layers.Flatten()(conv(inputs))), name="cnn")
    _set(conv, np.array([[1, -1], [1, 1]]).reshape(2, 2, 1, 1), [-2])
    _set(dense, [[1, 0], [-1, 0], [2, 0], [1, 1]])
    return model


def relu6_mlp(activation) -> keras.Model:
    """x (1x1x2) -> Dense(3, no activation) -> ``activation`` layer -> Dense(1 class... 2).

    W1 = [[4, -1, 1], [2, 1, -1]]; classes: column 0 = [1, -2, 3], column 1 = [1, 2, 3].
    """
    inputs = keras.Input((1, 1, 2))
    hidden = keras.layers.Dense(3, use_bias=False)
    top = keras.layers.Dense(2, use_bias=False)
    model = keras.Model(inputs, top(activation(hidden(keras.layers.Flatten()(inputs)))))
    _set(hidden, [[4, -1, 1], [2, 1, -1]])
    _set(top, [[1, 1], [-2, 2], [3, 3]])
    return model


def prelu_mlp() -> keras.Model:
    """x (1x1x2) -> Dense(2) -> PReLU(alpha 0.25) -> Dense(2).

    W1 = [[1, -2], [1, 0]], W2 column 0 = [-1, 2].
    """
    inputs = keras.Input((1, 1, 2))
    hidden = keras.layers.Dense(2, use_bias=False)
    prelu = keras.layers.PReLU()
    top = keras.layers.Dense(2, use_bias=False)
    model = keras.Model(inputs, top(prelu(hidden(keras.layers.Flatten()(inputs)))))
    _set(hidden, [[1, -2], [1, 0]])
    _set(prelu, [0.25, 0.25])
    _set(top, [[-1, 0], [2, 0]])
    return model


def sigmoid_head() -> keras.Model:
    """x (1x1x2) -> Dense(2, relu) W1 = [[1, -1], [1, 1]] -> Dense(1, sigmoid) w = [1, -2]."""
    inputs = keras.Input((1, 1, 2))
    hidden = keras.layers.Dense(2, activation="relu", use_bias=False)
    top = keras.layers.Dense(1, activation="sigmoid", use_bias=False)
    model = keras.Model(inputs, top(hidden(keras.layers.Flatten()(inputs))))
    _set(hidden, [[1, -1], [1, 1]])
    _set(top, [[1], [-2]])
    return model


X12 = np.array([[[[1.0, 2.0]]]], np.float32)  # the input x = (1, 2) of the MLPs
X3x3 = np.array([[1, 2, 0], [3, 1, 2], [0, 1, 1]], np.float32).reshape(1, 3, 3, 1)

#: The three backprop methods that differ only in their ReLU gradient.
GRADIENT_METHODS = ("guided", "vanilla", "deconvnet")


def cam_cnn(nested: bool = False) -> keras.Model:
    """4x4x1 -> Conv2D(2, 1x1, relu; w = [1, -1], b = [0, 2]) "conv" -> MaxPool 2x2 "pool"
    -> GlobalAveragePooling -> Dense(2) with class 0 = [2, -2], class 1 = [-1, 1].

    With ``nested``, conv and pool sit inside a sub-model "features".
    """
    conv = keras.layers.Conv2D(2, 1, activation="relu", name="conv")
    pool = keras.layers.MaxPooling2D(2, name="pool")
    dense = keras.layers.Dense(2, use_bias=False, name="dense")
    inputs = keras.Input((4, 4, 1))
    if nested:
        inner_in = keras.Input((4, 4, 1))
        features = keras.Model(inner_in, pool(conv(inner_in)), name="features")
        x = features(inputs)
    else:
        x = pool(conv(inputs))
    outputs = dense(keras.layers.GlobalAveragePooling2D()(x))
    model = keras.Model(inputs, outputs, name="cam_cnn")
    _set(conv, np.array([1, -1]).reshape(1, 1, 1, 2), [0, 2])
    _set(dense, [[2, -1], [-2, 1]])
    return model


#: Distinct dyadic values, so no max-pool ties and exact float arithmetic.
X4x4 = np.array(
    [
        [1.0, 2.0, 0.0, 1.5],
        [0.5, 3.0, 0.25, 0.75],
        [2.5, 0.75, 0.125, 4.0],
        [1.25, 1.75, 3.5, 0.375],
    ],
    np.float32,
).reshape(1, 4, 4, 1)


# -- models the CLI tests save as files ------------------------------------------------------


def colour_cnn(shape) -> keras.Model:
    """``shape`` -> Rescaling(1/255) -> Conv2D(4, 3, relu) -> global average -> Dense(3, softmax).

    Seeded weights, plus a pull of filter k and class k towards colour channel k,
    so that images of different colour balance rank the classes differently.
    """
    keras.utils.set_random_seed(1234)
    conv = keras.layers.Conv2D(4, 3, activation="relu")
    dense = keras.layers.Dense(3, activation="softmax")
    model = keras.Sequential([keras.Input(shape), keras.layers.Rescaling(1 / 255), conv,
                              keras.layers.GlobalAveragePooling2D(), dense])
    kernel, bias = conv.get_weights()
    for channel in range(3):
        kernel[:, :, channel, channel] += 0.3
    conv.set_weights([kernel, bias])
    weights, bias = dense.get_weights()
    weights[:3] += 8 * (np.eye(3) - 1 / 3)
    dense.set_weights([weights, bias])
    return model


def tiny_cnn(seed: int, activation: str = "relu") -> keras.Model:
    """16x16x3 -> Rescaling(1/255) -> Conv2D(6, 3) -> MaxPool -> Conv2D(8, 3) -> global average
    -> Dense(3, softmax); ``activation`` in both convolutions, weights seeded by ``seed``."""
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((16, 16, 3))
    x = keras.layers.Rescaling(1 / 255)(inputs)
    x = keras.layers.Conv2D(6, 3, activation=activation)(x)
    x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.Conv2D(8, 3, activation=activation)(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(3, activation="softmax")(x))


def shapes_cnn(filters: int) -> keras.Model:
    """16x16 RGB -> Rescaling(1/255) -> Conv2D(``filters``, 3, relu) -> global average ->
    Dense(6, softmax), seeded with 7: the six classes of the synthetic shapes and a conv
    layer for the class activation maps, for ``guidedbp evaluate`` runs."""
    keras.utils.set_random_seed(7)
    inputs = keras.Input((16, 16, 3))
    x = keras.layers.Rescaling(1 / 255)(inputs)
    x = keras.layers.Conv2D(filters, 3, activation="relu")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(6, activation="softmax")(x))


def corner_cnn() -> keras.Model:
    """8x8x1 -> Conv2D(1, 1x1, relu, w=1) -> Flatten -> Dense(2): class 0 sums the top-left
    2x2 block, class 1 is half the sum of the bottom-right 2x2 block.

    On a constant image of 100, logits are [400, 200]: class 0 is the top-1, and its
    guided (and vanilla) map is 1 on the top-left block, 0 elsewhere.
    """
    inputs = keras.Input((8, 8, 1))
    conv = keras.layers.Conv2D(1, 1, activation="relu")
    dense = keras.layers.Dense(2, use_bias=False)
    model = keras.Model(inputs, dense(keras.layers.Flatten()(conv(inputs))))
    conv.set_weights([np.ones((1, 1, 1, 1), np.float32), np.zeros(1, np.float32)])
    weights = np.zeros((8, 8, 2), np.float32)
    weights[:2, :2, 0] = 1.0
    weights[6:, 6:, 1] = 0.5
    dense.set_weights([weights.reshape(64, 2)])
    return model


def mixed_relu_cnn() -> keras.Model:
    """8x8x3, unseeded weights: two Relu (a fused activation and a ReLU layer), one Relu6,
    a LeakyReLU, a softmax head over 3 classes."""
    inputs = keras.Input((8, 8, 3))
    x = keras.layers.Conv2D(4, 3, activation="relu")(inputs)
    x = keras.layers.ReLU()(keras.layers.Conv2D(4, 3)(x))
    x = keras.layers.ReLU(max_value=6.0)(keras.layers.Conv2D(4, 1)(x))
    x = keras.layers.LeakyReLU(negative_slope=0.1)(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(3, activation="softmax")(x))


def gelu_cnn(activation: str = "gelu") -> keras.Model:
    """Free spatial size, 1 channel, unseeded weights: GELU only (or ``activation``), 2
    logits (no head)."""
    inputs = keras.Input((None, None, 1))
    x = keras.layers.Conv2D(4, 3, activation=activation)(inputs)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(2)(x))


def sigmoid_cnn() -> keras.Model:
    """6x6x1, unseeded weights: rescales inside; one sigmoid unit (two classes: z and -z)."""
    inputs = keras.Input((6, 6, 1))
    x = keras.layers.Rescaling(1 / 255)(inputs)
    x = keras.layers.Flatten()(keras.layers.Conv2D(2, 3, activation="relu")(x))
    outputs = keras.layers.Dense(1, activation="sigmoid")(x)
    return keras.Model(inputs, outputs)


def swish_cnn(activations: tuple[str, str] = ("swish", "gelu")) -> keras.Model:
    """16x16x3, EfficientNet-like: rescales inside, then two convolutions with
    ``activations`` (default swish and GELU: no ReLU-family op), 3 logits; weights seeded
    from a numpy generator (the global Keras seed is not touched)."""
    inputs = keras.Input((16, 16, 3))
    x = keras.layers.Rescaling(1 / 255)(inputs)
    first = keras.layers.Conv2D(4, 3, activation=activations[0])
    second = keras.layers.Conv2D(4, 3, activation=activations[1])
    top = keras.layers.Dense(3)
    x = keras.layers.GlobalAveragePooling2D()(second(first(x)))
    model = keras.Model(inputs, top(x), name="swish_cnn")
    rng = np.random.default_rng(19)
    for layer in (first, second, top):
        _set(layer, *[rng.normal(0.0, 0.5, weight.shape) for weight in layer.get_weights()])
    return model


def scaled_linear(scale: float) -> keras.Model:
    """x (4x4x1) -> Rescaling(``scale``) -> Flatten -> Dense(2), class 0 the sum of the
    rescaled pixels and class 1 minus it (no biases): the input gradient of class 0 is
    ``scale`` everywhere."""
    inputs = keras.Input((4, 4, 1))
    top = keras.layers.Dense(2, use_bias=False)
    x = keras.layers.Flatten()(keras.layers.Rescaling(scale)(inputs))
    model = keras.Model(inputs, top(x), name="scaled_linear")
    _set(top, np.stack([np.ones(16), -np.ones(16)], axis=1))
    return model
