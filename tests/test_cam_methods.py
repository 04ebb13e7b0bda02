"""Grad-CAM++, LayerCAM, guided Grad-CAM++ and Score-CAM against numpy on tiny models.

The expected maps are computed here from the models' fixed weights, with the
gradients worked out analytically: behind global average pooling and a dense layer,
d logit_c / d A_k = W[k, c] / (h * w) at every position; behind a 2x2 max pool, that
gradient reaches only each block's argmax.
"""

import dataclasses

import keras
import numpy as np
import pytest

from guidedbp import Explainer
from guidedbp.engine.options import MethodOptions, OcclusionOptions, ScoreCamOptions
from guidedbp.errors import ArgumentError

from .models import X4x4, cam_cnn

X = X4x4[0, :, :, 0]

# gap_cnn: conv "conv" (1x1, 4 channels) w = [1, -1, .5, 0], b = [0, 2, -.5, 1], relu:
#   A0 = x, A1 = relu(2 - x), A2 = relu(.5 x - .5), A3 = 1 (a constant channel);
#   sums over the 16 positions S = [23.25, 13.75, 5.75, 16].
# GAP -> dense W (4 x 2, no bias): class 0 = [2, -1, 1, .25], class 1 = [-1, 1, .5, -.5];
#   g = W[:, c] / 16 everywhere: class 0 [.125, -.0625, .0625, .015625] (mixed signs).
CONV_WEIGHTS = np.array([1, -1, 0.5, 0], np.float32)
CONV_BIAS = np.array([0, 2, -0.5, 1], np.float32)
DENSE = np.array([[2, -1], [-1, 1], [1, 0.5], [0.25, -0.5]], np.float32)


def gap_cnn(weights=CONV_WEIGHTS, bias=CONV_BIAS, dense=DENSE, activation="relu"):
    """4x4x1 -> Conv2D(k, 1x1, ``activation``) "conv" -> GlobalAveragePooling -> Dense."""
    channels = len(weights)
    inputs = keras.Input((4, 4, 1))
    conv = keras.layers.Conv2D(channels, 1, activation=activation, name="conv")
    top = keras.layers.Dense(dense.shape[1], use_bias=False, name="dense")
    model = keras.Model(inputs, top(keras.layers.GlobalAveragePooling2D()(conv(inputs))))
    conv.set_weights([np.reshape(weights, (1, 1, 1, channels)), np.asarray(bias, np.float32)])
    top.set_weights([dense])
    return model


def relu(values):
    return np.maximum(values, 0)


def features(x=X, weights=CONV_WEIGHTS, bias=CONV_BIAS, activation=relu) -> np.ndarray:
    """The 1x1 convolution's output, ``(4, 4, k)``, in float64."""
    return activation(x[:, :, None].astype(np.float64) * weights + bias)


def gradcam_plus_plus(activations: np.ndarray, gradient: np.ndarray) -> np.ndarray:
    """The closed form, literally: alpha = g^2 / (2 g^2 + sum_ab(A) g^3), 0 where that
    denominator is 0; w_k = sum_ab alpha relu(g); relu(sum_k w_k A_k)."""
    gradient = np.broadcast_to(gradient, activations.shape).astype(np.float64)
    denominator = 2 * gradient**2 + activations.sum(axis=(0, 1)) * gradient**3
    alpha = np.divide(gradient**2, denominator, out=np.zeros_like(gradient),
                      where=denominator != 0)
    weights = (alpha * relu(gradient)).sum(axis=(0, 1))
    return relu((weights * activations).sum(axis=-1))


def layercam(activations: np.ndarray, gradient: np.ndarray) -> np.ndarray:
    return relu((relu(gradient) * activations).sum(axis=-1))


def one_map(explainer, target):
    return explainer(X4x4, target=target)[0, :, :, 0]


@pytest.fixture(scope="module")
def model():
    return gap_cnn()


