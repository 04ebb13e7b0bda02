"""Which ops the generalised rule treats as one activation, how the report counts them,
and that the ReLU family's maps did not move (``guide="all"`` against ``"relu"``)."""

import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

from guidedbp.engine.explainer import Explainer, NoReluWarning

from . import zoo
from .models import mixed_relu_cnn

IMAGES = np.random.default_rng(7).normal(size=(2, 8, 8, 3)).astype(np.float32)


def _report(model, guide="all", method="guided"):
    explainer = Explainer(model, method, guide=guide)
    explainer(IMAGES[:, : model.input_shape[1], : model.input_shape[2]])
    return explainer.report


def _conv_net(*blocks) -> keras.Model:
    """8x8x3 -> each block (a callable on a tensor) -> pooled -> Dense(3)."""
    keras.utils.set_random_seed(4)
    inputs = keras.Input((8, 8, 3))
    x = inputs
    for block in blocks:
        x = block(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(3)(x))


def _conv(activation=None):
    return keras.layers.Conv2D(4, 3, padding="same", activation=activation)


@pytest.mark.parametrize(("activation", "kind"), [
    ("relu", "relu"), ("relu6", "relu6"), ("leaky_relu", "leaky_relu"), ("elu", "elu"),
    ("selu", "selu"), ("gelu", "gelu"), ("silu", "silu"), ("swish", "silu"),
    ("hard_silu", "hard_silu"), ("hard_swish", "hard_silu"), ("hard_sigmoid", "hard_sigmoid"),
    ("sigmoid", "sigmoid"), ("tanh", "tanh"), ("softplus", "softplus"),
    ("softsign", "softsign"), ("mish", "mish"),
])
def test_each_keras_activation_is_one_activation_of_its_kind(activation, kind):
    # Fused into a Conv2D, and as an Activation layer: two of the kind, nothing plain.
    model = _conv_net(_conv(activation), _conv(), keras.layers.Activation(activation))
    report = _report(model)
    assert (report.guided_activations, report.plain_activations) == ({kind: 2}, {})


def test_activation_layers_are_counted_by_their_own_kind():
    model = _conv_net(_conv(), keras.layers.PReLU(), _conv(), keras.layers.ELU(alpha=0.5),
                      _conv(), keras.layers.ReLU(max_value=3.0), _conv(),
                      keras.layers.LeakyReLU(0.2), _conv(),
                      keras.layers.Activation(lambda t: keras.activations.gelu(t, True)))
    assert _report(model).guided_activations == {
        "prelu": 1, "elu": 1, "relu": 1, "leaky_relu": 1, "gelu": 1}


def test_two_activation_layers_in_a_row_stay_two():
    # relu then silu, no op between: two layer scopes, two activations (a merged one
    # would threshold once where the rule thresholds at each).
    model = _conv_net(_conv("relu"), keras.layers.Activation("silu"),
                      keras.layers.Activation("sigmoid"))
    assert _report(model).guided_activations == {"relu": 1, "silu": 1, "sigmoid": 1}


def test_a_squeeze_excite_gate_is_a_sigmoid_and_the_product_is_not_an_activation():
    def squeeze_excite(x):
        gate = keras.layers.GlobalAveragePooling2D(keepdims=True)(x)
        gate = keras.layers.Conv2D(4, 1, activation="sigmoid")(gate)
        return keras.layers.Multiply()([x, gate])

    model = _conv_net(_conv("silu"), squeeze_excite)
    assert _report(model).guided_activations == {"silu": 1, "sigmoid": 1}


def test_attention_softmax_and_normalisation_are_not_activations():
    keras.utils.set_random_seed(5)
    inputs = keras.Input((8, 8, 3))
    tokens = keras.layers.Reshape((64, 3))(keras.layers.Conv2D(8, 1)(inputs)[..., :3])
    x = keras.layers.LayerNormalization()(keras.layers.Dense(8)(tokens))
    x = keras.layers.MultiHeadAttention(2, 4)(x, x)
    x = keras.layers.Dense(8, activation="gelu")(x)
    x = keras.layers.GlobalAveragePooling1D()(keras.layers.BatchNormalization()(x))
    model = keras.Model(inputs, keras.layers.Dense(3, activation="softmax")(x))
    report = _report(model)
    assert (report.guided_activations, report.plain_activations) == ({"gelu": 1}, {})
    assert report.head == "softmax"  # the head's softmax is bypassed, not guided


