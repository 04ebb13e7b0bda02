"""Tests for the metric families (guidedbp.checks.metrics_*) and ``guidedbp evaluate
--metric all``.

Each metric is checked on hand-made maps and numpy "models" whose value can be worked
out on paper: a linear score for MuFidelity and the sensitivities, the mean pixel for the
Average Drop, Increase and Gain, a half-bright picture for ROAD, one-hot and constant
maps for sparseness and complexity.
"""

from __future__ import annotations

import doctest
import json
import math

import numpy as np
import pytest

from guidedbp.checks import (
    CATALOG,
    HIGHER,
    LOWER,
    METRIC_NAMES,
    average_drop,
    average_gain,
    average_increase,
    complexity,
    confidence_change,
    impute_linear,
    kept_by_map,
    metrics_arrays,
    metrics_catalog,
    metrics_fidelity,
    metrics_properties,
    metrics_random_logit,
    metrics_road,
    metrics_robustness,
    mufidelity,
    mufidelity_subsets,
    noisy_copies,
    other_classes,
    random_logit,
    road,
    sensitivity,
    sparseness,
)
from guidedbp.checks.metrics_robustness import relative_changes
from guidedbp.errors import ArgumentError

from .helpers import run_cli


@pytest.mark.parametrize("module", [metrics_arrays, metrics_catalog, metrics_fidelity,
                                    metrics_properties, metrics_random_logit, metrics_road,
                                    metrics_robustness])
def test_module_examples(module):
    result = doctest.testmod(module)
    assert result.failed == 0 and result.attempted >= 1


def test_every_metric_has_a_direction_and_a_reference():
    assert METRIC_NAMES == ("mufidelity", "average-drop", "average-increase", "average-gain",
                            "road-morf", "road-lerf", "max-sensitivity", "avg-sensitivity",
                            "sparseness", "complexity", "random-logit")
    lower = {name for name, info in CATALOG.items() if info.direction == LOWER}
    assert lower == {"average-drop", "road-morf", "max-sensitivity", "avg-sensitivity",
                     "complexity", "random-logit"}
    assert all(info.direction in (HIGHER, LOWER) and info.reference and info.summary
               for info in CATALOG.values())


# -- complexity ---------------------------------------------------------------------------