@pytest.mark.parametrize("target", [0, 1])
def test_gradcam_plus_plus_and_layercam_behind_average_pooling(model, target):
    gradient = DENSE[:, target] / 16
    for name, formula in [("gradcam++", gradcam_plus_plus), ("layercam", layercam)]:
        maps = one_map(Explainer(model, name), target)  # "conv" is 4x4: no resizing
        np.testing.assert_allclose(maps, formula(features(), gradient), rtol=1e-6, atol=1e-7,
                                   err_msg=name)
    if target == 0:
        # By hand, w_k = 16 relu(g_k) / (2 + S_k g_k) = [2 / 4.90625, 0, 1 / 2.359375, .25 / 2.25];
        # at (0, 0), x = 1: A = [1, 1, 0, 1], so the map is w0 + w3 (channel 1's g < 0 drops out).
        maps = one_map(Explainer(model, "gradcam++"), 0)
        assert maps[0, 0] == pytest.approx(2 / 4.90625 + 0.25 / 2.25, rel=1e-6)
        # LayerCAM at (0, 0): relu(g) . A = .125 * 1 + .015625 * 1.
        assert one_map(Explainer(model, "layercam"), 0)[0, 0] == pytest.approx(0.140625)


def cam_cnn_conv_gradient(target: int) -> np.ndarray:
    """d logit / d conv of tests.models.cam_cnn: its dense weight / 4 (the global average
    over 2x2 pooled positions) at each 2x2 block's argmax, 0 elsewhere."""
    activations = np.stack([relu(X), relu(2 - X)], axis=-1)
    dense = np.array([[2, -1], [-2, 1]])
    gradient = np.zeros((4, 4, 2))
    for channel in range(2):
        for top in (0, 2):
            for left in (0, 2):
                block = activations[top : top + 2, left : left + 2, channel]
                row, column = np.unravel_index(np.argmax(block), block.shape)
                gradient[top + row, left + column, channel] = dense[channel, target] / 4
    return gradient


@pytest.mark.parametrize("target", [0, 1])
def test_position_dependent_gradients_at_an_early_layer(target):
    # At "conv" (before the max pool) the gradient is nonzero only at the pool's argmaxes,
    # so LayerCAM keeps only those positions.
    model = cam_cnn()
    activations = np.stack([relu(X), relu(2 - X)], axis=-1)
    gradient = cam_cnn_conv_gradient(target)
    for name, formula in [("gradcam++", gradcam_plus_plus), ("layercam", layercam)]:
        maps = one_map(Explainer(model, name, layer="conv"), target)
        np.testing.assert_allclose(maps, formula(activations, gradient), rtol=1e-6, atol=1e-7,
                                   err_msg=name)
    if target == 0:
        # LayerCAM by hand: .5 * x at channel 0's argmaxes (1,1), (0,3), (2,0), (2,3).
        expected = np.array([[0, 0, 0, 0.75], [0, 1.5, 0, 0], [1.25, 0, 0, 2], [0, 0, 0, 0]])
        np.testing.assert_array_equal(one_map(Explainer(model, "layercam", layer="conv"), 0),
                                      expected.astype(np.float32))


def test_gradcam_plus_plus_at_the_default_layer_upsampled_nearest():
    # cam_cnn's default layer is the 2x2 pool: A0 = [[3, 1.5], [2.5, 4]] (sum 11), class 0
    # g = [.5, -.5] everywhere: alpha0 = 1 / (2 + 11 * .5) = 1 / 7.5, w0 = 4 * .5 / 7.5 = 4 / 15,
    # channel 1 drops out (g < 0): the map is 4/15 A0, each value on a 2x2 block.
    maps = one_map(Explainer(cam_cnn(), "gradcam++", upsample="nearest"), 0)
    expected = np.kron(np.array([[3, 1.5], [2.5, 4]]) * 4 / 15, np.ones((2, 2)))
    np.testing.assert_allclose(maps, expected, rtol=1e-6)


