"""Class activation maps of vision transformers: token layers read as a grid of patches.

Both models (tests/vit_models.py) cut 32x32 images into a 4x4 grid of 8x8 patches:
17 tokens, the class token first. Their head reads the class token after the final
LayerNormalization, so past the last block's attention no patch token reaches the
logits: the last block's output has a zero gradient at every patch, and the default
layer is the last block's input (the first block's output here).
"""

import json
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from guidedbp import Explainer
from guidedbp.errors import ArgumentError

from .helpers import run_cli
from .vit_models import keras_hub_vit, plain_vit

# keras-hub's ViT, built from a config:
# make test-all runs these, make test leaves them out (the heavy marker).
pytestmark = pytest.mark.heavy

CAMS = ("gradcam", "gradcam++", "layercam", "scorecam", "guided-gradcam")
METHODS = (*CAMS, "vanilla", "guided")
TARGET = 1


@pytest.fixture(scope="module")
def images():
    return np.random.default_rng(5).normal(size=(2, 32, 32, 3)).astype(np.float32)


@pytest.fixture(scope="module")
def plain():
    return plain_vit()


@pytest.fixture(scope="module")
def hub():
    pytest.importorskip("keras_hub")  # the test extra has it from Python 3.11 on
    return keras_hub_vit()


@pytest.fixture(scope="module", params=["plain", "hub"])
def vit(request):
    return request.getfixturevalue(request.param)


def last_scope(explainer) -> str:
    """The report's layer, its own name scope without TensorFlow's ``_N`` suffix."""
    return re.sub(r"_\d+$", "", explainer.report.layer.split("/")[-1])


def test_every_method_gives_a_finite_varying_map(vit, images):
    explainer = Explainer(vit, METHODS, max_channels=8)
    explanation = explainer.explain(images, TARGET)
    for name in METHODS:
        maps = explanation.by_method[name]
        channels = 1 if name in CAMS[:4] else 3
        assert maps.shape == (2, 32, 32, channels), name
        assert np.all(np.isfinite(maps)), name
        for one in maps:
            assert one.max() > one.min(), name
    assert explainer.trace_count == 2  # one traced pass (Score-CAM's grid too), one forward


def test_the_default_layer_is_the_last_blocks_input(plain, hub):
    assert last_scope(explainer := Explainer(plain, "gradcam")) == "block_1"
    assert explainer.report.layer.startswith("plain_vit")
    assert explainer.report.cam_layers == {"gradcam": "block_1"}
    explainer = Explainer(hub, "gradcam")
    assert last_scope(explainer) == "transformer_block_1"
    assert "vit_encoder" in explainer.report.layer
    # A block inside the encoder layer, by the name --layer takes (not its scope's).
    assert explainer.report.cam_layers == {"gradcam": "transformer_block_1"}


def test_a_vit_that_pools_its_tokens_gets_its_last_blocks_output(hub, images):
    pooled = keras_hub_vit(pooling="gap")
    explainer = Explainer(pooled, "gradcam")
    assert last_scope(explainer) == "transformer_block_2"
    maps = explainer(images, TARGET)
    assert maps.max() > 0 and np.all(np.isfinite(maps))


def test_the_last_blocks_output_of_a_class_token_head_has_no_gradient(plain, images):
    # The reason for the default: after the last attention each token is normalized and
    # the head reads the class token alone, so no patch token of "block_2" reaches it.
    assert np.all(Explainer(plain, "gradcam", layer="block_2")(images, TARGET) == 0)


def gradcam_and_layercam(tokens, gradient, extra: int):
    """Grad-CAM and LayerCAM of ``(N, T, C)`` tokens, literally: drop the ``extra``
    class tokens, lay the rest out as a square grid, weight, ReLU, resize."""
    count, total, channels = tokens.shape
    side = int(round((total - extra) ** 0.5))
    grid = tokens[:, extra:].reshape(count, side, side, channels)
    grid_gradient = gradient[:, extra:].reshape(count, side, side, channels)
    weights = grid_gradient.mean(axis=(1, 2), keepdims=True)
    gradcam = np.maximum((weights * grid).sum(axis=-1, keepdims=True), 0)
    layercam = np.maximum((np.maximum(grid_gradient, 0) * grid).sum(axis=-1, keepdims=True), 0)
    return [tf.image.resize(cam, (32, 32), method="bilinear").numpy()
            for cam in (gradcam, layercam)]


@pytest.mark.parametrize(("layer", "extra"), [("block_1", 1), ("position", 1), ("tokens", 0)])
def test_gradcam_on_tokens_matches_a_gradient_tape(plain, images, layer, extra):
    # A Keras sub-model outputs the chosen layer's tokens and the logits; the tape takes
    # the gradient at the tokens the logits were computed from.
    inner = keras.Model(plain.input, [plain.get_layer(layer).output, plain.output])
    with tf.GradientTape() as tape:
        tokens, logits = inner(images)
        score = tf.reduce_sum(logits[:, TARGET])
    gradient = tape.gradient(score, tokens).numpy()
    expected = gradcam_and_layercam(tokens.numpy(), gradient, extra)
    explanation = Explainer(plain, ("gradcam", "layercam"), layer=layer).explain(images, TARGET)
    for name, reference in zip(("gradcam", "layercam"), expected):
        assert reference.max() > 0, name
        np.testing.assert_allclose(explanation.by_method[name], reference, rtol=1e-5,
                                   atol=1e-5 * reference.max(), err_msg=name)


