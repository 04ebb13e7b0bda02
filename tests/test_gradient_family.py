"""Gradient x Input, SquareGrad, VarGrad, XGrad-CAM, HiResCAM and Eigen-CAM against
independent references: gradients taken here with ``tf.GradientTape`` on a tiny seeded
model (its feature map read off a Keras sub-model), the formulas written again in numpy,
SmoothGrad's noisy copies drawn again from ``numpy.random.default_rng([seed, i])``.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from guidedbp import Explainer
from guidedbp.engine.methods import cams as _cams
from guidedbp.engine.methods import registry
from guidedbp.engine.options import STATISTIC_COPIES
from guidedbp.io.images import decode_image
from guidedbp.io.manifest import read_manifest
from guidedbp.models.preprocess import preprocess
from guidedbp.models.resizing import fit

from .helpers import run_cli
from .vit_models import plain_vit

NEW_METHODS = ("gradient-input", "squaregrad", "vargrad", "xgradcam", "hirescam", "eigencam")
CAMS = ("xgradcam", "hirescam", "eigencam")


@pytest.fixture(scope="module")
def model():
    """8x8x3 -> Conv2D(5, 3x3, same, relu) "conv" -> MaxPool 2x2 "pool" -> GAP -> Dense(3):
    behind the max pool the gradient at "conv" varies from position to position."""
    keras.utils.set_random_seed(11)
    inputs = keras.Input((8, 8, 3))
    x = keras.layers.Conv2D(5, 3, padding="same", activation="relu", name="conv")(inputs)
    x = keras.layers.MaxPooling2D(2, name="pool")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(3, name="dense")(x), name="tiny")


@pytest.fixture(scope="module")
def images():
    return np.random.default_rng(2).uniform(0, 1, (3, 8, 8, 3)).astype(np.float32)


CLASSES = np.array([0, 2, 1])


# -- references ---------------------------------------------------------------------------


def score(logits, classes):
    return tf.reduce_sum(tf.gather(logits, np.asarray(classes), batch_dims=1))


def tape_gradient(model, images, classes) -> np.ndarray:
    """The plain gradient of each image's class logit with respect to it, float64."""
    inputs = tf.constant(images)
    with tf.GradientTape() as tape:
        tape.watch(inputs)
        total = score(model(inputs, training=False), classes)
    return tape.gradient(total, inputs).numpy().astype(np.float64)


def feature_map_and_gradient(model, layer, images, classes):
    """Layer ``layer``'s output and the plain gradient of the class logits with respect to
    it, float64, from a Keras sub-model that outputs both."""
    inner = keras.Model(model.input, [model.get_layer(layer).output, model.output])
    with tf.GradientTape() as tape:
        features, logits = inner(images, training=False)
        total = score(logits, classes)
    gradient = tape.gradient(total, features)
    return features.numpy().astype(np.float64), gradient.numpy().astype(np.float64)


def relu(values):
    return np.maximum(values, 0)


def xgradcam(features, gradient):
    """pytorch-grad-cam's XGradCAM: sum_ab(g A) / (sum_ab A + 1e-7), then relu(sum_k w A)."""
    weights = (gradient * features).sum(axis=(1, 2), keepdims=True) / (
        features.sum(axis=(1, 2), keepdims=True) + 1e-7)
    return relu((weights * features).sum(axis=-1))


def hirescam(features, gradient):
    return relu((gradient * features).sum(axis=-1))


def eigencam(features, signed: bool = True):
    """pytorch-grad-cam's get_2d_projection, literally, then the sign rule: the projection
    correlates positively with the channel-summed activation; then the ReLU."""
    maps = []
    for one in features:
        points = one.reshape(-1, one.shape[-1])
        centred = points - points.mean(axis=0)
        _, _, right = np.linalg.svd(centred, full_matrices=False)
        projection = centred @ right[0]
        if signed and (projection * points.sum(axis=1)).sum() < 0:
            projection = -projection
        maps.append(projection.reshape(one.shape[:2]))
    return relu(np.stack(maps))


def noisy_copies(image, index, copies, noise, seed):
    """SmoothGrad's copies of image ``index``, drawn as the engine draws them."""
    rng = np.random.default_rng([seed, index])
    sigma = noise * float(image.max() - image.min())
    return (image[None] + rng.normal(0.0, sigma, (copies, *image.shape))).astype(np.float32)


