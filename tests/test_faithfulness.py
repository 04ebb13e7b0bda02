"""Tests for guidedbp.checks.faithfulness (deletion and insertion games) and plot_curves.

The helpers are checked on hand-computed arrays, the games on numpy "models" whose
probabilities are simple functions of the pixels, and on a linear Keras model whose
relevant pixels are known, so that the curve of the true ranking can be worked out
by hand.
"""

from __future__ import annotations

import doctest
import functools
import math

import numpy as np
import pytest

from guidedbp.checks import faithfulness, pixel_removal
from guidedbp.checks.faithfulness import (
    GAMES,
    auc,
    blurred,
    deletion_insertion,
    fractions,
    join,
    pixel_order,
    step_counts,
)
from guidedbp.errors import ArgumentError
from guidedbp.models.preprocess import preprocess


def mean_model(inputs: np.ndarray) -> np.ndarray:
    """Two classes: class 1's probability is the mean input value (inputs in [0, 1])."""
    mean = inputs.astype(np.float64).mean(axis=(1, 2, 3))
    return np.stack([1.0 - mean, mean], axis=1)


class Recorder:
    """A numpy model that keeps every batch it was given."""

    def __init__(self, model=mean_model):
        self.model = model
        self.batches: list[np.ndarray] = []

    def __call__(self, inputs: np.ndarray) -> np.ndarray:
        self.batches.append(inputs.copy())
        return self.model(inputs)

    @property
    def inputs(self) -> np.ndarray:
        return np.concatenate(self.batches)


def test_module_examples():
    results = [doctest.testmod(module) for module in (faithfulness, pixel_removal)]
    assert sum(result.failed for result in results) == 0
    assert sum(result.attempted for result in results) > 10


# -- helpers ------------------------------------------------------------------------------


def test_auc_is_the_trapezoid_rule_over_0_to_1():
    assert auc([1.0, 0.0, 0.0, 0.0, 0.5]) == 0.1875  # (0.5 + 0 + 0 + 0.25) / 4
    assert auc([0.0, 1.0]) == 0.5
    assert auc(np.ones(21)) == 1.0
    assert auc([0.2, 0.4, 0.1]) == pytest.approx((0.3 + 0.25) / 2, abs=1e-15)
    assert auc(np.array([3, 1], np.int64)) == 2.0
    for bad in ([1.0], [[0.0, 1.0]], [0.0, np.nan], ["a", "b"]):
        with pytest.raises(ArgumentError, match="curve"):
            auc(bad)


def test_fractions_and_step_counts_are_exact():
    assert fractions(4).tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]
    # floor(i * 64 / 20): what each step of the default 20 perturbs in an 8 x 8 picture.
    assert step_counts(64, 20).tolist() == [0, 3, 6, 9, 12, 16, 19, 22, 25, 28, 32, 35, 38,
                                            41, 44, 48, 51, 54, 57, 60, 64]
    assert step_counts(5, 5).tolist() == [0, 1, 2, 3, 4, 5]
    assert step_counts(3, 6).tolist() == [0, 0, 1, 1, 2, 2, 3]  # more steps than pixels
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ArgumentError, match="steps="):
            step_counts(10, bad)


def test_pixel_order_ranks_magnitudes_and_breaks_ties_by_index():
    signed = np.array([[0.0, 2.0, -2.0], [-3.0, 0.0, 1.0]])
    # |.| = 0 2 2 / 3 0 1: 3 first, the two 2s in row-major order, then 1, then the zeros.
    assert pixel_order(signed).tolist() == [3, 1, 2, 5, 0, 4]
    assert pixel_order(signed[..., None]).tolist() == [3, 1, 2, 5, 0, 4]
    rgb = np.zeros((2, 2, 3))
    rgb[0, 1] = [0.1, -0.9, 0.2]  # max |.| 0.9
    rgb[1, 0] = [0.5, 0.5, 0.9]  # 0.9 too: a tie, kept in index order
    rgb[1, 1] = [-1.0, 0.0, 0.0]
    assert pixel_order(rgb).tolist() == [3, 1, 2, 0]
    assert pixel_order(np.zeros((3, 3))).tolist() == list(range(9))
    for bad, fragment in ((np.zeros((2, 2, 2)), "saliency_map"),
                          (np.zeros((1, 2, 2, 1)), "shape"),
                          (np.array([[np.nan, 1.0]]), "finite"),
                          (np.zeros((2, 2), bool), "dtype")):
        with pytest.raises(ArgumentError, match=fragment):
            pixel_order(bad)


