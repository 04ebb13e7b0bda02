"""What a model hides from the checks (issue 33): a SavedModel's input scaling, ReLUs
inside a Keras layer's ``tf.while_loop``, activations the rules cannot reach, and the
count of ReLUs under both scopes.

The loop model is hand-computable: a 1x1x2 image ``x`` goes through ``LOOPS`` passes of
``h = relu(h @ W)`` inside one custom layer's ``tf.while_loop``, then ``logits = h @ V``.
Its maps are worked out by :func:`loop_maps` in numpy, ReLU by ReLU (the paper's rules).
"""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from guidedbp import Explainer, load_model
from guidedbp.engine.explainer import NoReluWarning
from guidedbp.models.loaded import NO_RESCALING_NOTE, UNCHECKED_RESCALING_NOTE
from guidedbp.models.scaling import graph_rescales, rescales_itself

from .helpers import run_cli

# -- a SavedModel's input scaling -------------------------------------------------------------

IMAGES = np.random.default_rng(3).uniform(0, 255, (2, 8, 8, 3)).astype(np.float32)


def tiny(scaling: keras.layers.Layer | None) -> keras.Model:
    """8x8x3 -> [scaling] -> Conv2D(2, relu) -> global average -> Dense(3)."""
    keras.utils.set_random_seed(33)
    inputs = keras.Input((8, 8, 3))
    x = inputs if scaling is None else scaling(inputs)
    x = keras.layers.Conv2D(2, 3, activation="relu")(x)
    return keras.Model(inputs, keras.layers.Dense(3)(keras.layers.GlobalAveragePooling2D()(x)))


SCALINGS = {
    "raw": lambda: None,
    "rescaling": lambda: keras.layers.Rescaling(1 / 127.5, offset=-1),
    "normalization": lambda: keras.layers.Normalization(mean=[120.0, 110, 100],
                                                        variance=[900.0, 800, 700]),
}


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict:
    """Each tiny model as ``.keras`` and as an exported SavedModel: (name, format) -> path."""
    folder = tmp_path_factory.mktemp("scaling")
    paths = {}
    for name, scaling in SCALINGS.items():
        model = tiny(scaling())
        model.save(folder / f"{name}.keras")
        model.export(str(folder / name), verbose=False)
        paths[name, "keras"], paths[name, "savedmodel"] = folder / f"{name}.keras", folder / name
    return paths


@pytest.mark.parametrize("name", list(SCALINGS))
def test_both_formats_agree_on_whether_the_model_rescales(saved, name):
    expected = [NO_RESCALING_NOTE] if name == "raw" else []
    codes = ["no-rescaling"] if name == "raw" else []
    for file_format in ("keras", "savedmodel"):
        loaded = load_model(saved[name, file_format])
        assert loaded.format == file_format
        assert [note for note in loaded.notes if "rescal" in note.lower()] == expected
        assert [caveat.code for caveat in loaded.caveats] == codes, file_format
        # The maps carry it, and choosing a preprocessing answers it.
        explanation = Explainer(loaded, "guided").explain(IMAGES)
        assert [c.code for c in explanation.caveats_of(0) if c.code == "no-rescaling"] == codes
        assert load_model(saved[name, file_format], preprocess="tf").caveats == ()


def test_inspect_shows_the_note_for_a_savedmodel_without_rescaling(saved):
    for name, expected in (("raw", True), ("rescaling", False)):
        result = run_cli("inspect", saved[name, "savedmodel"], code=0)
        notes = [line for line in result.stdout.splitlines() if line.startswith("note")]
        assert any("no Rescaling/Normalization layer at the input" in note
                   and "--preprocess MODE" in note for note in notes) == expected, notes


class _Served(tf.Module):
    """A SavedModel whose first op on the pixels is ``first``, then a 1x1 convolution."""

    def __init__(self, first):
        super().__init__()
        self.first = first
        self.kernel = tf.Variable(np.full((1, 1, 3, 2), 0.1, np.float32))

    @tf.function(input_signature=[tf.TensorSpec((None, 8, 8, 3), tf.float32)])
    def serve(self, images):
        h = tf.nn.conv2d(self.first(images), self.kernel, 1, "VALID")
        return {"scores": tf.reduce_mean(h, axis=[1, 2])}


CAFFE_MEAN = tf.constant([103.9, 116.8, 123.7])