def copy_gradients(model, images, classes, copies, noise, seed):
    """(N, copies, H, W, C) plain gradients of each image's class on its noisy copies."""
    return np.stack([tape_gradient(model, noisy_copies(image, index, copies, noise, seed),
                                   np.full(copies, classes[index]))
                     for index, image in enumerate(images)])


# -- the records --------------------------------------------------------------------------


def test_each_method_is_one_record_with_its_runner_and_paper():
    for name in NEW_METHODS:
        assert name in registry.METHODS
    assert registry.method("gradient-input").runner == registry.GRADIENT
    assert registry.method("gradient-input").relu_rule == "plain"
    for name in ("squaregrad", "vargrad"):
        record = registry.method(name)
        assert (record.runner, record.relu_rule, record.signed) == (
            registry.NOISE_STATISTIC, "plain", False)
        assert "16" in record.title
    assert registry.method("vargrad").statistic == "variance"
    assert registry.method("squaregrad").statistic == "mean"
    for name in CAMS:
        record = registry.method(name)
        assert record.feature_map and not record.signed and record.options == ("gradcam",)
        assert record.runner == registry.GRADIENT
    assert {"xgradcam", "hirescam"} <= set(_cams.WEIGHTINGS)
    assert set(_cams.PROJECTIONS) == {"eigencam"}
    with pytest.raises(ValueError, match="statistic='median'"):
        registry.Method("x", "x", "x", "plain", lambda parts: parts, statistic="median")


# -- Gradient x Input -----------------------------------------------------------------------


def test_gradient_input_is_the_tape_gradient_times_the_input(model, images):
    # With guided backprop in the same pass: Gradient x Input keeps the plain gradient.
    explanation = Explainer(model, ("guided", "gradient-input")).explain(images, CLASSES)
    expected = tape_gradient(model, images, CLASSES) * images
    assert np.abs(expected).max() > 0
    np.testing.assert_allclose(explanation.by_method["gradient-input"], expected, rtol=1e-5,
                               atol=1e-6 * np.abs(expected).max())
    assert explanation.by_method["gradient-input"].shape == images.shape


# -- SquareGrad and VarGrad -----------------------------------------------------------------


@pytest.mark.parametrize(("options", "copies", "noise", "seed"), [
    ({}, STATISTIC_COPIES, 0.15, 0),  # SmoothGrad off: 16 copies at its default noise
    ({"smooth": 1, "noise": 0.3, "seed": 2}, STATISTIC_COPIES, 0.3, 2),
    ({"smooth": 5, "noise": 0.2, "seed": 3}, 5, 0.2, 3),  # SmoothGrad's copies
])
def test_squaregrad_and_vargrad_are_statistics_of_tape_gradients_on_the_copies(
        model, images, options, copies, noise, seed):
    explainer = Explainer(model, ("vanilla", "squaregrad", "vargrad"), batch_size=64,
                          **options)
    explanation = explainer.explain(images, CLASSES)
    gradients = copy_gradients(model, images, CLASSES, copies, noise, seed)
    squares, variance = (gradients**2).mean(axis=1), gradients.var(axis=1)
    assert variance.max() > 0.01 * squares.max()
    for name, expected in [("squaregrad", squares), ("vargrad", variance)]:
        np.testing.assert_allclose(explanation.by_method[name], expected, rtol=1e-5,
                                   atol=1e-6 * expected.max(), err_msg=name)
    # Under SmoothGrad, vanilla is the mean over the same copies: VarGrad is
    # SquareGrad - SmoothGrad^2, each taken once over them (not averaged again).
    vanilla = explanation.by_method["vanilla"]
    if copies == 5:
        np.testing.assert_allclose(vanilla, gradients.mean(axis=1), rtol=1e-5,
                                   atol=1e-6 * np.abs(vanilla).max())
    else:  # SmoothGrad off: the clean gradient
        np.testing.assert_allclose(vanilla, tape_gradient(model, images, CLASSES), rtol=1e-5,
                                   atol=1e-6 * np.abs(vanilla).max())