def test_gradcam_plus_plus_alpha_is_zero_where_its_denominator_is():
    # A linear conv: A0 = x - 157/64 (sum 23.25 - 39.25 = -16), A1 = x (sum 23.25).
    # Class 0 dense [2, 1]: g = [.125, .0625]; 2 + S0 g0 = 2 - 2 = 0, so alpha0 = 0 and
    # w = [0, 16 * .0625 / (2 + 23.25 * .0625)]: the map is x / 3.453125.
    weights, bias = np.array([1, 1], np.float32), np.array([-157 / 64, 0], np.float32)
    dense = np.array([[2, -1], [1, 1]], np.float32)
    model = gap_cnn(weights, bias, dense, activation=None)
    maps = one_map(Explainer(model, "gradcam++"), 0)
    assert np.all(np.isfinite(maps))
    np.testing.assert_allclose(maps, X / 3.453125, rtol=1e-6)
    expected = gradcam_plus_plus(features(weights=weights, bias=bias, activation=lambda a: a),
                                 dense[:, 0] / 16)
    np.testing.assert_allclose(maps, expected, rtol=1e-6)


def test_guided_gradcam_plus_plus_is_guided_backprop_times_gradcam_plus_plus():
    model = cam_cnn()
    for target in (0, 1, None):
        guided = Explainer(model, "guided")(X4x4, target)
        cam = Explainer(model, "gradcam++", upsample="nearest")(X4x4, target)
        both = Explainer(model, "guided-gradcam++", upsample="nearest")(X4x4, target)
        assert both.shape == (1, 4, 4, 1)
        np.testing.assert_allclose(both, guided * cam, rtol=1e-6, atol=1e-8)
    # Class 0 by hand: guided is .5 at (1,1), (0,3), (2,0), (2,3) (tests/test_methods.py),
    # the cam 4/15 of the pooled A0 block there: 3, 1.5, 2.5, 4.
    both = Explainer(model, "guided-gradcam++", upsample="nearest")(X4x4, 0)[0, :, :, 0]
    expected = np.zeros((4, 4))
    for (row, column), pooled in {(1, 1): 3, (0, 3): 1.5, (2, 0): 2.5, (2, 3): 4}.items():
        expected[row, column] = 0.5 * pooled * 4 / 15
    np.testing.assert_allclose(both, expected, rtol=1e-6)


def score_cam(model, channels, target):
    """Score-CAM by the recipe: mask the image with each channel scaled to [0, 1], score
    the masked images with the model itself, softmax over channels, weight the channels."""
    activations = features()[:, :, channels]
    low, high = activations.min(axis=(0, 1)), activations.max(axis=(0, 1))
    masks = np.where(high > low, (activations - low) / np.where(high > low, high - low, 1), 0)
    masked = (X4x4[0] * np.moveaxis(masks, -1, 0)[..., None]).astype(np.float32)
    logits = np.asarray(model(masked))[:, target].astype(np.float64)
    weights = np.exp(logits - logits.max())
    weights /= weights.sum()
    return relu((weights * activations).sum(axis=-1))


@pytest.mark.parametrize("target", [0, 1])
def test_score_cam_matches_the_recipe(model, target):
    maps = one_map(Explainer(model, "scorecam", batch_size=3), target)
    np.testing.assert_allclose(maps, score_cam(model, [0, 1, 2, 3], target), rtol=1e-5,
                               atol=1e-6)


def test_score_cam_keeps_the_channels_of_largest_mean_activation(model):
    # Channel means: [1.453125, .859375, .359375, 1]: the two largest are channels 0 and 3.
    means = features().mean(axis=(0, 1))
    assert np.argsort(-means)[:2].tolist() == [0, 3]
    maps = one_map(Explainer(model, "scorecam", max_channels=2), 0)
    np.testing.assert_allclose(maps, score_cam(model, [0, 3], 0), rtol=1e-5, atol=1e-6)
    everything = one_map(Explainer(model, "scorecam", max_channels=0), 0)
    np.testing.assert_allclose(everything, score_cam(model, [0, 1, 2, 3], 0), rtol=1e-5,
                               atol=1e-6)
    assert np.abs(everything - maps).max() > 1e-3