@pytest.mark.parametrize(("first", "expected"), [
    (lambda x: x, False),  # the convolution reads raw pixels
    (lambda x: x / 255.0, True),
    (lambda x: tf.reverse(x, [-1]) - CAFFE_MEAN, True),  # caffe: BGR, minus the mean
    (lambda x: tf.image.resize(x, (8, 8)) * 2.0 - 1.0, True),  # resized first: looked through
    (lambda x: x * x, None),  # scaled by itself: not a rescaling this check knows
    (tf.nn.relu, None),  # an op the check does not know: it cannot tell
], ids=["raw", "divided", "caffe", "resized", "squared", "relu"])
def test_a_savedmodels_first_ops_tell_whether_it_rescales(tmp_path, first, expected):
    module = _Served(first)
    tf.saved_model.save(module, str(tmp_path / "m"), signatures={"serving_default": module.serve})
    loaded = load_model(tmp_path / "m")
    assert rescales_itself(loaded.model) is expected
    assert graph_rescales(loaded.model.graph_def, loaded.model.input_name) is expected
    notes = {False: [NO_RESCALING_NOTE], True: [], None: [UNCHECKED_RESCALING_NOTE]}[expected]
    assert [note for note in loaded.notes if "rescal" in note.lower()] == notes
    caveats = [caveat.as_record() for caveat in loaded.caveats]
    if expected is None:  # said, not silent: inspect's note and the maps' caveat
        assert caveats == [{"code": "no-rescaling", "text": (
            "raw 0-255 pixels fed to a model whose input scaling could not be checked: "
            "wrong if it was trained on scaled pixels")}]
        result = run_cli("inspect", tmp_path / "m", code=0)
        assert ("note        could not check whether the model rescales its input (neither "
                "its layers nor its first ops tell): if it was trained on scaled pixels, pass "
                "--preprocess MODE (scale01, tf, caffe or torch)") in result.stdout
        assert load_model(tmp_path / "m", preprocess="scale01").caveats == ()
    else:
        assert [c["code"] for c in caveats] == (["no-rescaling"] if expected is False else [])


def test_a_plain_callable_is_loaded_with_the_unchecked_note_not_a_crash():
    # It has neither layers nor a graph: before, load_model raised AttributeError.
    loaded = load_model(lambda images, training=False: tf.reduce_mean(images, axis=[1, 2]))
    assert loaded.notes == [UNCHECKED_RESCALING_NOTE]
    assert [caveat.code for caveat in loaded.caveats] == ["no-rescaling"]


# -- ReLUs inside a Keras layer's tf.while_loop -------------------------------------------------

W = np.array([[1.0, -0.5], [0.5, 1.0]], np.float32)
V = np.array([[1.0, -1.0], [-2.0, 1.0]], np.float32)
LOOPS = 2
POINTS = np.array([[[[1.0, 2.0]]], [[[2.0, 1.0]]]], np.float32)  # (2, 1, 1, 2)


def loop_maps(x: np.ndarray, target: int, loops: int = LOOPS) -> dict[str, np.ndarray]:
    """The literal rules, ReLU by ReLU, on ``h = relu(h @ W)`` ``loops`` times, ``h @ V``."""
    pre, h = [], x.astype(np.float64)
    for _ in range(loops):
        pre.append(h @ W)
        h = np.maximum(pre[-1], 0)
    maps = {}
    for rule in ("vanilla", "guided", "deconvnet"):
        g = V[:, target].astype(np.float64)
        for a in reversed(pre):
            g = {"vanilla": g * (a > 0), "guided": np.maximum(g, 0) * (a > 0),
                 "deconvnet": np.maximum(g, 0)}[rule] @ W.T
        maps[rule] = g
    return maps


@keras.saving.register_keras_serializable("guidedbp_tests")
class LoopedRelu(keras.layers.Layer):
    """``h = relu(h @ W)`` ``LOOPS`` times, in a ``tf.while_loop``."""

    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(2, 2), initializer="zeros", name="kernel")

    def call(self, inputs):
        def body(i, h):
            return i + 1, tf.nn.relu(h @ self.kernel)

        return tf.while_loop(lambda i, h: i < LOOPS, body, (tf.constant(0), inputs))[1]


