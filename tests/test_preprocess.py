"""Tests for guidedbp.models.preprocess and guidedbp.models.resizing: pixel modes, the Keras
table, fit and Placement."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import guidedbp.models.resizing as resizing_module
from guidedbp.models.preprocess import (
    KERAS_APPLICATIONS,
    PREPROCESS_MODES,
    KerasApplication,
    preprocess,
)
from guidedbp.models.resizing import (
    RESIZE_MODES,
    Placement,
    draft_side,
    fit,
    resize_map,
    shown_size,
)

# --- preprocess ----------------------------------------------------------------------

PIXELS = np.array([[[0, 127.5, 255], [10, 20, 30]]], dtype=np.float32)  # (1, 2, 3)


def test_modes_tuple():
    assert PREPROCESS_MODES == ("none", "scale01", "tf", "caffe", "torch")


def test_none_is_float32_copy():
    pixels = np.array([[[1, 2, 3]]], dtype=np.uint8)
    out = preprocess(pixels, "none")
    assert out.dtype == np.float32
    assert out.tolist() == [[[1.0, 2.0, 3.0]]]
    floats = PIXELS.copy()
    out = preprocess(floats, "none")
    out[0, 0, 0] = 99.0
    assert floats[0, 0, 0] == 0.0  # the caller's array is not shared


def test_scale01():
    expected = [[[0.0, 0.5, 1.0], [10 / 255, 20 / 255, 30 / 255]]]
    np.testing.assert_allclose(preprocess(PIXELS, "scale01"), expected, rtol=1e-6)


def test_tf():
    expected = [[[-1.0, 0.0, 1.0], [10 / 127.5 - 1, 20 / 127.5 - 1, 30 / 127.5 - 1]]]
    np.testing.assert_allclose(preprocess(PIXELS, "tf"), expected, rtol=1e-6, atol=1e-7)


def test_caffe_flips_to_bgr_and_subtracts_bgr_mean():
    out = preprocess(PIXELS, "caffe")
    expected = [
        [[255 - 103.939, 127.5 - 116.779, 0 - 123.68], [30 - 103.939, 20 - 116.779, 10 - 123.68]]
    ]
    np.testing.assert_allclose(out, expected, rtol=1e-6)


def test_torch():
    out = preprocess(PIXELS, "torch")
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    expected = (PIXELS.astype(np.float64) / 255 - mean) / std
    np.testing.assert_allclose(out, expected, rtol=1e-5)
    assert out[0, 0, 0] == pytest.approx(-0.485 / 0.229, rel=1e-6)


@pytest.mark.parametrize("mode", PREPROCESS_MODES)
def test_batch_and_single_agree_and_input_is_untouched(mode):
    rng = np.random.default_rng(0)
    batch = rng.integers(0, 256, (2, 3, 4, 3), dtype=np.uint8)
    before = batch.copy()
    out = preprocess(batch, mode)
    assert out.shape == (2, 3, 4, 3) and out.dtype == np.float32
    np.testing.assert_array_equal(out[1], preprocess(batch[1], mode))
    np.testing.assert_array_equal(out, preprocess(batch.astype(np.float64), mode))
    np.testing.assert_array_equal(batch, before)


@pytest.mark.parametrize("mode", ["none", "scale01", "tf"])
def test_single_channel_modes(mode):
    gray = np.array([[[0], [255]]], dtype=np.uint8)
    out = preprocess(gray, mode)
    assert out.shape == (1, 2, 1)
    low, high = {"none": (0, 255), "scale01": (0, 1), "tf": (-1, 1)}[mode]
    assert out[0, :, 0].tolist() == [low, high]


@pytest.mark.parametrize("mode", ["caffe", "torch"])
@pytest.mark.parametrize("channels", [1, 4])
def test_rgb_only_modes_refuse_other_channel_counts(mode, channels):
    with pytest.raises(ValueError, match=f"needs 3 \\(RGB\\) channels, got {channels}"):
        preprocess(np.zeros((2, 2, channels), np.uint8), mode)


def test_unknown_mode_lists_modes():
    with pytest.raises(ValueError) as caught:
        preprocess(PIXELS, "inception")
    message = str(caught.value)
    assert "'inception'" in message
    assert all(mode in message for mode in PREPROCESS_MODES)


@pytest.mark.parametrize("shape", [(3,), (4, 3), (1, 1, 2, 2, 3)])
def test_bad_shape(shape):
    with pytest.raises(ValueError, match=re.escape(f"got shape {shape}")):
        preprocess(np.zeros(shape), "none")


@pytest.mark.parametrize("dtype", [np.bool_, np.complex64, object])
def test_bad_dtype(dtype):
    with pytest.raises(ValueError, match="integer or float"):
        preprocess(np.zeros((2, 2, 3), dtype=dtype), "none")


# --- KERAS_APPLICATIONS against the installed Keras ----------------------------------


@pytest.fixture(scope="module")
def keras_constructors():
    keras = pytest.importorskip("keras")
    applications = keras.applications
    return {
        name: getattr(applications, name)
        for name in dir(applications)
        if name[:1].isupper() and inspect.isfunction(getattr(applications, name))
    }


def test_table_lists_every_keras_application(keras_constructors):
    assert len(keras_constructors) >= 40
    expected = {name.lower(): name for name in keras_constructors}
    assert set(KERAS_APPLICATIONS) == set(expected)
    for key, entry in KERAS_APPLICATIONS.items():
        assert isinstance(entry, KerasApplication)
        assert entry.name == expected[key]
        assert entry.preprocess in PREPROCESS_MODES


def test_table_modes_match_keras_preprocess_input(keras_constructors):
    pixels = np.random.default_rng(7).uniform(0, 255, (2, 5, 6, 3)).astype(np.float32)
    for name, constructor in keras_constructors.items():
        entry = KERAS_APPLICATIONS[name.lower()]
        keras_preprocess = importlib.import_module(constructor.__module__).preprocess_input
        theirs = np.asarray(keras_preprocess(pixels.copy()), dtype=np.float64)
        ours = preprocess(pixels, entry.preprocess)
        assert np.abs(ours - theirs).max() <= 1e-4, name
        if entry.preprocess == "none":
            np.testing.assert_array_equal(theirs, pixels, err_msg=name)  # identity in Keras 3


def test_expected_families():
    modes = {key: entry.preprocess for key, entry in KERAS_APPLICATIONS.items()}
    assert modes["resnet50"] == modes["vgg16"] == "caffe"
    assert modes["resnet50v2"] == modes["inceptionv3"] == modes["xception"] == "tf"
    assert modes["densenet121"] == "torch"
    assert modes["mobilenetv3small"] == modes["efficientnetb0"] == modes["convnexttiny"] == "none"
    assert KERAS_APPLICATIONS["nasnetlarge"] == ("NASNetLarge", "tf", 331)


def test_table_default_sizes_match_keras(keras_constructors):
    # With ImageNet weights and a classifier top, Keras checks the input shape against
    # the default before building or downloading anything, and names the default.
    for name, constructor in keras_constructors.items():
        entry = KERAS_APPLICATIONS[name.lower()]
        with pytest.raises(ValueError) as caught:
            constructor(weights="imagenet", include_top=True, input_shape=(7, 7, 3))
        message = str(caught.value)
        if name.startswith("MobileNetV3"):
            # Any size >= 32 is accepted; the ImageNet weights are for 224 x 224.
            assert "at least 32x32" in message, name
            assert entry.default_size == 224
            continue
        found = re.search(r"should be \((\d+), (\d+), 3\)", message)
        assert found, f"{name}: {message}"
        assert (entry.default_size, entry.default_size) == tuple(map(int, found.groups())), name


# --- fit -----------------------------------------------------------------------------


def test_resize_modes_tuple_and_default():
    assert RESIZE_MODES == ("stretch", "crop", "pad")
    assert inspect.signature(fit).parameters["mode"].default == "stretch"


def split_image(height: int, width: int) -> np.ndarray:
    """Left half (200, 0, 0), right half (0, 0, 200)."""
    image = np.zeros((height, width, 3), np.uint8)
    image[:, : width // 2] = (200, 0, 0)
    image[:, width // 2 :] = (0, 0, 200)
    return image


def test_stretch_changes_aspect_and_keeps_halves():
    image = split_image(40, 80)
    out, placement = fit(image, (30, 20))  # default: stretch
    assert out.shape == (30, 20, 3) and out.dtype == np.uint8
    assert np.all(out[:, :9] == (200, 0, 0))
    assert np.all(out[:, 11:] == (0, 0, 200))
    assert placement == Placement("stretch", (40, 80), (30, 20), (30, 20), (0, 0, 30, 20))
    assert placement.content_box == (0, 0, 30, 20)
    assert placement.original_box == (0, 0, 40, 80)


def test_same_size_stretch_is_identity():
    image = np.random.default_rng(1).integers(0, 256, (12, 9, 3), dtype=np.uint8)
    out, placement = fit(image, (12, 9))
    np.testing.assert_array_equal(out, image)
    back = placement.to_original(out.astype(np.float32))
    np.testing.assert_array_equal(back, image.astype(np.float32))


def test_crop_keeps_the_centre():
    image = np.full((100, 200, 3), 10, np.uint8)
    image[:, 50:150] = 200
    image[:, 150:] = 90
    out, placement = fit(image, (50, 50), "crop")
    assert out.shape == (50, 50, 3)
    assert placement.scaled_size == (50, 100)
    assert placement.box == (0, 25, 50, 75)
    assert placement.content_box == (0, 0, 50, 50)
    assert placement.original_box == (0, 50, 100, 150)
    assert np.all(out[:, 1:49] == 200)


def test_crop_at_scale_one_is_an_exact_slice():
    image = np.random.default_rng(2).integers(0, 256, (100, 60, 3), dtype=np.uint8)
    out, placement = fit(image, (60, 60), "crop")
    np.testing.assert_array_equal(out, image[20:80])
    assert placement.box == (20, 0, 80, 60)
    back = placement.to_original(out.astype(np.float32))
    assert back.shape == (100, 60, 3)
    np.testing.assert_array_equal(back[20:80], image[20:80].astype(np.float32))
    assert np.all(back[:20] == 0) and np.all(back[80:] == 0)


def test_pad_centres_on_zeros():
    image = np.random.default_rng(3).integers(1, 256, (50, 100, 3), dtype=np.uint8)
    out, placement = fit(image, (100, 100), "pad")
    assert placement.scaled_size == (50, 100)
    assert placement.box == (-25, 0, 75, 100)
    assert placement.content_box == (25, 0, 75, 100)
    assert placement.original_box == (0, 0, 50, 100)
    np.testing.assert_array_equal(out[25:75], image)
    assert np.all(out[:25] == 0) and np.all(out[75:] == 0)


def test_pad_downscale_single_channel():
    image = np.full((40, 20, 1), 77, np.uint8)
    out, placement = fit(image, (10, 10), "pad")
    assert out.shape == (10, 10, 1)
    assert placement.scaled_size == (10, 5)
    assert placement.content_box == (0, 2, 10, 7)
    assert np.all(out[:, 2:7] == 77)
    assert np.all(out[:, :2] == 0) and np.all(out[:, 7:] == 0)


def test_fit_is_deterministic_and_leaves_input_alone():
    image = np.random.default_rng(4).integers(0, 256, (33, 47, 3), dtype=np.uint8)
    before = image.copy()
    for mode in RESIZE_MODES:
        first, p1 = fit(image, (21, 17), mode)
        second, p2 = fit(image, (21, 17), mode)
        np.testing.assert_array_equal(first, second)
        assert p1 == p2
    np.testing.assert_array_equal(image, before)


@pytest.mark.parametrize("size", [(0, 5), (5, -1), (2.0, 3), (1, 2, 3), 5, (True, 3)])
def test_fit_bad_size(size):
    with pytest.raises(ValueError, match="size must be"):
        fit(np.zeros((4, 4, 3), np.uint8), size)


@pytest.mark.parametrize(
    "image",
    [np.zeros((4, 4, 3), np.float32), np.zeros((4, 4), np.uint8), np.zeros((4, 4, 4), np.uint8)],
)
def test_fit_bad_image(image):
    with pytest.raises(ValueError, match="image must be a uint8 array"):
        fit(image, (2, 2))


def test_fit_unknown_mode():
    with pytest.raises(ValueError, match="unknown resize mode 'letterbox'; expected one of"):
        fit(np.zeros((4, 4, 3), np.uint8), (2, 2), "letterbox")


# --- Placement.to_original -----------------------------------------------------------


def test_stretch_back_constant_map_two_channels():
    _, placement = fit(np.zeros((37, 53, 3), np.uint8), (16, 16))
    constant = np.stack([np.full((16, 16), 0.25), np.full((16, 16), -3.0)], axis=2)
    back = placement.to_original(constant)
    assert back.shape == (37, 53, 2) and back.dtype == np.float32
    np.testing.assert_allclose(back[..., 0], 0.25, rtol=1e-6)
    np.testing.assert_allclose(back[..., 1], -3.0, rtol=1e-6)


def test_stretch_back_keeps_a_gradient_monotone():
    _, placement = fit(np.zeros((20, 60, 3), np.uint8), (10, 10))
    ramp = np.tile(np.arange(10, dtype=np.float32), (10, 1))[..., None]
    back = placement.to_original(ramp)[..., 0]
    assert back.shape == (20, 60)
    assert np.all(np.diff(back, axis=1) >= 0)
    np.testing.assert_allclose(back, np.tile(back[0], (20, 1)))
    assert back[0, 0] == pytest.approx(0.0) and back[0, -1] == pytest.approx(9.0)


def test_crop_back_is_zero_outside_the_box():
    _, placement = fit(np.zeros((100, 200, 3), np.uint8), (50, 50), "crop")
    back = placement.to_original(np.ones((50, 50, 1), np.float32))
    assert back.shape == (100, 200, 1)
    assert np.all(back[:, :50] == 0) and np.all(back[:, 150:] == 0)
    np.testing.assert_allclose(back[:, 50:150], 1.0, rtol=1e-6)


def test_pad_back_drops_the_padding():
    image = np.random.default_rng(5).integers(0, 256, (50, 100, 3), dtype=np.uint8)
    fitted, placement = fit(image, (100, 100), "pad")
    saliency = fitted.astype(np.float32)
    saliency[:25] = 999.0  # values on the padding must not reach the original grid
    saliency[75:] = 999.0
    back = placement.to_original(saliency)
    np.testing.assert_array_equal(back, image.astype(np.float32))


def test_pad_back_with_rescale():
    _, placement = fit(np.zeros((50, 100, 3), np.uint8), (50, 50), "pad")
    assert placement.content_box == (12, 0, 37, 50)
    saliency = np.full((50, 50), 5.0, np.float32)
    saliency[12:37] = 1.0
    back = placement.to_original(saliency)  # 2-D in, 2-D out
    assert back.shape == (50, 100)
    np.testing.assert_allclose(back, 1.0, rtol=1e-6)


@pytest.mark.parametrize("shape", [(10, 10, 1), (8, 9), (8, 8, 2, 1), (8,)])
def test_to_original_bad_shape(shape):
    _, placement = fit(np.zeros((20, 20, 3), np.uint8), (8, 8))
    with pytest.raises(ValueError, match=re.escape(f"got shape {shape}")):
        placement.to_original(np.zeros(shape, np.float32))


def test_placement_is_frozen():
    _, placement = fit(np.zeros((4, 4, 3), np.uint8), (2, 2))
    with pytest.raises(dataclasses.FrozenInstanceError):
        placement.mode = "crop"


@settings(max_examples=60, deadline=None)
@given(
    original=st.tuples(st.integers(1, 40), st.integers(1, 40)),
    size=st.tuples(st.integers(1, 24), st.integers(1, 24)),
    mode=st.sampled_from(RESIZE_MODES),
)
def test_placement_invariants(original, size, mode):
    image = np.full((*original, 3), 255, np.uint8)
    out, placement = fit(image, size, mode)
    assert out.shape == (*size, 3)
    top, left, bottom, right = placement.box
    assert (bottom - top, right - left) == size
    c_top, c_left, c_bottom, c_right = placement.content_box
    assert 0 <= c_top < c_bottom <= size[0] and 0 <= c_left < c_right <= size[1]
    # Content is the image (white); anything else is zero padding.
    assert np.all(out[c_top:c_bottom, c_left:c_right] == 255)
    assert out.sum() == 255 * 3 * (c_bottom - c_top) * (c_right - c_left)
    if mode == "crop":
        assert placement.scaled_size[0] >= size[0] and placement.scaled_size[1] >= size[1]
        assert placement.content_box == (0, 0, *size)
    if mode == "pad":
        assert placement.scaled_size[0] <= size[0] and placement.scaled_size[1] <= size[1]
        assert placement.original_box == (0, 0, *original)
    o_top, o_left, o_bottom, o_right = placement.original_box
    assert 0 <= o_top < o_bottom <= original[0] and 0 <= o_left < o_right <= original[1]
    back = placement.to_original(np.ones((*size, 1), np.float32))[..., 0]
    assert back.shape == original
    np.testing.assert_allclose(back[o_top:o_bottom, o_left:o_right], 1.0, rtol=1e-5)
    assert back.sum() == pytest.approx((o_bottom - o_top) * (o_right - o_left), rel=1e-5)


# --------------------------------------------------------------------- resize

def test_resize_constant_map_stays_constant():
    saliency = np.full((3, 5, 3), 0.7, np.float32)
    out = resizing_module.resize_map(saliency, (17, 11))
    assert out.shape == (17, 11, 3) and out.dtype == np.float32
    assert np.all(out == np.float32(0.7))


def test_resize_2x2_to_4x4_known_values():
    # Pillow's bilinear filter, pixel centres aligned, edges clamped: along one
    # axis [a, b] becomes [a, 0.75a + 0.25b, 0.25a + 0.75b, b]. For
    # [[0, 1], [2, 3]] both axes give weights r = [0, 0.25, 0.75, 1], so
    # out[i, j] = 2 * r[i] + r[j].
    source = np.array([[0, 1], [2, 3]], np.float32)
    saliency = np.stack([source, -10 * source], axis=2)
    expected = np.array(
        [[0.0, 0.25, 0.75, 1.0],
         [0.5, 0.75, 1.25, 1.5],
         [1.5, 1.75, 2.25, 2.5],
         [2.0, 2.25, 2.75, 3.0]], np.float32)
    out = resizing_module.resize_map(saliency, (4, 4))
    assert out.shape == (4, 4, 2) and out.dtype == np.float32
    np.testing.assert_allclose(out[:, :, 0], expected, rtol=0, atol=1e-6)
    np.testing.assert_allclose(out[:, :, 1], -10 * expected, rtol=0, atol=1e-5)


def test_resize_is_height_first():
    out = resizing_module.resize_map(np.zeros((2, 2, 1), np.float32), (3, 8))
    assert out.shape == (3, 8, 1)


@pytest.mark.parametrize("size", [(0, 4), (4,), ("4", "4"), (True, 2), (2.0, 2), 4, (4, -1)])
def test_resize_rejects_bad_size(size):
    with pytest.raises(ValueError, match="size"):
        resizing_module.resize_map(np.zeros((2, 2, 1), np.float32), size)


def test_resize_rejects_bad_map():
    with pytest.raises(ValueError, match="shape"):
        resizing_module.resize_map(np.zeros((2, 2), np.float32), (4, 4))
    with pytest.raises(ValueError, match="real"):
        resizing_module.resize_map(np.zeros((2, 2, 1), np.complex64), (4, 4))


# --- maps of large originals: capped at MAX_SHOWN_SIDE ---------------------------------


def test_shown_size_caps_the_longer_side_keeping_the_aspect():
    assert resizing_module.MAX_SHOWN_SIDE == 4096
    assert shown_size((9000, 9000)) == (4096, 4096)
    assert shown_size((9000, 6000)) == (4096, 2731)
    assert shown_size((100, 9000)) == (46, 4096)
    assert shown_size((4096, 10)) == (4096, 10)
    assert shown_size((30, 20000), max_side=64) == (1, 64)  # never 0
    with pytest.raises(ValueError, match="max_side must be a positive int"):
        shown_size((10, 10), max_side=0)


def test_to_original_of_a_large_original_is_capped():
    # 9000 pixels wide but only 100 high: cheap to fit, above the cap.
    _, placement = fit(np.zeros((100, 9000, 3), np.uint8), (8, 8))
    assert placement.shown_size == (46, 4096)
    back = placement.to_original(np.full((8, 8, 3), 2.0, np.float32))
    assert back.shape == (46, 4096, 3)
    np.testing.assert_allclose(back, 2.0, rtol=1e-6)
    assert placement.to_original(np.ones((8, 8), np.float32), max_side=None).shape == (100, 9000)


def test_capped_crop_keeps_the_box_where_it_was():
    _, placement = fit(np.zeros((100, 200, 3), np.uint8), (50, 50), "crop")
    back = placement.to_original(np.ones((50, 50, 1), np.float32), max_side=100)
    assert back.shape == (50, 100, 1)  # the original's box (0, 50, 100, 150), halved
    assert np.all(back[:, :25] == 0) and np.all(back[:, 75:] == 0)
    np.testing.assert_allclose(back[:, 25:75], 1.0, rtol=1e-6)


def test_resize_map_writes_into_out():
    out = np.full((3, 4, 2), -1.0, np.float32)
    result = resize_map(np.ones((2, 2, 2), np.float32), (3, 4), out=out)
    assert result is out and np.all(out == 1.0)
    with pytest.raises(ValueError, match="out must be a float32 array of shape"):
        resize_map(np.ones((2, 2, 2)), (3, 4), out=np.zeros((3, 4, 2)))


def test_resize_channel_by_channel_equals_pillow_rgb():
    from PIL import Image

    image = np.random.default_rng(8).integers(0, 256, (61, 47, 3), dtype=np.uint8)
    fitted, _ = fit(image, (20, 33))
    expected = np.asarray(Image.fromarray(image).resize((33, 20), Image.Resampling.BILINEAR))
    np.testing.assert_array_equal(fitted, expected)


def test_draft_side():
    assert draft_side((224, 224, 3)) == 4096
    assert draft_side((5000, 300, 3)) == 5000
    assert draft_side((None, None, 3)) is None
    assert draft_side((None, None, 1), (64, 9000)) == 9000