def test_blur_keeps_constants_and_spreads_a_point_by_a_tenth_of_the_shorter_side():
    np.testing.assert_array_equal(blurred(np.full((5, 9, 3), 100.0)), 100.0)
    point = np.zeros((101, 121, 1))
    point[50, 60, 0] = 1.0
    spread = blurred(point).astype(np.float64)[..., 0]
    assert spread.sum() == pytest.approx(1.0, abs=1e-6)
    rows = np.arange(101) - 50
    sigma = faithfulness.BLUR_SIGMA * 101  # the shorter side is the height
    variance = (spread.sum(axis=1) * rows**2).sum()
    assert variance == pytest.approx(sigma**2, rel=2e-3)  # the 4-sigma kernel trims a hair
    # Channels are blurred apart; sigma 0 leaves the picture as it is.
    two = np.concatenate([point, np.zeros_like(point)], axis=2)
    np.testing.assert_array_equal(blurred(two)[..., 1], 0.0)
    np.testing.assert_array_equal(blurred(point, sigma=0), point.astype(np.float32))
    with pytest.raises(ArgumentError, match="sigma=-1"):
        blurred(point, sigma=-1)


# -- the games on numpy models ----------------------------------------------------------------


def test_each_step_perturbs_exactly_the_top_pixels():
    picture = np.full((4, 5, 3), 255, np.uint8)
    saliency = np.arange(20.0).reshape(4, 5)[..., None] * [1.0, -2.0, 0.5]  # ranks 19, 18...
    model = Recorder()
    result = deletion_insertion(model, [picture], [saliency], [1], steps=7, baseline="black",
                                pixel_to_input=functools.partial(preprocess, mode="scale01"))
    counts = step_counts(20, 7)
    order = np.arange(20)[::-1]
    deletion, insertion = model.inputs[:8], model.inputs[8:]
    for step, count in enumerate(counts):
        for inputs, perturbed_value in ((deletion[step], 0.0), (insertion[step], 1.0)):
            flat = inputs.reshape(20, 3)
            assert np.all(flat[order[:count]] == perturbed_value)  # every channel
            assert np.all(flat[order[count:]] == 1.0 - perturbed_value)
    np.testing.assert_allclose(result.games["deletion"].curves[0], 1.0 - counts / 20,
                               atol=1e-7)
    np.testing.assert_allclose(result.games["insertion"].curves[0], counts / 20, atol=1e-7)
    assert result.steps == 7 and result.baseline == "black"
    assert result.fractions.tolist() == fractions(7).tolist()


def test_blur_baseline_is_the_blurred_picture_mapped_like_the_picture():
    rng = np.random.default_rng(3)
    picture = rng.integers(0, 256, (6, 10, 3)).astype(np.uint8)
    model = Recorder()
    deletion_insertion(model, [picture], [rng.random((6, 10))], [0], steps=2,
                       pixel_to_input=functools.partial(preprocess, mode="tf"),
                       which=("deletion",))
    np.testing.assert_allclose(model.inputs[0], preprocess(picture, "tf"), atol=1e-6)
    np.testing.assert_allclose(model.inputs[-1], preprocess(blurred(picture), "tf"), atol=1e-6)


def test_batches_mix_images_and_steps_but_never_sizes_or_results():
    rng = np.random.default_rng(0)
    pictures = [rng.random((4, 4, 1)), rng.random((4, 4, 1)), rng.random((3, 5, 1)),
                rng.random((4, 4, 1))]
    maps = [rng.normal(size=p.shape[:2]) for p in pictures]
    results = {}
    for batch_size in (1, 5, 64):
        model = Recorder()
        results[batch_size] = deletion_insertion(model, pictures, maps, [1, 0, 1, 1], steps=3,
                                                 baseline="black", batch_size=batch_size)
        assert all(len(batch) <= batch_size for batch in model.batches)
        assert sum(len(batch) for batch in model.batches) == 4 * 4 * 2  # images x points x games
        if batch_size == 5:  # runs of one size: 8, 4 and 4 points per game, in chunks of 5
            assert [len(batch) for batch in model.batches[:5]] == [5, 3, 4, 4, 5]
    for game in GAMES:
        for batch_size in (5, 64):
            np.testing.assert_array_equal(results[batch_size].games[game].curves,
                                          results[1].games[game].curves)
    assert results[1].classes.tolist() == [1, 0, 1, 1]
    curves = results[1].games["deletion"].curves
    assert curves.shape == (4, 4)
    assert curves[1, 0] == pytest.approx(1.0 - pictures[1].mean(), abs=1e-7)  # class 0