def test_the_copies_do_not_depend_on_batching(model, images):
    # batch_size 5 < 16 copies: each image's copies in chunks, the variance joined chunk by
    # chunk; 16: one image per batch; 64: four images' copies per batch.
    maps = [Explainer(model, ("squaregrad", "vargrad"), batch_size=size).explain(images)
            for size in (5, 16, 64)]
    for name in ("squaregrad", "vargrad"):
        for other in maps[1:]:
            np.testing.assert_allclose(other.by_method[name], maps[0].by_method[name],
                                       rtol=1e-5, atol=1e-7 * maps[0].by_method[name].max(),
                                       err_msg=name)
    # Same seed, same maps; another seed, other maps.
    again = Explainer(model, "vargrad", batch_size=5).explain(images).maps
    np.testing.assert_array_equal(again, maps[0].by_method["vargrad"])
    other = Explainer(model, "vargrad", batch_size=5, seed=1).explain(images).maps
    assert np.abs(other - again).max() > 1e-3 * again.max()


def test_without_noise_squaregrad_is_the_squared_gradient_and_vargrad_zero(model, images):
    explanation = Explainer(model, ("vanilla", "squaregrad", "vargrad"), noise=0.0,
                            batch_size=64).explain(images, CLASSES)
    vanilla = explanation.by_method["vanilla"]
    np.testing.assert_allclose(explanation.by_method["squaregrad"], vanilla**2, rtol=1e-5,
                               atol=1e-6 * (vanilla**2).max())
    np.testing.assert_array_equal(explanation.by_method["vargrad"], 0)
    # A variance is not in the score's units, but a zero map says so (issue 33).
    assert [[(caveat.code, caveat.text) for caveat in caveats if caveat.method == "vargrad"]
            for caveats in explanation.caveats] == [
        [("negligible-map", "negligible map: it is all zero (flat in every render)")]] * 3


def test_top_k_classes_share_the_copies(model, images):
    explainer = Explainer(model, ("vargrad", "gradcam"), batch_size=64)
    first, second = explainer.explain_top_k(images, 2)
    alone = Explainer(model, "vargrad", batch_size=64).explain(images, second.targets)
    np.testing.assert_allclose(second.by_method["vargrad"], alone.maps, rtol=1e-6,
                               atol=1e-7 * alone.maps.max())
    assert not np.array_equal(first.targets, second.targets)


# -- XGrad-CAM, HiResCAM, Eigen-CAM ---------------------------------------------------------


def test_xgradcam_hirescam_and_eigencam_at_a_full_size_layer(model, images):
    # "conv" is 8x8, the input's size: no resizing.
    features, gradient = feature_map_and_gradient(model, "conv", images, CLASSES)
    explanation = Explainer(model, CAMS, layer="conv").explain(images, CLASSES)
    expected = {"xgradcam": xgradcam(features, gradient),
                "hirescam": hirescam(features, gradient), "eigencam": eigencam(features)}
    for name, reference in expected.items():
        assert reference.max() > 0 and reference.min() == 0, name
        np.testing.assert_allclose(explanation.by_method[name][..., 0], reference, rtol=1e-5,
                                   atol=1e-6 * reference.max(), err_msg=name)
    # Behind a max pool the gradient varies by position: HiResCAM is not XGrad-CAM.
    assert np.abs(expected["hirescam"] - expected["xgradcam"]).max() > 0.1 * (
        expected["hirescam"].max())


def test_the_cams_at_the_default_layer_upsampled_nearest(model, images):
    features, gradient = feature_map_and_gradient(model, "pool", images, CLASSES)
    explainer = Explainer(model, CAMS, upsample="nearest")
    explanation = explainer.explain(images, CLASSES)
    assert "pool" in explainer.report.layer
    for name, reference in [("xgradcam", xgradcam(features, gradient)),
                            ("hirescam", hirescam(features, gradient)),
                            ("eigencam", eigencam(features))]:
        blocks = np.kron(reference, np.ones((1, 2, 2)))
        np.testing.assert_allclose(explanation.by_method[name][..., 0], blocks, rtol=1e-5,
                                   atol=1e-6 * reference.max(), err_msg=name)


def test_eigencam_reads_no_class(model, images):
    maps = [explanation.maps for explanation in
            Explainer(model, "eigencam", layer="conv").explain_classes(images, [0, 1, 2])]
    np.testing.assert_array_equal(maps[0], maps[1])
    np.testing.assert_array_equal(maps[0], maps[2])


