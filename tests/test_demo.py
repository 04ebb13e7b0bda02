"""The bundled demo: shape generator, localisation metrics and the trained model."""

from pathlib import Path

import numpy as np
import pytest

import guidedbp.demo
from guidedbp.demo import CLASS_NAMES, energy_inside, make_scenes, make_shapes, pointing_game

# The model of the guidedbp being tested: the source tree's, or an installed wheel's.
MODEL_PATH = Path(guidedbp.demo.__file__).with_name("data") / "shapes.keras"
LABELS_PATH = MODEL_PATH.with_name("shapes_labels.txt")
HELDOUT_SEED = 12345  # neither the training seed nor the ones train.py reports on


# -- make_shapes -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shapes():
    return make_shapes(60, seed=3)


@pytest.fixture(scope="module")
def scenes_with_distractors():
    return make_scenes(60, seed=4, distractors=True)


def test_shapes_have_documented_shapes_and_dtypes(shapes):
    images, masks, labels = shapes
    assert images.shape == (60, 96, 96, 3) and images.dtype == np.uint8
    assert masks.shape == (60, 96, 96) and masks.dtype == bool
    assert labels.shape == (60,) and np.issubdtype(labels.dtype, np.integer)


def test_class_names_cover_the_six_shapes():
    assert CLASS_NAMES[:6] == ("circle", "square", "triangle", "star", "ring", "cross")


def test_same_seed_same_bytes_different_seed_different(shapes):
    again = make_shapes(60, seed=3)
    for first, second in zip(shapes, again, strict=True):
        assert first.tobytes() == second.tobytes()
    other_images, other_masks, _ = make_shapes(60, seed=5)
    assert not np.array_equal(shapes[0], other_images)
    assert not np.array_equal(shapes[1], other_masks)


def test_each_image_depends_only_on_seed_and_index(shapes):
    images, masks, labels = make_shapes(7, seed=3)
    assert np.array_equal(images, shapes[0][:7])
    assert np.array_equal(masks, shapes[1][:7])
    assert np.array_equal(labels, shapes[2][:7])


def test_labels_in_range_and_all_classes_drawn(shapes):
    labels = shapes[2]
    assert labels.min() >= 0 and labels.max() < len(CLASS_NAMES)
    assert set(labels.tolist()) == set(range(len(CLASS_NAMES)))


def test_masks_are_non_empty_and_inside_the_image(shapes):
    masks = shapes[1]
    areas = masks.sum(axis=(1, 2))
    # The smallest shape, a star of radius 14, covers about 1.32 * 14**2 = 259 pixels.
    assert areas.min() > 200
    # Fully inside: the border rows and columns are never part of an object.
    border = masks[:, 0, :].any() or masks[:, -1, :].any()
    border = border or masks[:, :, 0].any() or masks[:, :, -1].any()
    assert not border


def test_masks_follow_the_class(shapes):
    _, masks, labels = shapes
    # A ring is hollow: its centre pixel, the mean of its mask's coordinates, is background.
    for mask in masks[labels == CLASS_NAMES.index("ring")]:
        rows, cols = np.nonzero(mask)
        assert not mask[round(rows.mean()), round(cols.mean())]
    for mask in masks[labels == CLASS_NAMES.index("circle")]:
        rows, cols = np.nonzero(mask)
        assert mask[round(rows.mean()), round(cols.mean())]


def test_background_is_cluttered_not_plain(shapes):
    images, masks, _ = shapes
    spreads = []
    for image, mask in zip(images.astype(np.float64), masks, strict=True):
        background = image[~mask]
        spreads.append(background.std(axis=0).mean())
        # Not one dominant colour either: the most common value covers little of it.
        _, counts = np.unique(background, axis=0, return_counts=True)
        assert counts.max() < 0.05 * len(background)
        # Texture: neighbouring background pixels differ (noise, lines, blob edges).
        steps = np.abs(np.diff(image, axis=1)).mean(axis=-1)[~(mask[:, 1:] | mask[:, :-1])]
        assert steps.mean() > 3
    assert min(spreads) > 12 and np.mean(spreads) > 25


def test_object_contrasts_with_its_surroundings(shapes):
    images, masks, _ = shapes
    for image, mask in zip(images.astype(np.float64), masks, strict=True):
        inside = image[mask].mean(axis=0)
        rows, cols = np.nonzero(mask)
        box = np.zeros_like(mask)
        box[max(rows.min() - 4, 0) : rows.max() + 5, max(cols.min() - 4, 0) : cols.max() + 5] = True
        around = image[box & ~mask].mean(axis=0)
        assert np.linalg.norm(inside - around) > 25