def test_the_layer_option_applies_to_every_class_activation_map():
    model = cam_cnn()
    for name in ("gradcam++", "guided-gradcam++", "layercam", "scorecam"):
        explainer = Explainer(model, name, layer="conv")
        assert explainer(X4x4).shape == (1, 4, 4, 1)
        assert "conv" in explainer.report.layer
    with pytest.raises(ArgumentError, match="layer='conv' only applies to gradcam, .*scorecam"):
        Explainer(model, ("guided", "occlusion"), layer="conv")
    mlp = keras.Sequential([keras.Input((4, 4, 1)), keras.layers.Flatten(), keras.layers.Dense(2)])
    for name in ("layercam", "scorecam"):
        with pytest.raises(ArgumentError, match="no 4-D feature map"):
            Explainer(mlp, name)(X4x4)


@pytest.fixture(scope="module")
def random_cnn():
    keras.utils.set_random_seed(11)
    inputs = keras.Input((8, 8, 3))
    x = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(inputs)
    x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.Conv2D(6, 3, padding="same", activation="relu")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(4, activation="softmax")(x))


CAMS = ("gradcam++", "guided-gradcam++", "layercam", "scorecam")


def test_top_k_and_classes_equal_explain_per_class(random_cnn):
    images = np.random.default_rng(2).normal(size=(3, 8, 8, 3)).astype(np.float32)
    explainer = Explainer(random_cnn, CAMS, batch_size=4)
    ranked = explainer.explain_top_k(images, 2)
    expected = np.argsort(-ranked[0].class_probabilities, axis=1, kind="stable")[:, :2]
    for column, explanation in enumerate(ranked):
        assert explanation.targets.tolist() == expected[:, column].tolist()
        alone = explainer.explain(images, expected[:, column])
        for name in CAMS:
            np.testing.assert_allclose(explanation.by_method[name], alone.by_method[name],
                                       rtol=1e-5, atol=1e-7, err_msg=name)
    for explanation, target in zip(explainer.explain_classes(images, [3, 1]), (3, 1)):
        alone = explainer.explain(images, target)
        for name in CAMS:
            np.testing.assert_allclose(explanation.by_method[name], alone.by_method[name],
                                       rtol=1e-5, atol=1e-7, err_msg=name)


def test_several_methods_equal_each_alone(random_cnn):
    images = np.random.default_rng(3).normal(size=(3, 8, 8, 3)).astype(np.float32)
    methods = ("guided", "gradcam", *CAMS, "occlusion")
    together = Explainer(random_cnn, methods, batch_size=5, max_channels=4)
    explanation = together.explain(images, [0, 1, 2])
    assert explanation.methods == methods
    for name in methods:
        alone = Explainer(random_cnn, name, batch_size=5, max_channels=4).explain(images,
                                                                                   [0, 1, 2])
        np.testing.assert_allclose(explanation.by_method[name], alone.maps, rtol=1e-5,
                                   atol=1e-7, err_msg=name)
        channels = 3 if name.startswith("guided") else 1  # guided-*: gradient times map
        assert alone.maps.shape == (3, 8, 8, channels), name
    # One traced gradient pass for every method (Score-CAM's feature map included), one
    # forward-only function for the masked and occluded copies.
    assert together.trace_count == 2
    assert together.report.method == ",".join(methods)


def test_new_options_have_flat_names_and_help():
    options = MethodOptions.of(max_channels=8, patch=4, stride=2, fill=0.0)
    assert options.scorecam == ScoreCamOptions(max_channels=8)
    assert options.occlusion == OcclusionOptions(patch=4, stride=2, fill=0.0)
    assert MethodOptions.of(**options.flat()) == options
    assert MethodOptions().flat()["max_channels"] == 32 and MethodOptions().flat()["fill"] == 127.5
    for kind in (ScoreCamOptions, OcclusionOptions):
        for spec in dataclasses.fields(kind):
            assert spec.metadata["help"] and spec.metadata["metavar"], spec.name
    for fields, message in [({"max_channels": -1}, "max_channels=-1"), ({"patch": 0}, "patch=0"),
                            ({"patch": 2, "stride": 3}, "stride=3 must not exceed patch=2"),
                            ({"fill": 256}, "fill=256"), ({"stride": 1.5}, "stride=1.5")]:
        with pytest.raises(ArgumentError, match=message):
            MethodOptions.of(**fields)
