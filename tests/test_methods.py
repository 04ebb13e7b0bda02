"""Grad-CAM, guided Grad-CAM, SmoothGrad and integrated gradients."""

import keras
import numpy as np
import pytest

from guidedbp import Explainer
from guidedbp.engine.methods import averaging as _averaging

from .models import X4x4, cam_cnn

# cam_cnn on X4x4. conv: ch0 = relu(x) = x, ch1 = relu(2 - x) =
#   [[1, 0, 2, .5], [1.5, 0, 1.75, 1.25], [0, 1.25, 1.875, 0], [.75, .25, 0, 1.625]].
# pool (2x2 max): A0 = [[3, 1.5], [2.5, 4]] (at x positions (1,1), (0,3), (2,0), (2,3)),
#                 A1 = [[1.5, 2], [1.25, 1.875]] (at (1,0), (0,2), (2,1), (2,2)).
# GAP: g = [2.75, 1.65625]; logits = [2*2.75 - 2*1.65625, -2.75 + 1.65625] = [2.1875, -1.09375].
# Grad-CAM at "pool", class 0: alpha = mean_ij d logit0 / dA = [2/4, -2/4] = [.5, -.5];
#   cam = relu(.5 A0 - .5 A1) = relu([[.75, -.25], [.625, 1.0625]]) = [[.75, 0], [.625, 1.0625]].
CAM_POOL = np.array([[0.75, 0.0], [0.625, 1.0625]], np.float32)
NEAREST = np.kron(CAM_POOL, np.ones((2, 2), np.float32))
# Bilinear with half-pixel centres, 2 -> 4: rows/cols weights
# [[1, 0], [.75, .25], [.25, .75], [0, 1]].
BILINEAR_WEIGHTS = np.array([[1, 0], [0.75, 0.25], [0.25, 0.75], [0, 1]], np.float32)
BILINEAR = BILINEAR_WEIGHTS @ CAM_POOL @ BILINEAR_WEIGHTS.T
# Guided backprop, class 0: d/dA0 = .5, d/dA1 = -.5 everywhere; max-pool routes them to the
#   argmax positions; the ReLU of ch1 gets -.5 -> clamped to 0; ch0 passes .5 (x > 0 there).
#   dx = 1 * d ch0 = .5 at (1,1), (0,3), (2,0), (2,3).
GUIDED = np.zeros((4, 4), np.float32)
GUIDED[1, 1] = GUIDED[0, 3] = GUIDED[2, 0] = GUIDED[2, 3] = 0.5
# Guided Grad-CAM = guided * nearest cam: (1,1) .5*.75, (0,3) .5*0, (2,0) .5*.625, (2,3) .5*1.0625.
GUIDED_GRADCAM = GUIDED * NEAREST
# Grad-CAM at "conv" (4x4, no upsampling): d logit0 / d ch0 = .5 at ch0's argmax positions,
#   d/d ch1 = -.5 at ch1's; alpha = [.5 * 4 / 16, -.5 * 4 / 16] = [.125, -.125];
#   cam = .125 * relu(x - relu(2 - x)).
CAM_CONV = 0.125 * np.maximum(X4x4[0, :, :, 0] - np.maximum(2 - X4x4[0, :, :, 0], 0), 0)


@pytest.fixture(scope="module")
def model():
    return cam_cnn()


def test_gradcam_nearest_matches_hand_computation(model):
    explainer = Explainer(model, "gradcam", upsample="nearest")
    maps = explainer(X4x4)
    assert maps.shape == (1, 4, 4, 1)
    np.testing.assert_array_equal(maps[0, :, :, 0], NEAREST)
    assert explainer.report.layer.endswith("pool_1") or "pool" in explainer.report.layer


def test_gradcam_bilinear_matches_hand_computation(model):
    maps = Explainer(model, "gradcam")(X4x4, target=0)
    np.testing.assert_allclose(maps[0, :, :, 0], BILINEAR, rtol=1e-6)