def test_gradcam_on_keras_hub_tokens_matches_a_gradient_tape(hub, images):
    # The blocks live inside one layer (vit_encoder): its parts are called one by one.
    encoder = hub.backbone.get_layer("vit_encoder")
    block_1 = encoder.encoder_layers[0](hub.backbone.get_layer("vit_patching_and_embedding")(
        images))
    with tf.GradientTape() as tape:
        tape.watch(block_1)
        normed = encoder.layer_norm(encoder.encoder_layers[1](block_1))
        logits = hub.get_layer("predictions")(normed[:, 0])
        score = tf.reduce_sum(logits[:, TARGET])
    np.testing.assert_allclose(logits, hub(images), rtol=1e-5, atol=1e-6)
    gradient = tape.gradient(score, block_1).numpy()
    expected = gradcam_and_layercam(block_1.numpy(), gradient, 1)
    explanation = Explainer(hub, ("gradcam", "layercam")).explain(images, TARGET)
    for name, reference in zip(("gradcam", "layercam"), expected):
        assert reference.max() > 0, name
        np.testing.assert_allclose(explanation.by_method[name], reference, rtol=1e-5,
                                   atol=1e-5 * reference.max(), err_msg=name)


def test_the_layer_option_may_name_a_token_layer(plain, hub, images):
    for model, layer in [(plain, "position"), (hub, "vit_patching_and_embedding"),
                         (hub, "transformer_block_1")]:
        explainer = Explainer(model, CAMS, layer=layer, max_channels=8)
        explanation = explainer.explain(images, TARGET)
        assert last_scope(explainer) == layer
        assert explainer.report.cam_layers == dict.fromkeys(CAMS, layer)
        for name in CAMS:
            maps = explanation.by_method[name]
            assert np.all(np.isfinite(maps)) and maps.max() > maps.min(), (layer, name)


@pytest.fixture(scope="module")
def odd_tokens():
    """5x7x2 images -> 35 tokens "tokens" -> Dense "mix" -> LayerNormalization ->
    average over tokens -> Dense(2): 35 tokens are 25 patches after 10 extra ones."""
    keras.utils.set_random_seed(3)
    inputs = keras.Input((5, 7, 2))
    tokens = keras.layers.Reshape((35, 2), name="tokens")(inputs)
    mixed = keras.layers.Dense(4, name="mix")(tokens)
    normed = keras.layers.LayerNormalization()(mixed)
    pooled = keras.layers.GlobalAveragePooling1D()(normed)
    return keras.Model(inputs, keras.layers.Dense(2)(pooled))


def test_tokens_with_no_square_grid_are_refused_in_one_line(odd_tokens):
    images = np.ones((1, 5, 7, 2), np.float32)
    with pytest.raises(ArgumentError) as caught:
        Explainer(odd_tokens, "gradcam", layer="tokens")(images)
    message = str(caught.value)
    assert message.startswith(
        "layer 'tokens' outputs shape (None, 35, 2): 35 tokens are not up to 8 class or "
        "register tokens followed by a square grid of patch tokens; ")
    assert "\n" not in message
    with pytest.raises(ArgumentError, match=r"^layer '.*mix.*' outputs shape \(None, 35, 4\): "
                                            r"35 tokens .*; name a layer with layer=$"):
        Explainer(odd_tokens, "layercam")(images)


PLAIN_TOKEN_LAYERS = [
    "tokens", "class_token", "position",
    *[f"block_{block}{part}" for block in (1, 2) for part in (
        "_norm_1", "_mha", "_attention", "_norm_2", "_mlp_1", "_mlp_2", "")],
    "final_norm",
]


def test_inspect_lists_token_layers_beside_4d_ones(plain, tmp_path):
    path = tmp_path / "vit.keras"
    plain.save(path)
    result = run_cli("inspect", path, "--json", code=0)
    assert json.loads(result.stdout)["cam_layers"] == {"4-D": ["patches"],
                                                       "tokens": PLAIN_TOKEN_LAYERS}
    text = run_cli("inspect", path, code=0).stdout
    lines = [line for line in text.splitlines() if line.startswith("cam layers")]
    assert lines == ["cam layers  4-D: patches; tokens: " + ", ".join(PLAIN_TOKEN_LAYERS)]
    assert json.loads(result.stdout)["cam_layer"] == "block_1"  # the default among them
    assert "cam layer   block_1" in text.splitlines()


def test_an_unknown_layer_lists_the_token_layers(plain, images):
    with pytest.raises(ArgumentError) as caught:
        Explainer(plain, "gradcam", layer="block_11")(images)
    assert str(caught.value) == (
        "no layer named 'block_11' in the model's graph (did you mean 'block_1' or 'block_2' "
        "or 'block_1_mlp_1'?); layers with a 4-D output: patches; token layers: ... "
        + ", ".join(PLAIN_TOKEN_LAYERS[-10:]) + " (18 in all)")