def test_colour_does_not_give_the_class_away():
    images, masks, labels = make_shapes(300, seed=6)
    colours = np.array([image[mask].mean(axis=0)
                        for image, mask in zip(images, masks, strict=True)])
    means = np.array([colours[labels == c].mean(axis=0) for c in range(len(CLASS_NAMES))])
    # Uniform random colours: every class averages near mid-grey.
    assert np.abs(means - 127.5).max() < 40


def test_distractor_is_another_class_and_disjoint(scenes_with_distractors):
    scenes = scenes_with_distractors
    assert np.all(scenes.distractor_labels >= 0)
    assert np.all(scenes.distractor_labels != scenes.labels)
    assert scenes.distractor_masks.any(axis=(1, 2)).all()
    assert not (scenes.distractor_masks & scenes.masks).any()
    # Smaller than the target.
    assert np.all(scenes.distractor_masks.sum(axis=(1, 2)) < scenes.masks.sum(axis=(1, 2)))


def test_make_shapes_returns_target_of_make_scenes():
    scenes = make_scenes(5, seed=8, distractors=True)
    images, masks, labels = make_shapes(5, seed=8, distractors=True)
    assert np.array_equal(images, scenes.images)
    assert np.array_equal(masks, scenes.masks)
    assert np.array_equal(labels, scenes.labels)


def test_without_distractors_the_distractor_fields_are_empty():
    scenes = make_scenes(3, seed=8)
    assert not scenes.distractor_masks.any()
    assert scenes.distractor_labels.tolist() == [-1, -1, -1]


def test_zero_images():
    images, masks, labels = make_shapes(0, seed=0)
    assert images.shape == (0, 96, 96, 3) and masks.shape == (0, 96, 96) and labels.shape == (0,)


@pytest.mark.parametrize("n", [2.5, True, "3"])
def test_non_integer_count_is_rejected(n):
    with pytest.raises(TypeError, match="n="):
        make_shapes(n, seed=0)


def test_negative_count_is_rejected():
    with pytest.raises(ValueError, match="n=-1 must be non-negative"):
        make_shapes(-1, seed=0)


def test_non_integer_seed_is_rejected():
    with pytest.raises(TypeError, match="seed=1.5"):
        make_shapes(1, seed=1.5)