def test_guided_gradcam_matches_hand_computation(model):
    np.testing.assert_array_equal(Explainer(model, "guided")(X4x4)[0, :, :, 0], GUIDED)
    maps = Explainer(model, "guided-gradcam", upsample="nearest")(X4x4)
    assert maps.shape == (1, 4, 4, 1)
    np.testing.assert_array_equal(maps[0, :, :, 0], GUIDED_GRADCAM)


def test_gradcam_at_a_named_layer(model):
    maps = Explainer(model, "gradcam", layer="conv")(X4x4)
    np.testing.assert_array_equal(maps[0, :, :, 0], CAM_CONV)


def test_gradcam_inside_a_nested_model():
    nested = cam_cnn(nested=True)
    np.testing.assert_array_equal(
        Explainer(nested, "gradcam", upsample="nearest")(X4x4)[0, :, :, 0], NEAREST)
    np.testing.assert_array_equal(
        Explainer(nested, "gradcam", layer="conv")(X4x4)[0, :, :, 0], CAM_CONV)
    np.testing.assert_array_equal(
        Explainer(nested, "guided-gradcam", upsample="nearest")(X4x4)[0, :, :, 0], GUIDED_GRADCAM)


def test_gradcam_class_1_and_errors(model):
    # class 1: alpha = [-1/4, 1/4];
    # cam = relu(.25 (A1 - A0)) = relu(.25 [[-1.5, .5], [-1.25, -2.125]]).
    maps = Explainer(model, "gradcam", upsample="nearest")(X4x4, target=1)
    np.testing.assert_array_equal(maps[0, :, :, 0],
                                  np.kron([[0, 0.125], [0, 0]], np.ones((2, 2))).astype(np.float32))
    with pytest.raises(ValueError, match="no layer named 'nope'"):
        Explainer(model, "gradcam", layer="nope")(X4x4)
    with pytest.raises(ValueError, match="only applies to gradcam"):
        Explainer(model, "guided", layer="conv")
    mlp = keras.Sequential([keras.Input((4, 4, 1)), keras.layers.Flatten(), keras.layers.Dense(2)])
    with pytest.raises(ValueError, match="no 4-D feature map"):
        Explainer(mlp, "gradcam")(X4x4)


@pytest.fixture(scope="module")
def random_cnn():
    keras.utils.set_random_seed(3)
    inputs = keras.Input((8, 8, 3))
    x = keras.layers.Conv2D(6, 3, padding="same", activation="relu")(inputs)
    x = keras.layers.Conv2D(6, 3, padding="same", activation="relu")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(4, activation="softmax")(x))


@pytest.fixture(scope="module")
def images():
    return np.random.default_rng(8).uniform(0, 255, (3, 8, 8, 3)).astype(np.float32)


@pytest.mark.parametrize("method", ["guided", "vanilla", "gradcam"])
def test_smoothgrad_noise_zero_is_the_base_method(random_cnn, images, method):
    base = Explainer(random_cnn, method)(images)
    np.testing.assert_array_equal(Explainer(random_cnn, method, smooth=8, noise=0.0)(images), base)