class _TwoActivations(keras.layers.Layer):
    """relu(a) + sigmoid(b) in one layer scope: two activations, the sum is neither."""

    def call(self, inputs):
        return tf.nn.relu(inputs[..., :2]) + tf.nn.sigmoid(inputs[..., 2:])


def test_two_activations_in_one_custom_layer_are_found_apart():
    model = _conv_net(_conv(), _TwoActivations())
    report = _report(model)
    assert report.guided_activations == {"relu": 1, "sigmoid": 1}


def test_nested_models_are_searched():
    inner = _conv_net(_conv("silu"), keras.layers.Activation("gelu"))
    inputs = keras.Input((8, 8, 3))
    outer = keras.Model(inputs, keras.layers.Activation("tanh")(inner(inputs)))
    assert _report(outer).guided_activations == {"silu": 1, "gelu": 1, "tanh": 1}


def test_relu_family_maps_are_bit_identical_in_both_scopes():
    keras.utils.set_random_seed(6)
    relu_only = keras.Sequential([
        keras.Input((8, 8, 3)), _conv("relu"), keras.layers.ReLU(6.0), _conv("relu6"),
        keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(3, activation="softmax")])
    for method in ("guided", "deconvnet", "guided-gradcam"):
        every = Explainer(relu_only, method, guide="all").explain(IMAGES, target=1).maps
        paper = Explainer(relu_only, method, guide="relu").explain(IMAGES, target=1).maps
        assert np.any(every)
        np.testing.assert_array_equal(every, paper)
    # With a LeakyReLU the scopes differ: it is guided in one only.
    model = mixed_relu_cnn()
    assert _report(model, "all").guided_activations == {"relu": 2, "relu6": 1, "leaky_relu": 1}
    assert _report(model, "relu").guided_activations == {"relu": 2, "relu6": 1}


def test_guide_is_refused_when_unknown():
    with pytest.raises(ValueError, match="guide='some' is not one of all, relu"):
        Explainer(_conv_net(_conv("relu")), "guided", guide="some")


def test_no_activation_at_all_warns_in_both_scopes():
    model = _conv_net(_conv())
    for guide in ("all", "relu"):
        explainer = Explainer(model, "guided", guide=guide)
        with pytest.warns(NoReluWarning, match="equals the plain gradient") as caught:
            explainer(IMAGES)
        lacks = "no activation to guide" if guide == "all" else "no ReLU-family op"
        assert lacks in str(caught[0].message)


def test_deconvnet_alone_on_a_silu_net_warns_and_names_its_scope():
    model = _conv_net(_conv("silu"))
    explainer = Explainer(model, ("guided", "deconvnet"))
    with pytest.warns(NoReluWarning, match="no ReLU-family op: deconvnet backprop equals"):
        explanation = explainer.explain(IMAGES)
    assert [c.method for c in explanation.caveats[0] if c.code == "no-guided-activation"] == [
        "deconvnet"]
    assert explainer.report.by_rule == {"guided": ("all", {"silu": 1}),
                                        "deconvnet": ("relu", {})}


def test_ops_get_their_gradients_back_after_an_error(tmp_path):
    # A failing trace (a bad layer name) leaves no override on the ops it made: the
    # next explainer on the same model still gives the plain gradient for vanilla.
    model = _conv_net(_conv("silu"))
    with pytest.raises(ValueError):
        Explainer(model, "guided-gradcam", layer="nope")(IMAGES)
    vanilla = Explainer(model, "vanilla")(IMAGES, target=0)
    with tf.GradientTape() as tape:
        images = tf.constant(IMAGES)
        tape.watch(images)
        score = tf.reduce_sum(model(images)[:, 0])
    np.testing.assert_allclose(vanilla, tape.gradient(score, images).numpy(), rtol=1e-5,
                               atol=1e-7)