def test_demo_modules_do_not_import_tensorflow():
    import subprocess
    import sys

    code = (
        "import sys, guidedbp.demo, guidedbp.demo.train, guidedbp.demo.samples; "
        "print('tensorflow' in sys.modules, 'keras' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.split() == ["False", "False"]


def test_numpy_integer_count_and_seed_are_accepted():
    images, _, _ = make_shapes(np.int64(2), seed=np.int32(3))
    assert np.array_equal(images, make_shapes(2, seed=3)[0])


# -- sample images -----------------------------------------------------------------------

SAMPLES = Path(__file__).parents[1] / "sample_images"


def test_sample_shapes_match_the_generator(tmp_path):
    from PIL import Image

    from guidedbp.demo.samples import write_shapes

    written = write_shapes(tmp_path)
    assert [p.name for p in written] == [f"{name}_0.png" for name in CLASS_NAMES]
    for path in written:
        fresh_mask = tmp_path / "masks" / "shapes" / path.name
        with Image.open(path) as fresh, Image.open(SAMPLES / "shapes" / path.name) as shipped:
            assert np.array_equal(np.asarray(fresh), np.asarray(shipped))
        with Image.open(fresh_mask) as fresh, \
                Image.open(SAMPLES / "masks" / "shapes" / path.name) as shipped:
            assert shipped.mode == "L" and set(np.unique(np.asarray(shipped))) == {0, 255}
            assert np.array_equal(np.asarray(fresh), np.asarray(shipped))


def test_the_package_ships_the_same_sample_shapes():
    # guidedbp demo explains the package's copy (the wheel carries it); make demo's and the
    # README's commands read sample_images/shapes: the same six files, byte for byte.
    from guidedbp.demo.samples import packaged_samples

    shipped = packaged_samples()
    assert [p.name for p in shipped] == sorted(f"{name}_0.png" for name in CLASS_NAMES)
    assert sorted(p.name for p in (SAMPLES / "shapes").iterdir()) == [p.name for p in shipped]
    for path in shipped:
        assert path.read_bytes() == (SAMPLES / "shapes" / path.name).read_bytes(), path.name


def test_sample_shapes_show_their_class(tmp_path):
    from PIL import Image

    from guidedbp.demo.samples import SAMPLES_SEED, write_shapes

    images, masks, labels = make_shapes(20 * len(CLASS_NAMES), seed=SAMPLES_SEED)
    for label, path in enumerate(write_shapes(tmp_path)):
        first = int(np.flatnonzero(labels == label)[0])
        with Image.open(path) as image:
            assert np.array_equal(np.asarray(image), images[first])
        with Image.open(tmp_path / "masks" / "shapes" / path.name) as mask:
            assert np.array_equal(np.asarray(mask) == 255, masks[first])


def test_photos_come_from_the_wheel_shrunk(tmp_path):
    import zipfile

    from PIL import Image

    from guidedbp.demo.samples import PHOTOS, write_photos

    wheel = tmp_path / "scikit_image-0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for index, member in enumerate(PHOTOS.values()):
            picture = Image.new("RGB", (600 + 100 * index, 400), (10 * index, 80, 160))
            path = tmp_path / f"photo{index}.png"
            picture.save(path)
            archive.write(path, member)
    written = write_photos(tmp_path / "out", wheel)
    assert [p.name for p in written] == list(PHOTOS)
    for path in written:
        with Image.open(path) as photo:
            assert photo.format == "JPEG" and photo.mode == "RGB"
            assert max(photo.size) == 512 and photo.size[1] < 512


def test_photos_missing_from_the_wheel_are_reported(tmp_path):
    import zipfile

    from guidedbp.demo.samples import write_photos

    wheel = tmp_path / "empty.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("skimage/__init__.py", "")
    with pytest.raises(ValueError, match="has no skimage/data/chelsea.png"):
        write_photos(tmp_path / "out", wheel)


def test_shipped_photos_are_small_and_credited():
    from PIL import Image

    from guidedbp.demo.samples import PHOTOS

    credits = (SAMPLES / "CREDITS").read_text(encoding="utf-8")
    for name, member in PHOTOS.items():
        with Image.open(SAMPLES / name) as photo:
            assert photo.format == "JPEG" and max(photo.size) <= 512
        assert name in credits and member.rsplit("/", 1)[1] in credits
    assert "CC0" in credits and "public domain" in credits


# -- metrics -----------------------------------------------------------------------------


def _point_map(row: int, col: int, size: int = 40) -> np.ndarray:
    magnitude = np.full((1, size, size), 0.5)
    magnitude[0, row, col] = 2.0
    return magnitude


def _pixel_mask(row: int, col: int, size: int = 40) -> np.ndarray:
    mask = np.zeros((1, size, size), bool)
    mask[0, row, col] = True
    return mask


@pytest.mark.parametrize(
    ("point", "hit"),
    [
        ((5, 20), True),  # 15 px straight up: exactly at the tolerance
        ((4, 20), False),  # 16 px
        ((11, 32), True),  # (9, 12): distance exactly 15
        ((11, 33), False),  # (9, 13): sqrt(250) > 15
        ((8, 29), True),  # (12, 9): 15 again
        ((20, 20), True),  # on the mask
    ],
)
def test_pointing_game_is_exact_at_the_tolerance(point, hit):
    result = pointing_game(_point_map(*point), _pixel_mask(20, 20), tolerance=15)
    assert result.dtype == bool and result.tolist() == [hit]


def test_pointing_game_nearest_mask_pixel_counts():
    mask = np.zeros((1, 40, 40), bool)
    mask[0, 30:35, 30:35] = True  # a 5x5 block; its nearest pixel to (0, 0) is (30, 30)
    mask[0, 0, 39] = True
    assert pointing_game(_point_map(15, 39), mask).tolist() == [True]  # 15 from (0, 39)
    assert pointing_game(_point_map(14, 18), mask).tolist() == [False]  # sqrt(16²+12²) = 20
    assert pointing_game(_point_map(21, 18), mask).tolist() == [True]  # (9, 12) from (30, 30)


def test_pointing_game_default_tolerance_is_15_and_batches():
    magnitude = np.concatenate([_point_map(5, 20), _point_map(4, 20), _point_map(20, 20)])
    masks = np.concatenate([_pixel_mask(20, 20)] * 3)
    assert pointing_game(magnitude, masks).tolist() == [True, False, True]
    assert pointing_game(magnitude, masks, tolerance=0).tolist() == [False, False, True]
    assert pointing_game(magnitude, masks, tolerance=16).tolist() == [True, True, True]


def test_pointing_game_ties_take_the_first_pixel_and_empty_masks_miss():
    magnitude = np.zeros((2, 10, 10))
    mask = np.zeros((2, 10, 10), bool)
    mask[0, 0, 0] = True  # an all-zero map points at (0, 0)
    assert pointing_game(magnitude, mask, tolerance=0).tolist() == [True, False]


def test_energy_inside_fractions():
    magnitude = np.zeros((3, 4, 4))
    magnitude[0] = 1.0  # uniform: 4 of 16 pixels inside
    magnitude[1, 0, 0], magnitude[1, 3, 3] = 3.0, 1.0
    mask = np.zeros((3, 4, 4), bool)
    mask[0, :2, :2] = True
    mask[1, 3, 3] = True
    mask[2, 1, 1] = True  # an all-zero map
    assert energy_inside(magnitude, mask).tolist() == [0.25, 0.25, 0.0]
    full = np.ones((1, 4, 4), bool)
    assert energy_inside(magnitude[:1], full).tolist() == [1.0]


def test_metrics_accept_float32_maps():
    magnitude = np.zeros((1, 3, 3), np.float32)
    magnitude[0, 1, 1] = 1.0
    mask = np.zeros((1, 3, 3), bool)
    mask[0, 1, 1] = True
    assert pointing_game(magnitude, mask, tolerance=0).tolist() == [True]
    assert energy_inside(magnitude, mask).tolist() == [1.0]


@pytest.mark.parametrize("metric", [pointing_game, energy_inside])
def test_metrics_reject_bad_shapes_and_masks(metric):
    with pytest.raises(ValueError, match=r"reduce channels first"):
        metric(np.zeros((1, 4, 4, 3)), np.zeros((1, 4, 4), bool))
    with pytest.raises(ValueError, match=r"masks have shape \(1, 4, 5\)"):
        metric(np.zeros((1, 4, 4)), np.zeros((1, 4, 5), bool))
    with pytest.raises(ValueError, match="masks must be bool"):
        metric(np.zeros((1, 4, 4)), np.zeros((1, 4, 4), np.uint8))


def test_pointing_game_rejects_negative_tolerance():
    with pytest.raises(ValueError, match="tolerance=-1"):
        pointing_game(np.zeros((1, 2, 2)), np.ones((1, 2, 2), bool), tolerance=-1)


def test_energy_inside_rejects_signed_maps():
    with pytest.raises(ValueError, match="non-negative"):
        energy_inside(-np.ones((1, 2, 2)), np.ones((1, 2, 2), bool))


# -- the bundled model -------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo_model():
    keras = pytest.importorskip("keras")
    return keras.models.load_model(MODEL_PATH)


@pytest.fixture(scope="module")
def heldout():
    return make_shapes(200, seed=HELDOUT_SEED)


def test_model_file_is_small_and_labelled():
    assert MODEL_PATH.stat().st_size <= 2 * 1024 * 1024
    assert LABELS_PATH.read_text(encoding="utf-8").splitlines() == list(CLASS_NAMES)


def test_model_takes_raw_pixels(demo_model):
    import keras

    assert demo_model.input_shape == (None, 96, 96, 3)
    assert demo_model.output_shape == (None, len(CLASS_NAMES))
    assert any(isinstance(layer, keras.layers.Rescaling) for layer in demo_model.layers)
    assert not any("batch_normalization" in type(layer).__name__.lower()
                   for layer in demo_model.layers)


def test_model_classifies_heldout_shapes(demo_model, heldout):
    images, _, labels = heldout
    probabilities = demo_model.predict(images.astype(np.float32), batch_size=100, verbose=0)
    assert np.mean(probabilities.argmax(axis=1) == labels) >= 0.95


def test_guided_backprop_points_at_the_shape(demo_model, heldout):
    from guidedbp import Explainer

    images, masks, labels = heldout
    maps = Explainer(demo_model)(images.astype(np.float32), target=labels)
    magnitude = np.abs(maps).max(axis=-1)
    assert pointing_game(magnitude, masks, tolerance=15).mean() >= 0.90
    # Much more of the map lies on the object than its share of the image.
    assert energy_inside(magnitude, masks).mean() > 2 * masks.mean()


# -- the shipped model loads on every Keras 3 from 3.10 on -----------------------------------


def _config(path) -> str:
    import zipfile

    with zipfile.ZipFile(path) as archive:
        return archive.read("config.json").decode("utf-8")


def test_the_shipped_model_has_no_keys_older_keras_refuses():
    from guidedbp.demo.train import NEWER_KEYS

    config = _config(MODEL_PATH)
    assert not [key for key in NEWER_KEYS if f'"{key}"' in config]


def test_make_portable_drops_the_keys_and_keeps_the_model(tmp_path):
    import json

    import keras

    from guidedbp.demo.train import make_portable

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((6, 6, 3)), keras.layers.Conv2D(2, 3, activation="relu"),
                              keras.layers.Flatten(), keras.layers.Dense(3)])
    path = tmp_path / "m.keras"
    model.save(path)
    before = json.loads(_config(path))
    written = sum(_config(path).count(f'"{key}"') for key in ("input_axes", "output_axes"))
    dropped = make_portable(path)
    assert dropped >= written  # every initializer's axes, and a null quantization config
    assert make_portable(path) == 0  # nothing left to drop
    after = json.loads(_config(path))
    assert after["config"]["layers"][0]["class_name"] == before["config"]["layers"][0][
        "class_name"]
    images = np.random.default_rng(1).normal(size=(2, 6, 6, 3)).astype(np.float32)
    np.testing.assert_array_equal(keras.models.load_model(path)(images), model(images))