def test_classes_default_to_each_pictures_top_class():
    pictures = [np.full((2, 2, 1), 0.9), np.full((2, 2, 1), 0.2)]
    model = Recorder()
    result = deletion_insertion(model, pictures, [np.ones((2, 2))] * 2, steps=2,
                                baseline="black")
    assert result.classes.tolist() == [1, 0]
    assert len(model.batches[0]) == 2  # one pass over the pictures, then the games
    np.testing.assert_allclose(result.games["deletion"].curves,
                               [[0.9, 0.45, 0.0], [0.8, 0.9, 1.0]], atol=1e-7)
    np.testing.assert_allclose(result.games["insertion"].aucs, [0.45, 0.9], atol=1e-7)
    assert result.games["insertion"].mean_auc == pytest.approx(0.675)


def test_join_puts_results_end_to_end():
    pictures = [np.full((2, 2, 1), value) for value in (0.1, 0.5, 0.7)]
    maps = [np.eye(2)] * 3
    whole = deletion_insertion(mean_model, pictures, maps, [0, 1, 1], steps=2, baseline="black")
    parts = [deletion_insertion(mean_model, pictures[:1], maps[:1], [0], steps=2,
                                baseline="black"),
             deletion_insertion(mean_model, pictures[1:], maps[1:], [1, 1], steps=2,
                                baseline="black")]
    joined = join(parts)
    assert joined.classes.tolist() == [0, 1, 1]
    for game in GAMES:
        np.testing.assert_array_equal(joined.games[game].curves, whole.games[game].curves)
        np.testing.assert_array_equal(joined.games[game].aucs, whole.games[game].aucs)
    other = deletion_insertion(mean_model, pictures[:1], maps[:1], [0], steps=3,
                               baseline="black")
    with pytest.raises(ArgumentError, match="share steps"):
        join([parts[0], other])
    with pytest.raises(ArgumentError, match="parts is empty"):
        join([])


@pytest.mark.parametrize("arguments, fragment", [
    ({"steps": 0}, "steps=0"),
    ({"steps": True}, "steps=True"),
    ({"batch_size": 0}, "batch_size=0"),
    ({"baseline": "grey"}, "baseline='grey' is not one of blur, black"),
    ({"which": ("deletion", "occlusion")}, "which="),
    ({"which": ()}, "which=()"),
    ({"maps": [np.ones((2, 2))] * 2}, "maps has 2 maps for 1 pictures"),
    ({"maps": [np.ones((2, 3))]}, "maps[0] is 2x3 (H x W) but its picture is 2x2"),
    ({"pictures": [np.ones((2, 2))]}, "add a channel axis"),
    ({"pictures": []}, "pictures is empty"),
    ({"classes": [2]}, "class 2 is out of range: the model has 2 classes"),
    ({"classes": [0, 1]}, "classes has 2 classes for 1 pictures"),
    ({"classes": [-1]}, "classes must be >= 0"),
    ({"predict_probabilities": lambda x: (mean_model(x), mean_model(x))},
     "returned shape (2, 16, 2) for 16 inputs; expected (16, classes)"),
    ({"predict_probabilities": "model"}, "must be a callable"),
])
def test_bad_arguments_are_named(arguments, fragment):
    call = {"predict_probabilities": mean_model, "pictures": [np.ones((2, 2, 1))],
            "maps": [np.ones((2, 2))], "classes": [0], **arguments}
    with pytest.raises(ArgumentError) as caught:
        deletion_insertion(call.pop("predict_probabilities"), call.pop("pictures"),
                           call.pop("maps"), call.pop("classes"), **call)
    assert fragment in str(caught.value)


# -- a model whose relevant pixels are known -------------------------------------------------

#: The pixels class 1 looks at: the 4 x 4 block in the middle of an 8 x 8 picture.
RELEVANT = [row * 8 + column for row in range(2, 6) for column in range(2, 6)]


def linear_model():
    """8x8x1 -> Flatten -> Dense(2, softmax): class 0's logit is 0, class 1's is
    ``0.25 * sum(input[RELEVANT]) - 2``, so ``p1 = sigmoid(0.25 * k - 2)`` when ``k`` of the
    relevant inputs are 1 and the rest 0."""
    import keras

    inputs = keras.Input((8, 8, 1))
    dense = keras.layers.Dense(2, activation="softmax")
    model = keras.Model(inputs, dense(keras.layers.Flatten()(inputs)))
    weights = np.zeros((64, 2), np.float32)
    weights[RELEVANT, 1] = 0.25
    dense.set_weights([weights, np.array([0.0, -2.0], np.float32)])
    return model


def probabilities_of(model):
    """The engine's forward-only probabilities, as ``guidedbp evaluate`` feeds the games."""
    from guidedbp.engine.explainer import Explainer

    explainer = Explainer(model, "vanilla")
    return lambda inputs: explainer.predict(inputs)[1]


@pytest.fixture(scope="module")
def linear():
    return linear_model()