def looped(layer: keras.layers.Layer | None = None) -> keras.Model:
    inputs = keras.Input((1, 1, 2))
    layer = layer or LoopedRelu()
    head = keras.layers.Dense(2, use_bias=False)
    model = keras.Model(inputs, head(layer(keras.layers.Flatten()(inputs))))
    layer.set_weights([W])
    head.set_weights([V])
    return model


def test_the_hand_reference_makes_the_rules_differ():
    maps = loop_maps(POINTS[0, 0, 0], 0)
    np.testing.assert_allclose(maps["vanilla"], [2.75, -0.5])
    np.testing.assert_allclose(maps["guided"], [0.75, 1.0])
    np.testing.assert_allclose(loop_maps(POINTS[1, 0, 0], 0)["deconvnet"], [0.75, 1.0])
    np.testing.assert_allclose(loop_maps(POINTS[1, 0, 0], 0)["guided"], [1.0, 0.5])


@pytest.mark.parametrize("guide", ["all", "relu"])
def test_a_relu_in_a_keras_layers_while_loop_is_guided_exactly(guide):
    model = looped()
    explainer = Explainer(model, ("guided", "vanilla", "deconvnet"), guide=guide)
    report = explainer.report_for((1, 1, 2))
    # One ReLU op, in the loop body (run LOOPS times): guided, nothing left alone.
    assert (report.guided_activations, report.plain_activations) == ({"relu": 1}, {})
    explanation = explainer.explain(POINTS, target=0)
    for index, point in enumerate(POINTS):
        expected = loop_maps(point[0, 0], 0)
        for method in ("guided", "vanilla", "deconvnet"):
            np.testing.assert_allclose(explanation.by_method[method][index].ravel(),
                                       expected[method], rtol=1e-6, err_msg=method)
    assert not any(c.code == "unguided-activation" for c in explanation.caveats_of(0))


class BranchedRelu(LoopedRelu):
    """``relu(h @ W)`` in a ``tf.cond`` branch taken for images of positive sum."""

    def call(self, inputs):
        return tf.cond(tf.reduce_sum(inputs) > 0, lambda: tf.nn.relu(inputs @ self.kernel),
                       lambda: inputs)


def test_a_relu_in_a_keras_layers_tf_cond_branch_is_guided_exactly():
    explainer = Explainer(looped(BranchedRelu()), ("guided", "vanilla"))
    assert explainer.report_for((1, 1, 2)).guided_activations == {"relu": 1}
    explanation = explainer.explain(POINTS[:1], target=0)
    expected = loop_maps(POINTS[0, 0, 0], 0, loops=1)
    for method in ("guided", "vanilla"):
        np.testing.assert_allclose(explanation.by_method[method][0].ravel(), expected[method],
                                   rtol=1e-6, err_msg=method)
    assert not np.allclose(expected["guided"], expected["vanilla"])


def test_the_loop_body_gets_its_plain_gradient_back():
    model = looped()
    explainer = Explainer(model, "guided")
    explainer.explain(POINTS, target=0)
    # The traced graph's loop-body ReLUs are put back as created (after an error too:
    # the same finally as the model's own ops).
    function = next(iter(explainer._traced.gradient_functions.values()))
    graph = function.get_concrete_function().graph
    loops = [op for op in graph.get_operations() if op.type in ("While", "StatelessWhile")]
    body_relus = [op for loop in loops for op in loop._body_graph.get_operations()
                  if op.type == "Relu"]
    assert body_relus and all("_gradient_op_type" not in op.node_def.attr for op in body_relus)


def test_the_same_model_as_a_savedmodel_gives_the_same_maps(tmp_path):
    model = looped()
    model.export(str(tmp_path / "looped"), verbose=False)
    methods = ("guided", "vanilla", "deconvnet")
    live = Explainer(model, methods).explain(POINTS, target=0)
    frozen = Explainer(load_model(tmp_path / "looped"), methods).explain(POINTS, target=0)
    for method in methods:
        np.testing.assert_allclose(live.by_method[method], frozen.by_method[method],
                                   rtol=1e-6, err_msg=method)


