"""SavedModels load without a constant copy of their weights, and explain exactly as before.

:func:`guidedbp.models.inlining.inline_signature` hands TensorFlow's variable-to-constant
converter a stand-in for each large variable, and feeds the variable's value where the
constant would have been. These tests pin what that must not change: the graph is
TensorFlow's frozen graph node for node (less the weights' constants), the maps are
bit-identical to the Keras model's and to those of the frozen graph, and a large
variable inside a ``tf.while_loop`` body or a ``tf.cond`` branch is fed too. And what
it must change: loading makes no copy of a weight (measured with ``tracemalloc``, which
sees numpy arrays and Python bytes, where the converter's constants were made).
"""

import gc
import tracemalloc

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

from guidedbp import Explainer, load_model
from guidedbp.models.frozen import FrozenGraph

IMAGES = np.random.default_rng(0).uniform(-1, 1, (3, 8, 8, 3)).astype(np.float32)
LIFT = FrozenGraph.LIFT_ELEMENTS


def residual_cnn() -> keras.Model:
    """Small and large kernels (3x3x3x16 = 432 elements is folded, 3x3x16x16 = 2,304
    is fed), two convolutions at the same depth (their order in the graph decides which
    a randomization check re-draws first) and batch statistics."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((8, 8, 3))
    first = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(inputs)
    wide = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(first)
    narrow = keras.layers.Conv2D(16, 1, activation="relu")(first)
    x = keras.layers.BatchNormalization()(keras.layers.Add()([wide, narrow]))
    x = keras.layers.Dense(64, activation="relu")(keras.layers.Flatten()(x))
    return keras.Model(inputs, keras.layers.Dense(5, activation="softmax")(x))


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    model = residual_cnn()
    folder = tmp_path_factory.mktemp("inlining") / "exported"
    model.export(str(folder))  # no verbose=: Keras 3.4 (the floor) has none
    return model, folder


def const_elements(graph_def) -> list[int]:
    """The element count of every Const node, in the graph and in its functions."""
    nodes = [*graph_def.node, *(n for f in graph_def.library.function for n in f.node_def)]
    return [int(np.prod([d.size for d in node.attr["value"].tensor.tensor_shape.dim]))
            for node in nodes if node.op == "Const"]


def old_frozen_graph(folder, signature: str = "serving_default"):
    """The signature frozen as guidedbp froze it before: every variable a ``Const``."""
    saved = tf.saved_model.load(str(folder))
    frozen = convert_variables_to_constants_v2(saved.signatures[signature],
                                               lower_control_flow=False)
    return frozen.graph.as_graph_def()


def test_large_variables_are_fed_their_values_not_held_as_constants(exported):
    model, folder = exported
    graph = load_model(folder).model
    large = [w.numpy() for w in model.weights if w.numpy().size > LIFT]
    assert len(large) == 2  # the 3x3x16x16 kernel and the dense kernel
    # Each large variable is a placeholder fed its exact value...
    assert sorted(tuple(value.shape) for value in graph.weights.values()) == sorted(
        w.shape for w in large)
    for value in graph.weights.values():
        assert any(np.array_equal(value.numpy(), w) for w in large)
    placeholders = {node.name for node in graph.graph_def.node if node.op == "Placeholder"}
    assert set(graph.weights) <= placeholders
    # ...and the graph holds no constant of a weight's size (not even a one-value stand-in
    # of a large shape, which would compute with zeros).
    elements = const_elements(graph.graph_def)
    assert max(elements) <= LIFT
    weight_elements = sum(w.size for w in large)
    assert sum(elements) < weight_elements / 20


def test_loading_makes_no_copy_of_a_weight(tmp_path):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((8, 8, 3))
    x = keras.layers.Flatten()(keras.layers.Conv2D(16, 3, activation="relu")(inputs))
    x = keras.layers.Dense(2048, activation="relu")(x)  # 576 x 2048: 4.5 MiB
    x = keras.layers.Dense(1024, activation="relu")(x)  # 2048 x 1024: 8 MiB
    model = keras.Model(inputs, keras.layers.Dense(5)(x))
    model.export(str(tmp_path / "exported"))
    weight_bytes = sum(w.numpy().nbytes for w in model.weights)
    assert weight_bytes > 12 * 2**20
    tracemalloc.start()
    try:
        loaded = load_model(tmp_path / "exported")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Freezing made a numpy copy and a serialised copy of every weight (29 MiB here).
    assert peak < weight_bytes / 4, f"loading allocated {peak / 2**20:.1f} MiB"
    np.testing.assert_array_equal(np.asarray(loaded(IMAGES)), model.predict(IMAGES, verbose=0))


@pytest.mark.parametrize("method", ["guided", "vanilla", "deconvnet"])
def test_maps_equal_the_keras_models_exactly(exported, method):
    model, folder = exported
    targets = [0, 3, 4]
    expected = Explainer(model, method)(IMAGES, targets)
    np.testing.assert_array_equal(Explainer(load_model(folder), method)(IMAGES, targets),
                                  expected)


def test_the_graph_is_tensorflows_frozen_graph_less_its_weights(exported):
    _, folder = exported
    graph = load_model(folder).model
    frozen = old_frozen_graph(folder)
    # Node for node, in the same order: a large variable's Const is now its placeholder.
    assert [(node.name, node.op) for node in graph.graph_def.node] == [
        (node.name, "Placeholder" if node.name in graph.weights else node.op)
        for node in frozen.node]
    constants = {node.name: node for node in frozen.node if node.op == "Const"}
    for name, value in graph.weights.items():
        np.testing.assert_array_equal(value.numpy(),
                                      tf.make_ndarray(constants[name].attr["value"].tensor))
    for node in graph.graph_def.node:
        if node.op == "Const":
            assert node.attr["value"] == constants[node.name].attr["value"], node.name
    # The maps of the frozen graph, every weight a constant lifted the old way.
    old = FrozenGraph(frozen, graph.input_name, graph.output_name, graph.inputs[0], "old",
                      output_specs=graph.outputs)
    assert sorted(old.weights) == sorted(graph.weights)
    for method in ("guided", "vanilla"):
        np.testing.assert_array_equal(Explainer(graph, method)(IMAGES, 1),
                                      Explainer(old, method)(IMAGES, 1))


KERNEL = np.random.default_rng(3).normal(size=(3, 3, 12, 12)).astype(np.float32) / 6
STEM = np.random.default_rng(4).normal(size=(3, 3, 3, 12)).astype(np.float32)
DENSE = np.random.default_rng(5).normal(size=(12, 5)).astype(np.float32)


class LoopedKernel(tf.Module):
    """A large kernel (1,296 elements) used in a tf.cond branch and a tf.while_loop body."""

    def __init__(self):
        super().__init__()
        self.stem, self.kernel, self.dense = (tf.Variable(w) for w in (STEM, KERNEL, DENSE))

    @tf.function(input_signature=[tf.TensorSpec((None, 8, 8, 3), tf.float32)])
    def serve(self, images):
        h = tf.nn.relu(tf.nn.conv2d(images, self.stem, 1, "SAME"))
        h = tf.cond(tf.reduce_mean(images) > 0.0,
                    lambda: tf.nn.relu(tf.nn.conv2d(h, self.kernel, 1, "SAME")),
                    lambda: h)

        def body(i, h):
            return i + 1, tf.nn.relu(tf.nn.conv2d(h, self.kernel, 1, "SAME"))

        _, h = tf.while_loop(lambda i, h: i < 2, body, (tf.constant(0), h))
        return {"scores": tf.reduce_mean(h, axis=[1, 2]) @ self.dense}


def test_a_large_variable_in_a_branch_and_a_loop_body_is_fed(tmp_path):
    module = LoopedKernel()
    folder = tmp_path / "looped"
    tf.saved_model.save(module, str(folder), signatures={"serving_default": module.serve})
    bright = IMAGES + 1.0
    expected = module.serve(tf.constant(bright))["scores"].numpy()
    graph = load_model(folder).model
    del module
    gc.collect()  # the loaded SavedModel is gone: its functions must stay callable
    assert [tuple(value.shape) for value in graph.weights.values()] == [KERNEL.shape]
    np.testing.assert_array_equal(next(iter(graph.weights.values())).numpy(), KERNEL)
    assert max(const_elements(graph.graph_def)) <= LIFT
    np.testing.assert_allclose(np.asarray(graph(bright)), expected, rtol=1e-6)
    old = FrozenGraph(old_frozen_graph(folder), graph.input_name, graph.output_name,
                      graph.inputs[0], "old", output_specs=graph.outputs)
    for images in (bright, IMAGES - 1.0):  # the branch taken, and not
        np.testing.assert_array_equal(Explainer(graph, "guided")(images, 2),
                                      Explainer(old, "guided")(images, 2))


class TwoHeads(tf.Module):
    """A shared trunk and two large dense heads (12 x 8 x 8 x 100 elements each)."""

    def __init__(self):
        super().__init__()
        rng = np.random.default_rng(6)
        self.trunk = tf.Variable(rng.normal(size=(3, 3, 3, 12)).astype(np.float32))
        self.first, self.second = (
            tf.Variable(rng.normal(size=(768, 100)).astype(np.float32)) for _ in range(2))

    @tf.function(input_signature=[tf.TensorSpec((None, 8, 8, 3), tf.float32)])
    def serve(self, images):
        h = tf.reshape(tf.nn.relu(tf.nn.conv2d(images, self.trunk, 1, "SAME")), (-1, 768))
        return {"first": h @ self.first, "second": tf.nn.relu(h @ self.second)}


def test_one_output_of_several_is_cut_out_with_its_weights_fed(tmp_path):
    module = TwoHeads()
    folder = tmp_path / "heads"
    tf.saved_model.save(module, str(folder), signatures={"serving_default": module.serve})
    both = load_model(folder).model
    first = load_model(folder, output_key="first").model
    assert [tuple(value.shape) for value in both.weights.values()] == [(768, 100)] * 2
    ops = {node.op for node in first.graph_def.node}
    assert [node.op for node in both.graph_def.node].count("MatMul") == 2
    assert [node.op for node in first.graph_def.node].count("MatMul") == 1
    # Every weight fed is a placeholder of the graph cut down to the output (the second
    # head's variable is still read: TensorFlow orders every read before the outputs).
    placeholders = {node.name for node in first.graph_def.node if node.op == "Placeholder"}
    assert "Relu" in ops and set(first.weights) <= placeholders
    np.testing.assert_array_equal(np.asarray(first(IMAGES)),
                                  np.asarray(both(IMAGES)["first"]))
    np.testing.assert_allclose(np.asarray(first(IMAGES)),
                               module.serve(tf.constant(IMAGES))["first"].numpy(), rtol=1e-6)