def true_map() -> np.ndarray:
    saliency = np.zeros(64)
    saliency[RELEVANT] = 1.0
    return saliency.reshape(8, 8)


def sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z))


def test_true_ranking_gives_the_hand_computed_curves(linear):
    picture = np.full((8, 8, 1), 255, np.uint8)
    result = deletion_insertion(
        probabilities_of(linear), [picture], [true_map()], [1], steps=16, baseline="black",
        pixel_to_input=functools.partial(preprocess, mode="scale01"), batch_size=5)
    # Step i takes 4i pixels, the relevant 16 first: k = 16 - 4i of them are left (deletion)
    # or k = 4i have come back (insertion), until all 16 are gone or back at step 4.
    deletion = [sigmoid(z) for z in (2, 1, 0, -1)] + [sigmoid(-2)] * 13
    insertion = [sigmoid(z) for z in (-2, -1, 0, 1)] + [sigmoid(2)] * 13
    np.testing.assert_allclose(result.games["deletion"].curves[0], deletion, atol=1e-6)
    np.testing.assert_allclose(result.games["insertion"].curves[0], insertion, atol=1e-6)
    # Trapezoids over x = 0, 1/16, ..., 1.
    by_hand = {game: (sum(curve) - (curve[0] + curve[-1]) / 2) / 16
               for game, curve in (("deletion", deletion), ("insertion", insertion))}
    for game in GAMES:
        assert result.games[game].aucs[0] == pytest.approx(by_hand[game], abs=1e-6)
    assert result.classes.tolist() == [1]


@pytest.mark.parametrize("baseline", ["black", "blur"])
def test_true_ranking_beats_a_random_one(linear, baseline):
    rng = np.random.default_rng(7)
    pictures = rng.integers(0, 256, (4, 8, 8, 1)).astype(np.uint8)
    pictures.reshape(4, 64)[:, RELEVANT] = 255  # the object: bright, in the middle
    random_maps = rng.random((4, 8, 8))
    settings = {"steps": 16, "baseline": baseline, "classes": [1] * 4,
                "pixel_to_input": functools.partial(preprocess, mode="scale01")}
    true = deletion_insertion(probabilities_of(linear), pictures, [true_map()] * 4, **settings)
    random = deletion_insertion(probabilities_of(linear), pictures, random_maps, **settings)
    assert np.all(true.games["deletion"].aucs < random.games["deletion"].aucs)
    assert np.all(true.games["insertion"].aucs > random.games["insertion"].aucs)
    assert true.games["deletion"].mean_auc < random.games["deletion"].mean_auc
    assert true.games["insertion"].mean_auc > random.games["insertion"].mean_auc


# -- the figure -------------------------------------------------------------------------------


def test_plot_curves_draws_a_line_per_method_with_its_auc():
    from guidedbp import plot as plotting

    curves = {"guided": np.array([0.9, 0.3, 0.1, 0.0, 0.0]),
              "gradcam": np.array([0.9, 0.8, 0.5, 0.2, 0.1])}
    figure = plotting.plot_curves(curves, "cat.jpg: tabby (class 281)", game="deletion")
    (axis,) = figure.axes
    assert axis.get_title(loc="left") == "cat.jpg: tabby (class 281)"
    assert axis.get_xlabel() == "share of pixels deleted, most salient first"
    legend = axis.get_legend()
    assert [text.get_text() for text in legend.get_texts()] == [
        f"guided  AUC {auc(curves['guided']):.3f}", f"gradcam  AUC {auc(curves['gradcam']):.3f}"]
    assert legend.get_title().get_text() == "deletion (lower AUC is better)"
    for line, values in zip(axis.get_lines(), curves.values()):
        np.testing.assert_array_equal(line.get_xdata(), fractions(4))
        np.testing.assert_array_equal(line.get_ydata(), values)
    insertion = plotting.plot_curves(curves, "", game="insertion")
    assert "inserted" in insertion.axes[0].get_xlabel()
    assert plotting.figure_bytes(figure, "png") == plotting.figure_bytes(figure, "png")


@pytest.mark.parametrize("curves, game, fragment", [
    ({}, "deletion", "curves must map"),
    ({"guided": np.ones(3), "vanilla": np.ones(4)}, "deletion", "same length"),
    ({"guided": np.ones(1)}, "deletion", "curves['guided']"),
    ({"guided": np.ones(3)}, "occlusion", "game='occlusion'"),
])
def test_plot_curves_bad_arguments(curves, game, fragment):
    from guidedbp import plot as plotting

    with pytest.raises(ArgumentError) as caught:
        plotting.plot_curves(curves, "", game=game)
    assert fragment in str(caught.value)