def test_eigencams_sign_follows_the_channel_sum():
    # Four positions on a line through two channels. Correlated channels (t, t): the
    # component is (1, 1)/sqrt 2; anti-correlated (t, -2t): (1, -2)/sqrt 5, and the
    # channel sum is -t, so the map must be largest where t is smallest.
    t = np.array([0.0, 1.0, 2.0, 3.0])
    for channels, component in [((t, t), np.array([1, 1]) / np.sqrt(2)),
                                ((t, -2 * t), -np.array([1, -2]) / np.sqrt(5))]:
        features = np.stack(channels, axis=-1).reshape(1, 2, 2, 2)
        points = features.reshape(4, 2)
        expected = (points - points.mean(axis=0)) @ component
        assert (expected * points.sum(axis=1)).sum() > 0
        projection = _cams.principal_component(tf.constant(features, tf.float32))
        np.testing.assert_allclose(projection.numpy().reshape(4), expected, rtol=1e-5,
                                   atol=1e-6)
        cam = _cams.class_activation_map(tf.constant(features, tf.float32), None,
                                            "eigencam", (2, 2), "nearest")
        np.testing.assert_allclose(cam.numpy().reshape(4), relu(expected), rtol=1e-5,
                                   atol=1e-6)
        # The map is largest where the channels sum highest.
        assert np.argmax(expected) == np.argmax(points.sum(axis=1))
    # Random feature maps: every projection correlates positively with the channel sum,
    # whichever sign the SVD gave (numpy's, pytorch-grad-cam's, is the other for some).
    features = np.random.default_rng(6).normal(size=(40, 4, 4, 5))
    projection = _cams.principal_component(tf.constant(features, tf.float32)).numpy()[..., 0]
    channel_sum = features.sum(axis=-1)
    correlation = (projection * (channel_sum - channel_sum.mean(axis=(1, 2), keepdims=True))
                   ).sum(axis=(1, 2))
    assert np.all(correlation > 0)
    np.testing.assert_allclose(relu(projection), eigencam(features), rtol=1e-4, atol=1e-5)
    assert not np.allclose(relu(projection), eigencam(features, signed=False), atol=1e-3)


def test_the_cams_on_vit_tokens_match_a_gradient_tape():
    vit = plain_vit()
    images = np.random.default_rng(5).normal(size=(2, 32, 32, 3)).astype(np.float32)
    tokens, gradient = feature_map_and_gradient(vit, "block_1", images, [1, 1])
    # Drop the class token, lay the 16 patch tokens out as a 4x4 grid.
    grid, grid_gradient = (array[:, 1:].reshape(2, 4, 4, -1) for array in (tokens, gradient))
    explanation = Explainer(vit, CAMS, layer="block_1").explain(images, 1)
    for name, reference in [("xgradcam", xgradcam(grid, grid_gradient)),
                            ("hirescam", hirescam(grid, grid_gradient)),
                            ("eigencam", eigencam(grid))]:
        resized = tf.image.resize(reference[..., None], (32, 32), method="bilinear").numpy()
        assert resized.max() > 0, name
        # HiResCAM sums signed products over channels: float32 cancellation, in a
        # different order on older TensorFlows (2.16: 5e-4 relative near zero).
        np.testing.assert_allclose(explanation.by_method[name], resized, rtol=1e-3,
                                   atol=1e-4 * resized.max(), err_msg=name)


# -- the command line -----------------------------------------------------------------------


def test_explain_writes_gradient_input_and_eigencam(model, tmp_path):
    model_path = tmp_path / "tiny.keras"
    model.save(model_path)
    pixels = np.random.default_rng(3).integers(0, 256, (8, 8, 3), dtype=np.uint8)
    Image.fromarray(pixels, "RGB").save(tmp_path / "img.png")
    out = tmp_path / "out"
    run_cli("explain", model_path, tmp_path / "img.png", "-o", out, "--method",
            "gradient-input,eigencam", "--upsample", "nearest", "--raw", "-q", code=0)
    record = read_manifest(out / "manifest.jsonl")[0]
    assert record["method"] == "gradient-input,eigencam" and record["status"] == "ok"
    fitted, _ = fit(decode_image(tmp_path / "img.png", channels=3), (8, 8))
    image = preprocess(fitted, "none")[None]
    expected = Explainer(model, ("gradient-input", "eigencam"), upsample="nearest"
                         ).explain(image)
    for name in ("gradient-input", "eigencam"):
        np.testing.assert_allclose(np.load(out / record["raw"][name]),
                                   expected.by_method[name][0], rtol=1e-6, atol=1e-7)