def one_hot(n: int, channels: int = 1) -> np.ndarray:
    values = np.zeros((1, 1, n, channels))
    values[0, 0, n // 2, 0] = 3.0
    return values


@pytest.mark.parametrize("n", [2, 5, 64])
def test_gini_of_one_hot_and_constant_maps(n):
    assert sparseness(one_hot(n))[0] == pytest.approx(1 - 1 / n, abs=1e-12)
    assert sparseness(np.full((1, 1, n, 3), -2.0))[0] == pytest.approx(0.0, abs=1e-12)


def test_gini_by_hand_and_per_pixel_magnitude():
    # sorted 1, 2, 3, 4: sum (2k - 5) a_k = -3 - 2 + 3 + 12 = 10, over n * sum = 40.
    assert sparseness(np.array([[[4.0, -1.0], [2.0, 3.0]]]))[0] == pytest.approx(0.25)
    # Three channels: each pixel counts once, as max_c |map|.
    rgb = np.zeros((1, 2, 2, 3))
    rgb[0, :, :, 1] = [[4.0, 1.0], [2.0, -3.0]]
    assert sparseness(rgb)[0] == pytest.approx(0.25)
    assert sparseness(np.zeros((1, 3, 3))).tolist() == [0.0]


@pytest.mark.parametrize("n", [2, 7, 100])
def test_entropy_of_uniform_and_one_hot_maps(n):
    assert complexity(np.full((1, 1, n, 1), 0.3))[0] == pytest.approx(math.log(n), abs=1e-12)
    assert complexity(one_hot(n, 3))[0] == pytest.approx(0.0, abs=1e-12)


def test_entropy_by_hand_and_of_a_zero_map():
    # p = (1/4, 1/4, 1/2): H = 2 * (1/4) log 4 + (1/2) log 2 = 1.5 log 2.
    assert complexity(np.array([[[1.0, -1.0, 2.0]]]))[0] == pytest.approx(1.5 * math.log(2))
    assert complexity(np.zeros((2, 2, 2)))[0] == pytest.approx(math.log(4))


def test_map_arguments_are_checked():
    with pytest.raises(ArgumentError, match=r"maps must have shape \(N, H, W, C\)"):
        sparseness(np.zeros(4))
    with pytest.raises(ArgumentError, match="finite"):
        complexity(np.full((1, 2, 2), np.nan))


# -- MuFidelity ---------------------------------------------------------------------------


WEIGHTS = np.random.default_rng(7).normal(size=(12, 12, 2))


def linear_scores(inputs: np.ndarray) -> np.ndarray:
    """Class 0's score is sum(w * x), class 1's its negative: a linear model."""
    total = np.einsum("nhwc,hwc->n", inputs.astype(np.float64), WEIGHTS)
    return np.stack([total, -total], axis=1)


def test_mufidelity_of_gradient_times_input_on_a_linear_model_is_one():
    images = np.random.default_rng(1).uniform(0, 1, size=(3, 12, 12, 2))
    maps = WEIGHTS * images  # the exact contributions, baseline 0
    assert mufidelity(linear_scores, images, maps, [0, 0, 0]).tolist() == pytest.approx(
        [1.0] * 3, abs=1e-9)
    # The other class's drops are the negatives: the same map correlates -1.
    assert mufidelity(linear_scores, images, maps, [1, 1, 1]).tolist() == pytest.approx(
        [-1.0] * 3, abs=1e-9)
    # A constant map's sums follow the subset's size, not the drops: below 1.
    assert mufidelity(linear_scores, images, np.ones_like(maps), [0, 0, 0]).max() < 0.9


def test_mufidelity_subsets_follow_the_grid_and_the_seed():
    images = np.ones((2, 12, 12, 1))
    calls = []

    def predict(inputs):
        calls.append(len(inputs))
        return np.stack([inputs.sum(axis=(1, 2, 3))] * 2, axis=1)

    subsets = mufidelity_subsets(predict, images, [0, 1], grid_size=3, samples=50, seed=4,
                                 batch_size=16)
    assert subsets.cells.shape == (2, 50, 3, 3) and max(calls) <= 16
    removed = subsets.removed
    # Each grid cell is a 4 x 4 block: removed whole or not at all.
    blocks = removed.reshape(2, 50, 3, 4, 3, 4)
    assert np.all(blocks.all(axis=(3, 5)) == blocks.any(axis=(3, 5)))
    # The drop of a sum model is the number of removed pixels (baseline 0).
    np.testing.assert_array_equal(subsets.drops, removed.sum(axis=(2, 3)))
    assert 0.1 < removed.mean() < 0.3  # each cell with probability 0.2
    # Image i's subsets do not depend on the batch it was in.
    alone = mufidelity_subsets(predict, images[1:], [1], grid_size=3, samples=50, seed=4,
                               first_index=1)
    np.testing.assert_array_equal(alone.cells[0], subsets.cells[1])


def test_mufidelity_of_constant_drops_is_zero():
    images = np.zeros((1, 6, 6, 1))  # the baseline itself: nothing ever drops
    assert mufidelity(linear_scores_small, images, np.ones((1, 6, 6)), [0]).tolist() == [0.0]


def linear_scores_small(inputs: np.ndarray) -> np.ndarray:
    total = inputs.sum(axis=(1, 2, 3))
    return np.stack([total, -total], axis=1)


# -- Average Drop, Increase, Gain -----------------------------------------------------------


def mean_probabilities(inputs: np.ndarray) -> np.ndarray:
    """Class 0's probability is the mean input (inputs in [0, 1]), class 1's the rest."""
    mean = inputs.astype(np.float64).mean(axis=(1, 2, 3))
    return np.stack([mean, 1.0 - mean], axis=1)


def test_average_drop_increase_and_gain_by_hand():
    images = np.full((2, 1, 4, 1), 0.8)
    ramp = np.array([0.0, 1.0, 2.0, 3.0]).reshape(1, 1, 4, 1)
    # The ramp normalises to 0, 1/3, 2/3, 1: the image kept is 0.8 * 0.5 on average.
    np.testing.assert_allclose(kept_by_map(images[:1], ramp)[0, 0, :, 0],
                               [0.0, 0.8 / 3, 1.6 / 3, 0.8], atol=1e-7)
    change = confidence_change(mean_probabilities, images, np.concatenate([ramp, ramp]), [0, 1])
    np.testing.assert_allclose(change.base, [0.8, 0.2])
    np.testing.assert_allclose(change.after, [0.4, 0.6], atol=1e-7)
    # Class 0: 0.8 -> 0.4, a drop of half. Class 1: 0.2 -> 0.6, a gain of 0.4 / 0.8.
    np.testing.assert_allclose(change.drop, [50.0, 0.0], atol=1e-4)
    np.testing.assert_array_equal(change.increase, [0.0, 100.0])
    np.testing.assert_allclose(change.gain, [0.0, 50.0], atol=1e-4)


def test_a_map_that_keeps_the_score_drops_nothing():
    image = np.zeros((1, 3, 3, 1))
    image[0, 1, 1, 0] = 0.9  # all the evidence in one pixel
    saliency = image.copy()  # the map keeps exactly that pixel
    change = confidence_change(mean_probabilities, image, saliency, [0])
    assert change.drop[0] == pytest.approx(0.0, abs=1e-5)
    assert change.increase[0] == 0.0
    assert average_drop([0.5], [0.5]).tolist() == [0.0]
    assert average_increase([0.5], [0.5]).tolist() == [0.0]
    assert average_gain([0.5], [0.5]).tolist() == [0.0]


# -- sensitivity --------------------------------------------------------------------------


def test_max_sensitivity_of_a_linear_model_s_gradient_is_zero():
    def gradient(inputs, classes):  # d(w_c . x)/dx = w_c, wherever x is
        return np.stack([WEIGHTS * (1 if c == 0 else -1) for c in classes])

    images = np.random.default_rng(3).uniform(0, 255, size=(2, 12, 12, 2))
    result = sensitivity(gradient, images, [0, 1], samples=5, seed=1)
    assert result.changes.shape == (2, 5)
    assert result.maximum.tolist() == [0.0, 0.0] and result.average.tolist() == [0.0, 0.0]


def test_sensitivity_of_the_input_itself_is_the_noise_over_the_image():
    images = np.random.default_rng(2).uniform(10, 20, size=(2, 4, 4, 1))

    def identity(inputs, classes):
        return np.asarray(inputs, np.float64)

    copies = noisy_copies(images, 6, 0.1, seed=5)
    noise = copies.reshape(2, 6, 4, 4, 1) - images[:, None]
    ranges = images.max(axis=(1, 2, 3)) - images.min(axis=(1, 2, 3))
    assert np.all(np.abs(noise) <= 0.1 * ranges[:, None, None, None, None] + 1e-4)
    result = sensitivity(identity, images, [0, 0], samples=6, seed=5)
    expected = np.sqrt((noise.astype(np.float64) ** 2).sum(axis=(2, 3, 4))) / np.sqrt(
        (images ** 2).sum(axis=(1, 2, 3)))[:, None]
    np.testing.assert_allclose(result.changes, expected, rtol=1e-5)
    np.testing.assert_allclose(result.maximum, expected.max(axis=1), rtol=1e-5)
    np.testing.assert_allclose(result.average, expected.mean(axis=1), rtol=1e-5)
    # Image 1's noise does not depend on its batch.
    np.testing.assert_array_equal(noisy_copies(images[1:], 6, 0.1, seed=5, first_index=1),
                                  copies[6:])


def test_relative_changes_of_zero_maps():
    zero = np.zeros((1, 2, 2, 1))
    assert relative_changes(zero, np.zeros((2, 2, 2, 1))).tolist() == [[0.0, 0.0]]
    assert relative_changes(zero, np.ones((1, 2, 2, 1))).tolist() == [[math.inf]]


# -- random logit ---------------------------------------------------------------------------


def test_other_classes_are_uniform_among_the_others():
    draws = other_classes(np.full(3000, 2), 4, seed=9)
    counts = np.bincount(draws, minlength=4)
    assert counts[2] == 0 and counts.sum() == 3000
    assert np.all(np.abs(counts[[0, 1, 3]] - 1000) < 120)
    np.testing.assert_array_equal(other_classes(np.full(3000, 2), 4, seed=9), draws)
    with pytest.raises(ArgumentError, match="at least 2"):
        other_classes([0], 1)


def test_random_logit_compares_the_two_classes_maps():
    ramp = np.arange(16.0).reshape(4, 4, 1)
    per_class = {0: ramp, 1: ramp[::-1, ::-1], 2: 2 * ramp}

    def explain(inputs, classes):  # a linear model's gradient: the class's weights
        return np.stack([per_class[int(c)] for c in classes])

    images = np.zeros((50, 4, 4, 1))
    similarity = random_logit(explain, images, np.zeros(50, np.int64), 3, seed=0)
    others = other_classes(np.zeros(50, np.int64), 3, seed=0)
    # Class 1's map ranks the pixels the other way round (-1); class 2's is class 0's
    # map scaled (1).
    np.testing.assert_allclose(similarity, np.where(others == 1, -1.0, 1.0))
    assert set(others.tolist()) == {1, 2}


# -- ROAD -----------------------------------------------------------------------------------


def literal_imputation(picture: np.ndarray, removed: np.ndarray) -> np.ndarray:
    """Rong et al.'s system written out: for each removed pixel, sum over its in-picture
    neighbours of w * (x_i - x_j) = 0 (1/6 edge, 1/12 diagonal), solved densely."""
    height, width = removed.shape
    unknown = list(zip(*np.nonzero(removed)))
    number = {pixel: k for k, pixel in enumerate(unknown)}
    matrix = np.zeros((len(unknown), len(unknown)))
    rhs = np.zeros((len(unknown), picture.shape[-1]))
    for k, (row, column) in enumerate(unknown):
        for dr in (-1, 0, 1):
            for dc in (-1, 0, 1):
                r, c = row + dr, column + dc
                if (dr, dc) == (0, 0) or not (0 <= r < height and 0 <= c < width):
                    continue
                weight = 1 / 12 if dr and dc else 1 / 6
                matrix[k, k] += weight
                if removed[r, c]:
                    matrix[k, number[(r, c)]] -= weight
                else:
                    rhs[k] += weight * picture[r, c]
    out = picture.astype(np.float64).copy()
    out[removed] = np.linalg.solve(matrix, rhs)
    return out


def test_linear_imputation_reproduces_a_ramp_inside():
    rows, columns = np.mgrid[0:10, 0:12]
    ramp = np.stack([3.0 * rows - 2.0 * columns + 50, 0.5 * rows + columns], axis=-1)
    removed = np.zeros((10, 12), bool)
    removed[1:9, 1:11] = np.random.default_rng(0).uniform(size=(8, 10)) < 0.7
    filled = impute_linear(ramp[None], removed[None])[0]
    np.testing.assert_allclose(filled, ramp, atol=1e-2)  # the default tolerance, 1e-4
    filled = impute_linear(ramp[None], removed[None], tolerance=1e-7)[0]
    np.testing.assert_allclose(filled, ramp, atol=1e-4)


def test_linear_imputation_solves_rong_s_system_borders_included():
    rng = np.random.default_rng(5)
    pictures = rng.uniform(0, 255, size=(3, 9, 7, 3))
    removed = rng.uniform(size=(3, 9, 7)) < np.array([0.2, 0.6, 0.95])[:, None, None]
    removed[:, 0, 0] = False  # keep a pixel
    filled = impute_linear(pictures, removed)
    for index in range(3):
        expected = literal_imputation(pictures[index], removed[index])
        np.testing.assert_allclose(filled[index], expected, atol=0.05)
        kept = ~removed[index]
        np.testing.assert_array_equal(filled[index][kept],
                                      pictures[index].astype(np.float32)[kept])
    with pytest.raises(ArgumentError, match="keep at least one"):
        impute_linear(pictures[:1], np.ones((1, 9, 7), bool))


def half_bright() -> tuple[np.ndarray, np.ndarray]:
    """An 8 x 8 picture whose left half is 1 and right half 0, and a map that ranks the
    left half first (a faint ramp orders the pixels within each half)."""
    picture = np.zeros((1, 8, 8, 1))
    picture[0, :, :4] = 1.0
    saliency = picture + np.linspace(0, 0.01, 64).reshape(1, 8, 8, 1)
    return picture, saliency


def left_half_probability(inputs: np.ndarray) -> np.ndarray:
    """Class 0's probability is the mean of the left half (in [0, 1])."""
    mean = np.clip(inputs[:, :, :4].astype(np.float64).mean(axis=(1, 2, 3)), 0, 1)
    return np.stack([mean, 1 - mean], axis=1)


def test_road_morf_and_lerf_on_a_half_bright_picture():
    picture, saliency = half_bright()
    morf = road(left_half_probability, picture, saliency, [0], order="morf", noise=0.0)
    lerf = road(left_half_probability, picture, saliency, [0], order="lerf", noise=0.0)
    assert morf.fractions.tolist() == pytest.approx([0.1 * k for k in range(1, 10)])
    # MoRF at 50%: the whole bright half is gone, imputed from the dark half only: 0.
    # LeRF at 50%: the dark half is gone, imputed from the bright half: 1.
    assert morf.curves[0, 4] == pytest.approx(0.0, abs=1e-3)
    assert lerf.curves[0, 4] == pytest.approx(1.0, abs=1e-3)
    # Removing more never helps MoRF, and LeRF keeps the bright half until 50%.
    assert np.all(np.diff(morf.curves[0][:5]) <= 1e-6)
    np.testing.assert_allclose(lerf.curves[0][:5], 1.0, atol=1e-3)
    assert morf.aucs[0] < 0.5 < lerf.aucs[0]
    # The area is the trapezoid rule over the fractions, divided by their span.
    expected = np.trapezoid(morf.curves[0], morf.fractions) / 0.8 if hasattr(
        np, "trapezoid") else np.trapz(morf.curves[0], morf.fractions) / 0.8
    assert morf.aucs[0] == pytest.approx(expected)


def test_road_removes_the_ranked_pixels_and_adds_seeded_noise_there_only():
    picture, saliency = half_bright()
    seen = []

    def recording(inputs):
        seen.append(np.array(inputs))
        return left_half_probability(inputs)

    first = road(recording, picture, saliency, [0], order="morf", fractions=(0.25,),
                 noise=0.5, seed=3)
    again = road(left_half_probability, picture, saliency, [0], order="morf",
                 fractions=(0.25,), noise=0.5, seed=3)
    np.testing.assert_array_equal(first.curves, again.curves)
    (perturbed,) = seen
    changed = perturbed[0, ..., 0] != picture[0, ..., 0]
    # The top 16 pixels: the left half's last 16 in the ramp's order (rows 4-7, cols 0-3).
    expected = np.zeros((8, 8), bool)
    expected[4:, :4] = True
    np.testing.assert_array_equal(changed, expected)
    # A picture's noise is its own: the same alone as second in a batch.
    pair = road(left_half_probability, np.concatenate([picture, picture]),
                np.concatenate([saliency, saliency]), [0, 0], noise=0.5, seed=3)
    alone = road(left_half_probability, picture, saliency, [0], noise=0.5, seed=3,
                 first_index=1)
    np.testing.assert_array_equal(pair.curves[1], alone.curves[0])
    assert not np.array_equal(pair.curves[0], pair.curves[1])
    with pytest.raises(ArgumentError, match="fractions"):
        road(left_half_probability, picture, saliency, [0], fractions=(0.5, 1.0))
    with pytest.raises(ArgumentError, match="order"):
        road(left_half_probability, picture, saliency, [0], order="middle")


# -- the command ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_model(tmp_path_factory):
    """16x16 RGB -> Conv2D(8, 3, relu) -> global average -> Dense(6, softmax), seeded: the
    six classes of the synthetic shapes and a conv layer for Grad-CAM, at 1/36 of the
    bundled demo's pixels (ROAD's imputation, most of ``--metric all``'s time, solves a
    system per pixel). Seed 7 gives no constant map on the first 8 shapes (another seed
    may: every metric would then leave that image out)."""
    from tests.models import shapes_cnn

    path = tmp_path_factory.mktemp("metrics") / "small.keras"
    shapes_cnn(8).save(path)
    return path


def test_evaluate_metric_all_reports_every_metric_with_its_direction(small_model):
    result = run_cli("evaluate", small_model, "--shapes", "8", "--method", "guided,gradcam",
                     "--metric", "all", "--json", code=0)
    top = json.loads(result.stdout)
    assert top["constant_maps"] == {"guided": [], "gradcam": []}  # every image scored
    assert top["metrics"] == ["pointing", "energy", "deletion", "insertion", *METRIC_NAMES]
    assert "results" in top and "faithfulness" in top
    scores = top["scores"]
    assert (scores["seed"], scores["images"]) == (1000, 8)
    assert list(scores["metrics"]) == list(METRIC_NAMES)
    for name, entry in scores["metrics"].items():
        assert entry["direction"] == CATALOG[name].direction
        assert entry["family"] == CATALOG[name].family
        assert list(entry["methods"]) == ["guided", "gradcam"]
        for values in entry["methods"].values():
            assert len(values["values"]) == 8
            finite = [v for v in values["values"] if v is not None]
            assert values["mean"] == pytest.approx(np.mean(finite), abs=1e-5)
    methods = scores["metrics"]
    assert len(methods["road-morf"]["methods"]["guided"]["curves"][0]) == 9
    assert all(0 <= v <= 1 for v in methods["sparseness"]["methods"]["gradcam"]["values"])
    assert all(-1 <= v <= 1 for v in methods["mufidelity"]["methods"]["guided"]["values"])
    assert set(methods["average-increase"]["methods"]["guided"]["values"]) <= {0.0, 100.0}


def test_evaluate_table_shows_the_direction_and_images_need_no_masks(tmp_path):
    from PIL import Image

    from guidedbp.demo import make_scenes

    Image.fromarray(make_scenes(1, 3).images[0]).save(tmp_path / "a.png")
    result = run_cli("evaluate", "demo", tmp_path, "--method", "guided,vanilla",
                     "--metric", "sparseness,complexity,random-logit", code=0)
    lines = result.stdout.splitlines()
    assert "ranking: each metric's mean per method (over 1 images, seed 1000)" in lines
    complexity = lines.index("Complexity: how few pixels does the map concentrate on?")
    assert lines[complexity + 1].split() == ["method", "sparseness", "complexity"]
    assert lines[complexity + 2].split() == ["better", "higher", "lower"]
    randomisation = lines.index("Randomisation: does the map change with the class explained?")
    assert lines[randomisation + 1].split() == ["method", "random-logit"]
    assert lines[randomisation + 2].split() == ["better", "lower"]
    rows = [lines[complexity + 3 : complexity + 5], lines[randomisation + 3 : randomisation + 5]]
    assert [[line.split()[0] for line in block] for block in rows] == [["guided", "vanilla"]] * 2
    record = json.loads(run_cli("evaluate", "demo", tmp_path, "--method", "guided,vanilla",
                                "--metric", "sparseness,complexity,random-logit", "--json",
                                code=0).stdout)["scores"]["metrics"]
    for index, method in enumerate(("guided", "vanilla")):  # the JSON's means
        cells = rows[0][index].split()[1:] + rows[1][index].split()[1:]
        assert [float(cell.rstrip("*")) for cell in cells] == [
            round(record[name]["methods"][method]["mean"], 3)
            for name in ("sparseness", "complexity", "random-logit")]
    top = json.loads(run_cli("evaluate", "demo", tmp_path, "--method", "guided",
                             "--metric", "all", "--json", "--steps", "2", code=0).stdout)
    assert top["metrics"] == ["deletion", "insertion", *METRIC_NAMES]  # no masks here


# -- Xplique's options (tests/test_peer_xplique.py compares them with Xplique itself) ----


def test_channels_mean_reads_a_pixel_as_xplique_does():
    maps = np.zeros((1, 1, 2, 3))
    maps[0, 0, 0] = [3.0, -3.0, 0.0]  # max |.| 3, mean |.| 2
    maps[0, 0, 1] = [1.0, 1.0, 1.0]  # max |.| 1, mean |.| 1
    # mean: magnitudes (2, 1), shares (2/3, 1/3); max: (3, 1), shares (3/4, 1/4).
    entropy = -(2 / 3 * math.log(2 / 3) + 1 / 3 * math.log(1 / 3))
    assert complexity(maps, channels="mean")[0] == pytest.approx(entropy)
    assert complexity(maps)[0] == pytest.approx(-(0.75 * math.log(0.75)
                                                   + 0.25 * math.log(0.25)))
    # Gini of (1, 2): (-1 * 1 + 1 * 2) / (2 * 3) = 1/6; of (1, 3): 2 / 8.
    assert sparseness(maps, channels="mean")[0] == pytest.approx(1 / 6)
    assert sparseness(maps)[0] == pytest.approx(0.25)
    one_channel = maps[..., :1]
    np.testing.assert_array_equal(sparseness(one_channel, channels="mean"),
                                  sparseness(one_channel))
    with pytest.raises(ArgumentError, match="channels='sum' is not one of max, mean"):
        complexity(maps, channels="sum")


def test_kept_by_map_averages_magnitudes_over_channels():
    # Xplique 2.0.2's mask: mean_c |map|, so opposite channels do not cancel.
    image = np.full((1, 1, 2, 3), 10.0)
    maps = np.array([[[[1.0, -1.0, 0.0], [0.0, 0.0, 0.0]]]])
    np.testing.assert_allclose(kept_by_map(image, maps)[0, 0, :, 0], [10.0, 0.0], atol=1e-6)


def test_mufidelity_spearman_and_explicit_cells():
    def predict(inputs):  # class 0: the sum of the squared inputs (monotone, not linear)
        total = (inputs.astype(np.float64) ** 2).sum(axis=(1, 2, 3))
        return np.stack([total, -total], axis=1)

    image = np.arange(1.0, 17.0).reshape(1, 4, 4, 1)
    cells = np.random.default_rng(0).uniform(size=(1, 30, 4, 4)) < 0.3
    subsets = mufidelity_subsets(predict, image, [0], grid_size=4, samples=30, cells=cells)
    np.testing.assert_array_equal(subsets.cells, cells)
    map_ = image  # the drop is the sum of x^2 over S, the map's sum that of x
    drops = (cells[0].reshape(30, -1) * image.ravel() ** 2).sum(axis=1)
    sums = (cells[0].reshape(30, -1) * image.ravel()).sum(axis=1)
    from guidedbp.checks.stats import pearson, spearman

    assert mufidelity(predict, image, map_, [0], grid_size=4, samples=30, cells=cells,
                      correlation="spearman")[0] == pytest.approx(spearman(drops, sums))
    assert mufidelity(predict, image, map_, [0], grid_size=4, samples=30,
                      cells=cells)[0] == pytest.approx(pearson(drops, sums))
    with pytest.raises(ArgumentError, match="correlation='kendall' is not one of"):
        mufidelity(predict, image, map_, [0], correlation="kendall")
    with pytest.raises(ArgumentError, match=r"cells has shape \(1, 30, 3, 3\)"):
        mufidelity_subsets(predict, image, [0], grid_size=4, samples=30,
                           cells=cells[:, :, :3, :3])


def test_ssim_by_hand_and_random_logit_statistic():
    from guidedbp.checks.metrics_random_logit import similarities
    from guidedbp.checks.stats import ssim

    rng = np.random.default_rng(1)
    first = rng.normal(size=(12, 12, 1))
    assert ssim(first, first) == pytest.approx(1.0)
    assert ssim(np.ones((12, 12, 1)), np.ones((12, 12, 1))) == 1.0  # no range: similar
    # A 1x1 window: per pixel (2xy + c1)/(x^2 + y^2 + c1) * (c2 / c2), here for x = -y.
    second = -first
    c1 = (0.01 * np.ptp(np.concatenate([first, second]))) ** 2
    by_hand = ((-2 * first**2 + c1) / (2 * first**2 + c1)).mean()
    assert ssim(first, second, window=1) == pytest.approx(by_hand)
    maps = np.stack([first, first])
    np.testing.assert_allclose(similarities(maps, np.stack([first, second]), "ssim"),
                               [1.0, ssim(first, second)])
    with pytest.raises(ArgumentError, match="statistic='ssm' is not one of spearman, ssim"):
        similarities(maps, maps, "ssm")