def test_check_skips_the_self_test_the_literal_chain_cannot_do(tmp_path):
    # reference_saliency gates the ReLUs it sees in the forward graph: a loop body's are
    # not among them. Now that the engine guides them, the two differ: skipped, not failed.
    keras.utils.set_random_seed(3)
    inputs = keras.Input((4, 4, 1))
    loop = LoopedRelu()
    x = loop(keras.layers.Conv2D(2, 3, padding="same", activation="relu")(inputs))
    model = keras.Model(inputs, keras.layers.Dense(3)(keras.layers.GlobalAveragePooling2D()(x)))
    loop.set_weights([W])
    model.save(tmp_path / "looped.keras")
    result = run_cli("check", tmp_path / "looped.keras", "--checks", "relu-coverage,self-test",
                     "--json", code=0)
    statuses = {check["name"]: (check["status"], check["detail"])
                for check in json.loads(result.stdout)["checks"]}
    assert statuses["relu-coverage"] == ("pass", "guided: relu 2")
    assert statuses["self-test"][0] == "skip"
    assert "tf.while_loop bodies" in statuses["self-test"][1]


# -- activations the rules cannot reach: reported and caveated ----------------------------------


@tf.function
def _nested(h):
    return tf.nn.relu(h @ tf.constant(W))


@keras.saving.register_keras_serializable("guidedbp_tests")
class NestedRelu(keras.layers.Layer):
    """The loop body's ReLU, in a nested ``tf.function``: its own gradient, cached."""

    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(2, 2), initializer="zeros", name="kernel")

    def call(self, inputs):
        return _nested(_nested(inputs))


class LoopedSigmoid(LoopedRelu):
    """``h = sigmoid(h @ W)`` in the loop: only ReLUs are guided inside functions."""

    def call(self, inputs):
        def body(i, h):
            return i + 1, tf.nn.sigmoid(h @ self.kernel)

        return tf.while_loop(lambda i, h: i < LOOPS, body, (tf.constant(0), inputs))[1]


def test_a_relu_in_a_nested_tf_function_is_reported_and_caveated():
    explainer = Explainer(looped(NestedRelu()), ("guided", "vanilla"))
    with pytest.warns(NoReluWarning, match="guided backprop equals the plain gradient"):
        report = explainer.report_for((1, 1, 2))
    assert (report.guided_activations, report.plain_activations) == ({}, {"relu": 1})
    assert report.unreached_activations == {"relu": 1}
    assert ("activations left alone: relu 1 (inside functions, out of the rules' reach: "
            "relu 1)") in str(report)
    explanation = explainer.explain(POINTS, target=0)
    # Its maps are the plain gradient: said on the guided maps, not the vanilla ones.
    np.testing.assert_allclose(explanation.by_method["guided"][0].ravel(),
                               loop_maps(POINTS[0, 0, 0], 0)["vanilla"], rtol=1e-6)
    records = [c.as_record() for c in explanation.caveats_of(0)
               if c.code in ("unguided-activation", "no-guided-activation")]
    assert records == [
        {"code": "no-guided-activation", "method": "guided",
         "text": "guided = plain gradient: the model has no guided activation"},
        {"code": "unguided-activation", "method": "guided", "text": (
            "guided left relu 1 with its plain gradient: inside a tf.while_loop or tf.cond "
            "body or a nested tf.function, out of the rule's reach (the map mixes in the "
            "plain gradient there)")}]


def test_inspect_says_what_the_rules_cannot_reach(tmp_path):
    keras.utils.set_random_seed(3)
    inputs = keras.Input((4, 4, 1))
    x = NestedRelu()(keras.layers.Conv2D(2, 3, padding="same")(inputs))
    model = keras.Model(inputs, keras.layers.Dense(3)(keras.layers.GlobalAveragePooling2D()(x)))
    model.save(tmp_path / "nested.keras")
    result = run_cli("inspect", tmp_path / "nested.keras", code=0)
    assert ("left alone  relu 1 (inside functions, out of the rules' reach: relu 1)"
            in result.stdout.splitlines())
    info = json.loads(run_cli("inspect", tmp_path / "nested.keras", "--json", code=0).stdout)
    assert (info["plain_activations"], info["unreached_activations"]) == ({"relu": 1},
                                                                         {"relu": 1})


@pytest.mark.parametrize(("guide", "caveated"), [("all", True), ("relu", False)])
def test_a_sigmoid_in_a_loop_body_is_caveated_where_the_scope_covers_it(guide, caveated):
    explainer = Explainer(looped(LoopedSigmoid()), ("guided", "vanilla"), guide=guide)
    with pytest.warns(NoReluWarning):
        report = explainer.report_for((1, 1, 2))
    assert (report.guided_activations, report.plain_activations) == ({}, {"sigmoid": 1})
    codes = [c.code for c in explainer.explain(POINTS, target=0).caveats_of(0)]
    assert ("unguided-activation" in codes) == caveated


