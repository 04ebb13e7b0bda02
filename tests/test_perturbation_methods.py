"""Occlusion, Score-CAM's masks and the forward-only ``predict``: exact answers from
linear models, the recipe on a pooled CNN, and how they run (batches, traces, classes).
"""

import keras
import numpy as np
import pytest

from guidedbp import Explainer
from guidedbp.errors import ArgumentError

from .models import X12, X4x4, sigmoid_head

# A linear model: logit_c = sum(W[..., c] * x). Occluding a region R with fill f lowers
# logit_c by sum_R W[..., c] * (x - f), exactly: the expected maps below follow from that.
# Dyadic weights and inputs keep float32 sums exact.
WEIGHTS = (np.arange(4 * 4 * 2 * 3).reshape(4, 4, 2, 3) % 7 - 3).astype(np.float32) / 4
X_TWO = np.concatenate([X4x4, X4x4[:, ::-1] * 2], axis=-1)  # (1, 4, 4, 2)


def linear_model(channels: int = 1, classes: int = 2) -> keras.Model:
    inputs = keras.Input((4, 4, channels))
    dense = keras.layers.Dense(classes, use_bias=False)
    model = keras.Model(inputs, dense(keras.layers.Flatten()(inputs)))
    dense.set_weights([WEIGHTS[:, :, :channels, :classes].reshape(16 * channels, classes)])
    return model


def occlusion_by_hand(image, target, windows, fill, channels=1):
    """Mean over the windows covering each pixel of sum_window W * (x - fill)."""
    weights = WEIGHTS[:, :, :channels, target]
    total, count = np.zeros((4, 4)), np.zeros((4, 4))
    for top, bottom, left, right in windows:
        region = (slice(top, bottom), slice(left, right))
        total[region] += (weights[region] * (image[region] - np.asarray(fill))).sum()
        count[region] += 1
    return total / count


def grid(starts, patch, size=4):
    return [(top, min(top + patch, size), left, min(left + patch, size))
            for top in starts for left in starts]


@pytest.mark.parametrize(("patch", "stride", "windows"), [
    (2, 2, grid([0, 2], 2)),  # four disjoint blocks
    (2, 1, grid([0, 1, 2], 2)),  # overlapping: the middle pixels average four drops
    (3, 2, grid([0, 2], 3)),  # the second patch is cut off by the edge: rows/columns 2-3
    (4, 1, grid([0], 4)),  # one patch: the whole image
])
def test_occlusion_is_the_mean_score_drop_of_the_covering_patches(patch, stride, windows):
    explainer = Explainer(linear_model(), "occlusion", patch=patch, stride=stride, fill=0.0)
    for target in (0, 1):
        maps = explainer(X4x4, target)
        assert maps.shape == (1, 4, 4, 1)
        np.testing.assert_allclose(maps[0, :, :, 0],
                                   occlusion_by_hand(X4x4[0], target, windows, 0.0), rtol=1e-6)


def test_occlusion_defaults_and_fill_in_pixels():
    # 4x4 images: patch 4 // 4 = 1, stride 1, so each pixel is its own patch, and the map is
    # W * (x - fill); the default fill is mid-gray, 127.5, here the identity's 127.5.
    maps = Explainer(linear_model(), "occlusion")(X4x4, 0)[0, :, :, 0]
    np.testing.assert_allclose(maps, WEIGHTS[:, :, 0, 0] * (X4x4[0, :, :, 0] - 127.5), rtol=1e-6)
    # fill is a 0-255 pixel, mapped per channel through pixel_to_input: 255 -> [1, 2].
    def to_input(pixels):
        return pixels / 255 * np.array([1.0, 2.0], np.float32)

    explainer = Explainer(linear_model(channels=2), "occlusion", pixel_to_input=to_input,
                          fill=255.0, patch=2, stride=2)
    expected = occlusion_by_hand(X_TWO[0], 1, grid([0, 2], 2), [1.0, 2.0], channels=2)
    np.testing.assert_allclose(explainer(X_TWO, 1)[0, :, :, 0], expected, rtol=1e-6)


def test_occlusion_geometry_errors():
    with pytest.raises(ArgumentError, match="patch=5 is larger than the 4x4 images"):
        Explainer(linear_model(), "occlusion", patch=5)(X4x4)
    with pytest.raises(ArgumentError, match="stride=3 must not exceed patch=1"):
        Explainer(linear_model(), "occlusion", stride=3)(X4x4)


def test_occlusion_classes_share_the_copies_and_traces_are_counted():
    model = linear_model(classes=3)
    images = np.random.default_rng(1).uniform(0, 4, (5, 4, 4, 1)).astype(np.float32)
    explainer = Explainer(model, "occlusion", patch=2, stride=1, fill=0.0, batch_size=7)
    explanation = explainer.explain(images)
    # One traced pass resolves the classes (no map in it), one forward-only function
    # scores the occluded copies.
    assert explainer.trace_count == 2
    scores, _ = explainer.predict(images)
    np.testing.assert_array_equal(explanation.targets, scores.argmax(axis=1))
    ranked = explainer.explain_top_k(images, 3)
    assert explainer.trace_count == 3  # the three-column pass; the copies' function is reused
    expected = np.argsort(-scores, axis=1, kind="stable")
    for column, explained in enumerate(ranked):
        np.testing.assert_array_equal(explained.targets, expected[:, column])
        alone = explainer.explain(images, expected[:, column])
        np.testing.assert_allclose(explained.maps, alone.maps, rtol=1e-6, atol=1e-6)
        for index, image in enumerate(images):
            np.testing.assert_allclose(
                explained.maps[index, :, :, 0],
                occlusion_by_hand(image, expected[index, column], grid([0, 1, 2], 2), 0.0),
                rtol=1e-5, atol=1e-5)
    for explained, target in zip(explainer.explain_classes(images, [2, 0]), (2, 0)):
        np.testing.assert_allclose(explained.maps, explainer.explain(images, target).maps,
                                   rtol=1e-6, atol=1e-6)
    assert explainer.trace_count == 4  # the two-column pass