SAVEDMODEL_SCRIPT = textwrap.dedent("""
    import sys, keras
    keras.utils.set_random_seed(0)
    inputs = keras.Input((16, 16, 3))
    x = keras.layers.Conv2D(4, 3, activation="silu")(inputs)
    x = keras.layers.Activation("gelu")(keras.layers.Conv2D(4, 3)(x))
    x = keras.layers.Activation("hard_silu")(keras.layers.Conv2D(4, 3)(x))
    x = keras.layers.Conv2D(4, 3, activation="sigmoid")(x)
    x = keras.layers.Activation("mish")(keras.layers.Conv2D(4, 3)(x))
    x = keras.layers.GlobalAveragePooling2D()(x)
    model = keras.Model(inputs, keras.layers.Dense(3, activation="softmax")(x))
    model.save(sys.argv[1] + "/model.keras")
    model.export(sys.argv[1] + "/savedmodel")
""")


@pytest.fixture(scope="module")
def saved():
    # Saved in another process, as users do: a SavedModel's custom gradients (silu's) are
    # then registered by the loader in this one only, against its own graph. That process
    # runs once (tests/zoo.py caches what it saved).
    return zoo.by_script("activations", SAVEDMODEL_SCRIPT)


@pytest.mark.parametrize("method", ["guided", "deconvnet", "vanilla"])
def test_savedmodel_activations_are_guided_as_in_the_keras_file(saved, method):
    from guidedbp import Explainer as PackageExplainer

    images = np.random.default_rng(3).uniform(0, 255, (2, 16, 16, 3)).astype(np.float32)
    maps = {}
    for name in ("model.keras", "savedmodel"):
        explainer = PackageExplainer(saved / name, method, guide="all")
        maps[name] = explainer(images, target=2)
        kinds = {"silu": 1, "gelu": 1, "hard_silu": 1, "sigmoid": 1, "mish": 1}
        assert explainer.report.guided_activations == ({} if method == "vanilla" else kinds)
    keras_map, saved_map = maps.values()
    assert np.abs(saved_map - keras_map).max() <= 1e-4 * np.abs(keras_map).max()
    if method != "vanilla":
        plain = PackageExplainer(saved / "savedmodel", "vanilla")(images, target=2)
        assert np.abs(saved_map - plain).max() > 0.05 * np.abs(plain).max()


def test_savedmodel_with_silu_loads_without_a_custom_gradient_note(saved):
    from guidedbp import load_model

    assert not any("custom gradient" in note for note in load_model(saved / "savedmodel").notes)


def test_the_manifest_records_the_scope_and_a_resume_with_another_recomputes(tmp_path):
    import json

    from PIL import Image

    import guidedbp

    model = _conv_net(_conv("silu"), keras.layers.Activation("gelu"))
    Image.fromarray((np.random.default_rng(1).uniform(0, 255, (8, 8, 3))).astype(np.uint8)
                    ).save(tmp_path / "a.png")
    out = tmp_path / "out"

    def run(**options):
        summary = guidedbp.explain_files(model, str(tmp_path / "a.png"), str(out),
                                         methods="guided,deconvnet", raw=True,
                                         skip_existing=True, **options)
        assert summary.exit_code == 0
        (record,) = [json.loads(line) for line in (out / "manifest.jsonl").open()]
        return record, np.load(out / record["targets"][0]["raw"]["guided"])

    record, every = run()
    assert record["guided"] == {
        "guided": {"guide": "all", "guided_activations": {"silu": 1, "gelu": 1}},
        "deconvnet": {"guide": "relu", "guided_activations": {}}}
    record, paper = run(guide="relu")  # another scope: the earlier record is not reused
    assert record["guided"]["guided"] == {"guide": "relu", "guided_activations": {}}
    assert np.abs(every - paper).max() > 0
    record, again = run(guide="relu")  # the same scope: reused as it is
    np.testing.assert_array_equal(again, paper)