def test_smoothgrad_is_the_mean_over_seeded_noisy_copies(random_cnn, images):
    smooth = Explainer(random_cnn, "guided", smooth=4, noise=0.15, seed=7, batch_size=5)
    maps = smooth(images, target=2)
    plain = Explainer(random_cnn, "guided")
    expected = []
    for index, image in enumerate(images):
        rng = np.random.default_rng([7, index])
        sigma = 0.15 * (image.max() - image.min())
        copies = (image[None] + rng.normal(0, sigma, (4, *image.shape))).astype(np.float32)
        expected.append(plain(copies, 2).mean(axis=0))
    np.testing.assert_allclose(maps, np.stack(expected), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(smooth(images, target=2), maps)  # same seed, same map
    other = Explainer(random_cnn, "guided", smooth=4, noise=0.15, seed=8)(images, target=2)
    assert np.abs(other - maps).max() > 1e-3 * np.abs(maps).max()


def test_smoothgrad_keeps_the_clean_images_class(random_cnn, images):
    explanation = Explainer(random_cnn, "vanilla", smooth=4, noise=0.5).explain(images)
    clean = Explainer(random_cnn, "vanilla").explain(images)
    np.testing.assert_array_equal(explanation.targets, clean.targets)
    np.testing.assert_array_equal(explanation.probabilities, clean.probabilities)


def test_integrated_gradients_completeness(random_cnn, images):
    explainer = Explainer(random_cnn, "integrated-gradients", steps=128, batch_size=64)
    explanation = explainer.explain(images)
    logits_x = explanation.logits
    baseline_logits = Explainer(random_cnn, "vanilla").explain(
        np.zeros_like(images), explanation.targets).logits
    sums = explanation.maps.reshape(len(images), -1).sum(axis=1)
    difference = logits_x - baseline_logits
    assert np.all(np.abs(sums - difference) <= 0.01 * np.abs(difference))


def test_integrated_gradients_on_a_linear_model_is_exact():
    # f(x) = w.x: IG = (x - x0) * w exactly, for any number of steps.
    inputs = keras.Input((1, 1, 3))
    dense = keras.layers.Dense(2, use_bias=False)
    model = keras.Model(inputs, keras.layers.Flatten()(dense(inputs)))
    dense.set_weights([np.array([[1, 0], [-2, 0], [0.5, 0]], np.float32)])
    image = np.array([[[[4.0, 1.0, 2.0]]]], np.float32)
    white = [4 - 255, -2 * (1 - 255), 0.5 * (2 - 255)]
    for baseline, expected in [("black", [4, -2, 1]), ("white", white)]:
        maps = Explainer(model, "integrated-gradients", steps=3, baseline=baseline)(image, 0)
        np.testing.assert_allclose(maps.ravel(), expected, rtol=1e-6)
    # With the tf preprocessing, black is -1 and white is +1 in input space.
    maps = Explainer(model, "integrated-gradients", steps=2, baseline="black",
                     preprocess="tf")(image, 0)
    np.testing.assert_allclose(maps.ravel(), [5, -4, 1.5], rtol=1e-6)


def test_blur_baseline_and_bad_baselines():
    # A unit impulse in a 40x40 image, sigma = 40 / 20 = 2: the blur is the sampled
    # Gaussian, normalised: peak 1 / sum_k exp(-k^2 / 8) squared, symmetric.
    image = np.zeros((1, 40, 40, 1), np.float32)
    image[0, 20, 20, 0] = 1.0
    blurred = _averaging.make_baselines(image, "blur", np.zeros(1), np.ones(1))
    assert blurred.shape == image.shape
    assert blurred.sum() == pytest.approx(1.0, rel=1e-5)  # mass preserved away from edges
    kernel = np.exp(-0.5 * (np.arange(-6, 7) / 2.0) ** 2)
    assert blurred[0, 20, 20, 0] == pytest.approx(1 / kernel.sum() ** 2, rel=1e-5)
    assert blurred[0, 20, 23, 0] == pytest.approx(blurred[0, 17, 20, 0], rel=1e-6)
    with pytest.raises(ValueError, match="baseline='grey'"):
        Explainer(cam_cnn(), "integrated-gradients", baseline="grey")
    with pytest.raises(ValueError, match="does not broadcast"):
        _averaging.make_baselines(image, np.zeros((2, 2)), np.zeros(1), np.ones(1))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"upsample": "cubic"}, "upsample='cubic'"), ({"smooth": -1}, "smooth=-1"),
     ({"noise": -0.1}, "noise=-0.1"), ({"steps": 0}, "steps=0")],
)
def test_bad_method_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Explainer(cam_cnn(), "gradcam", **kwargs)