def test_predict_returns_logits_and_the_models_probabilities():
    keras.utils.set_random_seed(5)
    inputs = keras.Input((6, 6, 2))
    x = keras.layers.Conv2D(3, 3, activation="relu")(inputs)
    logits = keras.layers.Dense(4)(keras.layers.GlobalAveragePooling2D()(x))
    model = keras.Model(inputs, keras.layers.Softmax()(logits))
    images = np.random.default_rng(2).normal(size=(5, 6, 6, 2)).astype(np.float32)
    explainer = Explainer(model, "guided", batch_size=2)
    scores, probabilities = explainer.predict(images)
    assert scores.dtype == probabilities.dtype == np.float32
    assert scores.shape == probabilities.shape == (5, 4)
    np.testing.assert_allclose(scores, keras.Model(inputs, logits)(images), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(probabilities, model(images), rtol=1e-5, atol=1e-7)
    explainer.predict(images[:3])
    assert explainer.trace_count == 1  # once per input signature, whatever the batch
    explanation = explainer.explain(images, [0, 1, 2, 3, 0])
    np.testing.assert_allclose(explanation.logits, scores[np.arange(5), [0, 1, 2, 3, 0]],
                               rtol=1e-5, atol=1e-6)
    with pytest.raises(ArgumentError, match=r"images\[None\]"):
        explainer.predict(images[0])
    # One sigmoid logit z = 1 (tests/models.py's sigmoid_head on x = (1, 2)): classes -z, z.
    scores, probabilities = Explainer(sigmoid_head()).predict(X12)
    np.testing.assert_allclose(scores, [[-1, 1]], rtol=1e-6)
    np.testing.assert_allclose(probabilities, [[1 - 1 / (1 + np.e**-1), 1 / (1 + np.e**-1)]],
                               rtol=1e-6)


def pooled_cnn() -> keras.Model:
    """8x8x1 -> Conv2D(3, 3x3, same, relu) -> MaxPool 2 "pool" (4x4x3) -> GAP -> Dense(2)."""
    keras.utils.set_random_seed(7)
    inputs = keras.Input((8, 8, 1))
    x = keras.layers.Conv2D(3, 3, padding="same", activation="relu")(inputs)
    x = keras.layers.MaxPooling2D(2, name="pool")(x)
    return keras.Model(inputs, keras.layers.Dense(2)(keras.layers.GlobalAveragePooling2D()(x)))


def bilinear(size_in: int, size_out: int) -> np.ndarray:
    """The ``(size_out, size_in)`` matrix of a bilinear resize with half-pixel centres."""
    matrix = np.zeros((size_out, size_in))
    for row in range(size_out):
        centre = np.clip((row + 0.5) * size_in / size_out - 0.5, 0, size_in - 1)
        low = int(np.floor(centre))
        high = min(low + 1, size_in - 1)
        matrix[row, low] += 1 - (centre - low)
        matrix[row, high] += centre - low
    return matrix


def test_score_cam_resizes_masks_bilinearly_and_the_map_like_gradcam():
    model = pooled_cnn()
    images = np.random.default_rng(3).uniform(0, 1, (2, 8, 8, 1)).astype(np.float32)
    maps = Explainer(model, "scorecam", upsample="nearest", batch_size=4)(images, 1)
    activations = np.asarray(keras.Model(model.input, model.get_layer("pool").output)(images))
    resize = bilinear(4, 8)
    for image, feature, got in zip(images, activations.astype(np.float64), maps):
        upsampled = np.einsum("ia,abk,jb->ijk", resize, feature, resize)  # (8, 8, 3)
        low, spread = upsampled.min(axis=(0, 1)), np.ptp(upsampled, axis=(0, 1))
        scaled = np.divide(upsampled - low, spread, out=np.zeros_like(upsampled),
                           where=spread > 0)  # a constant channel masks everything
        masks = np.moveaxis(scaled, -1, 0)
        logits = np.asarray(model((image * masks[..., None]).astype(np.float32)))[:, 1]
        weights = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
        cam = np.maximum((weights * feature).sum(axis=-1), 0)
        np.testing.assert_allclose(got[:, :, 0], np.kron(cam, np.ones((2, 2))), rtol=1e-4,
                                   atol=1e-6)


@pytest.mark.parametrize("method", ["occlusion", "scorecam"])
def test_smoothgrad_averages_perturbation_maps_over_the_noisy_copies(method):
    model = pooled_cnn()
    images = np.random.default_rng(4).uniform(0, 1, (2, 8, 8, 1)).astype(np.float32)
    options = {"patch": 4, "stride": 4, "max_channels": 2}
    smooth = Explainer(model, method, smooth=3, noise=0.2, seed=9, batch_size=4, **options)
    explanation = smooth.explain(images, [0, 1])
    plain = Explainer(model, method, **options)
    np.testing.assert_array_equal(explanation.targets, [0, 1])
    for index, image in enumerate(images):
        rng = np.random.default_rng([9, index])
        sigma = 0.2 * float(image.max() - image.min())
        copies = (image[None] + rng.normal(0, sigma, (3, *image.shape))).astype(np.float32)
        expected = plain(copies, index).mean(axis=0)
        np.testing.assert_allclose(explanation.maps[index], expected, rtol=1e-5, atol=1e-6)