# -- one count of ReLUs under both scopes -------------------------------------------------------


class ChainedRelus(keras.layers.Layer):
    """``relu(1 - relu(x))``: two ReLUs in one layer scope, a sign flip between them."""

    def call(self, inputs):
        return tf.nn.relu(1.0 - tf.nn.relu(inputs))


class WeightRelu(keras.layers.Layer):
    """``x * relu(w)``: a ReLU on a weight (a positivity constraint), not on the image's
    path: no rule touches what reaches the pixels through it."""

    def build(self, input_shape):
        self.scale = self.add_weight(shape=(2,), initializer="ones", name="scale")

    def call(self, inputs):
        return inputs * tf.nn.relu(self.scale)


def chained() -> keras.Model:
    """1x1x2 -> relu(1 - relu(x)) -> x * relu(w) -> Dense(2) V: two ReLUs on the path."""
    inputs = keras.Input((1, 1, 2))
    head = keras.layers.Dense(2, use_bias=False)
    x = WeightRelu()(ChainedRelus()(keras.layers.Flatten()(inputs)))
    model = keras.Model(inputs, head(x))
    head.set_weights([V])
    return model


@pytest.mark.parametrize("guide", ["all", "relu"])
def test_chained_relus_count_once_each_under_both_scopes(guide):
    explainer = Explainer(chained(), ("guided", "deconvnet"), guide=guide)
    report = explainer.report_for((1, 1, 2))
    assert report.by_rule == {"guided": (guide, {"relu": 2}), "deconvnet": (guide, {"relu": 2})}
    # x = (0.5, -1): relu(x) = (0.5, 0), 1 - relu(x) = (0.5, 1) both active; target 0's
    # weights V[:, 0] = (1, -2). Guided, ReLU by ReLU: (1, 0) at the outer ReLU, (-1, 0)
    # through 1 - ., (0, 0) at the inner one (thresholded again, inactive at x2).
    point = np.array([[[[0.5, -1.0]]]], np.float32)
    maps = explainer.explain(point, target=0).by_method
    np.testing.assert_array_equal(maps["guided"].ravel(), [0.0, 0.0])
    np.testing.assert_array_equal(maps["deconvnet"].ravel(), [0.0, 0.0])


# -- mixed precision: the drift from float32, measured and said -------------------------------


@pytest.fixture
def bfloat16_cpu(monkeypatch):
    """The hardware probe answers: a CPU with AVX512-BF16, no GPU, oneDNN on (the maps'
    values do not depend on how fast bfloat16 runs: TensorFlow emulates it elsewhere)."""
    from guidedbp.engine.graph import precision as _precision

    monkeypatch.setattr(_precision, "gpu_capability", lambda: None)
    monkeypatch.setattr(_precision, "cpu_flags", lambda: frozenset({"avx2", "avx512_bf16"}))
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)


def rounded() -> keras.Model:
    """1x1x3 -> Dense(2, linear; bfloat16 in the copy) -> Dense(2) (float32: the output).

    Hidden W1 = [[257, 256], [256, 257], [2, 1]], output W2 = [[1, 0], [-1, 0]]: class 0's
    gradient is W1 @ (1, -1) = (1, -1, 1) in float32. bfloat16 keeps 8 significant bits:
    257 rounds to 256 (a tie, to the even mantissa), so the copy's gradient is (0, 0, 1).
    Their Pearson correlation is exactly 0.5.
    """
    inputs = keras.Input((1, 1, 3))
    hidden = keras.layers.Dense(2, use_bias=False, name="hidden")
    top = keras.layers.Dense(2, use_bias=False, name="top")
    model = keras.Model(inputs, top(hidden(keras.layers.Flatten()(inputs))))
    hidden.set_weights([np.array([[257, 256], [256, 257], [2, 1]], np.float32)])
    top.set_weights([np.array([[1, 0], [-1, 0]], np.float32)])
    return model


ONES = np.ones((2, 1, 1, 3), np.float32)
DRIFT = ("mixed precision moved the maps{on}: they correlate 0.500 with float32's on this "
         "model's first image (below 0.99); run in float32 for exact maps")


