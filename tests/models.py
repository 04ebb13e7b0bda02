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
    """x (1x1x2) -> Dense(2) -> PReLU(alpha 0.25) -> Dense(2): W1 = [[1, -2], [1, 0]], W2 col 0 = [-1, 2]."""
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
    [[1.0, 2.0, 0.0, 1.5], [0.5, 3.0, 0.25, 0.75], [2.5, 0.75, 0.125, 4.0], [1.25, 1.75, 3.5, 0.375]],
    np.float32,
).reshape(1, 4, 4, 1)