@pytest.mark.usefixtures("bfloat16_cpu")
def test_the_rounded_model_drifts_as_worked_out_by_hand():
    full = Explainer(rounded(), "vanilla").explain(ONES, target=0).maps
    mixed = Explainer(rounded(), "vanilla", precision="mixed").explain(ONES, target=0).maps
    np.testing.assert_array_equal(full.reshape(2, 3), [[1, -1, 1]] * 2)
    np.testing.assert_array_equal(mixed.reshape(2, 3), [[0, 0, 1]] * 2)


@pytest.mark.usefixtures("bfloat16_cpu")
def test_a_drifting_mixed_map_carries_the_figure():
    explainer = Explainer(rounded(), ("vanilla", "integrated-gradients", "occlusion"),
                          precision="mixed")
    for _ in range(2):  # measured once, said on every map after
        explanation = explainer.explain(ONES, target=0)
        drift = [c.as_record() for c in explanation.caveats_of(1)
                 if c.code == "mixed-precision-drift"]
        assert drift == [
            {"code": "mixed-precision-drift", "method": "vanilla", "text": DRIFT.format(on="")},
            # Averaged methods are measured by their rule's one-pass map; perturbation
            # methods (forward scores only) are not measured.
            {"code": "mixed-precision-drift", "method": "integrated-gradients",
             "text": DRIFT.format(on=" (vanilla maps, which it averages)")}]
    # float32 runs measure nothing and say nothing.
    assert not [c for c in Explainer(rounded(), "vanilla").explain(ONES, target=0).caveats_of(0)
                if c.code == "mixed-precision-drift"]


@pytest.mark.usefixtures("bfloat16_cpu")
def test_maps_that_keep_the_promise_carry_no_drift_caveat():
    # The hidden layer's weights are exact in bfloat16 (small integers): no drift at all.
    model = rounded()
    model.get_layer("hidden").set_weights([np.array([[3, 1], [1, 2], [2, 1]], np.float32)])
    explanation = Explainer(model, "vanilla", precision="mixed").explain(ONES, target=0)
    assert not [c for c in explanation.caveats_of(0) if c.code == "mixed-precision-drift"]


@pytest.mark.usefixtures("bfloat16_cpu")
def test_a_model_too_small_to_gain_is_warned_with_its_figure():
    # rounded()'s bfloat16 work: the hidden Dense, 3 inputs x 2 units = 6 multiply-adds.
    with pytest.warns(UserWarning) as caught:
        Explainer(rounded(), "vanilla", precision="mixed")
    assert [str(w.message) for w in caught if "pay off" in str(w.message)] == [
        "precision='mixed' does not pay off on a model this small: its bfloat16 layers do 6 "
        "multiply-adds per image, and below 1,000,000 mixed precision ran no faster than "
        "float32 on a CPU; float32 gives exact maps as fast"]


@pytest.mark.usefixtures("bfloat16_cpu")
def test_the_multiply_adds_are_counted_by_hand():
    from guidedbp.engine import payoff as _payoff
    from guidedbp.engine.graph import precision as _precision

    from .test_precision import stem_cnn

    # conv3: 8x8 outputs x 16 filters x 3x3 taps x 8 channels; conv4 the same on 16
    # channels. The stem (conv1, conv2, pools) and the output layer stay float32.
    copy = _precision.low_precision_model(stem_cnn(), "bfloat16").copy
    assert _payoff.multiply_adds(copy) == 8 * 8 * 16 * 9 * (8 + 16) == 221_184
    # A larger network gains: no warning (a 4-stage CNN at 32x32: 2.4 million).
    keras.utils.set_random_seed(1)
    inputs = keras.Input((32, 32, 3))
    x = inputs
    for width in (16, 32, 64, 128):
        x = keras.layers.MaxPooling2D()(
            keras.layers.Conv2D(width, 3, padding="same", activation="relu")(x))
    model = keras.Model(inputs, keras.layers.Dense(3)(keras.layers.GlobalAveragePooling2D()(x)))
    copy = _precision.low_precision_model(model, "bfloat16").copy
    assert _payoff.multiply_adds(copy) == 8 * 8 * 64 * 9 * 32 + 4 * 4 * 128 * 9 * 64
    assert _payoff.small_model_warning(copy, "bfloat16") is None
