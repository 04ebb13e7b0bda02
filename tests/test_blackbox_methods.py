"""The black-box methods, RISE, KernelSHAP, LIME and Sobol: answers known on hand-made
models, through the real Explainer, and how they run (seeds, batches, targets, SavedModels,
the CLI).
"""

from __future__ import annotations

import itertools
import math

import keras
import numpy as np
import pytest

import guidedbp
from guidedbp import Explainer
from guidedbp.errors import ArgumentError
from guidedbp.targets import Unit

from .helpers import run_cli

BLACKBOX = ("rise", "kernelshap", "lime", "sobol")
#: Small settings for every method: a 2 x 2 grid (4 superpixels) on 8x8 images; fewer
#: samples than the 14 coalitions, so that KernelSHAP samples too.
SMALL = {"grid": 2, "masks": 64, "samples": 12, "designs": 8}


def linear_model(weights: np.ndarray) -> keras.Model:
    """``(8, 8, 1)`` -> ``logit_c = sum(weights[..., c] * x)``; one unit with no head is a
    value, not a class: explain it as ``Unit(0)``."""
    inputs = keras.Input((8, 8, 1))
    dense = keras.layers.Dense(weights.shape[-1], use_bias=False)
    model = keras.Model(inputs, dense(keras.layers.Flatten()(inputs)))
    dense.set_weights([weights.reshape(64, -1)])
    return model


def cell_sums(values: np.ndarray, grid: int) -> np.ndarray:
    """``(8, 8)`` -> ``(grid, grid)`` sums over the cells of a ``grid`` x ``grid`` grid."""
    side = 8 // grid
    return values.reshape(grid, side, grid, side).sum(axis=(1, 3))


def per_cell(saliency: np.ndarray, grid: int) -> np.ndarray:
    """``(8, 8, 1)`` map -> ``(grid, grid)``: one pixel per cell (all are equal)."""
    side = 8 // grid
    cells = saliency[::side, ::side, 0]
    np.testing.assert_array_equal(np.kron(cells, np.ones((side, side))), saliency[..., 0])
    return cells


#: Three classes of dyadic weights; the images are dyadic too, so sums stay exact.
WEIGHTS = (np.random.default_rng(0).integers(-4, 5, (8, 8, 1, 3)) / 4).astype(np.float32)
IMAGES = (np.random.default_rng(1).integers(0, 16, (3, 8, 8, 1)) / 4).astype(np.float32)


@pytest.fixture(scope="module")
def linear() -> keras.Model:
    return linear_model(WEIGHTS)


@pytest.fixture(scope="module")
def cnn() -> keras.Model:
    """8x8x1 -> Conv2D(4, 3x3, same, relu) -> GAP -> Dense(3): not additive over cells."""
    keras.utils.set_random_seed(11)
    inputs = keras.Input((8, 8, 1))
    x = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(inputs)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(3)(x))


def to_input(pixels: np.ndarray) -> np.ndarray:
    """0-255 pixels -> the models' input space: fill 127.5 is 1.0."""
    return np.asarray(pixels, np.float32) / 127.5


# -- KernelSHAP ------------------------------------------------------------------------------


@pytest.mark.parametrize(("grid", "samples"), [(2, 14), (4, 40)],
                         ids=["all-coalitions", "sampled"])
def test_kernelshap_recovers_a_linear_models_superpixel_contributions(linear, grid, samples):
    # f is additive over superpixels, so the regression is exact with every coalition and
    # with sampled ones alike: superpixel c's value is sum_c W * (x - fill).
    explainer = Explainer(linear, "kernelshap", grid=grid, samples=samples,
                          pixel_to_input=to_input)
    for target in (0, 2):
        maps = explainer(IMAGES, target)
        for image, saliency in zip(IMAGES, maps):
            expected = cell_sums(WEIGHTS[..., 0, target] * (image[..., 0] - 1.0), grid)
            np.testing.assert_allclose(per_cell(saliency, grid), expected, atol=1e-4)


def test_kernelshap_with_every_coalition_gives_exact_shapley_values(cnn):
    image = IMAGES[:1]
    maps = Explainer(cnn, "kernelshap", grid=2, samples=14, fill=0.0)(image, 1)
    masks = np.kron(np.eye(4).reshape(4, 2, 2), np.ones((4, 4)))  # (4, 8, 8) the cells

    def value(coalition) -> float:
        kept = masks[list(coalition)].sum(axis=0)[..., None]
        return float(np.asarray(cnn((image * kept).astype(np.float32)))[0, 1])

    shapley = np.zeros(4)
    for player in range(4):
        others = [p for p in range(4) if p != player]
        for size in range(4):
            for coalition in itertools.combinations(others, size):
                weight = math.factorial(size) * math.factorial(3 - size) / math.factorial(4)
                shapley[player] += weight * (value((*coalition, player)) - value(coalition))
    np.testing.assert_allclose(per_cell(maps[0], 2).reshape(-1), shapley, rtol=1e-4,
                               atol=1e-5)
    # Efficiency: the values add up to the score of the image minus that of the fill.
    assert shapley.sum() == pytest.approx(value(range(4)) - value(()), rel=1e-5)


# -- LIME ------------------------------------------------------------------------------------


def test_lime_ranks_a_linear_models_superpixels_with_their_signs():
    weights = np.zeros((8, 8, 1, 1), np.float32)
    weights[:4, :4], weights[:4, 4:], weights[4:, :4] = 1.0, -0.5, 0.25  # 4th: nothing
    image = np.ones((1, 8, 8, 1), np.float32)
    maps = Explainer(linear_model(weights), "lime", grid=2, samples=200, fill=0.0)(image,
                                                                                 Unit(0))
    coefficients = per_cell(maps[0], 2).reshape(-1)
    contributions = np.array([16.0, -8.0, 4.0, 0.0])  # sum over each cell of W * (x - 0)
    np.testing.assert_array_equal(np.argsort(coefficients), np.argsort(contributions))
    assert np.all(np.sign(coefficients[:3]) == np.sign(contributions[:3]))
    assert abs(coefficients[3]) < 0.05 * abs(coefficients[0])
    # A ridge of penalty 1 on 200 coalitions shrinks little: close to the contributions.
    np.testing.assert_allclose(coefficients, contributions, rtol=0.1, atol=0.1)


# -- Sobol -----------------------------------------------------------------------------------


def test_sobol_ranks_an_additive_models_cells_and_gives_zero_to_the_others():
    weights = np.zeros((8, 8, 1, 1), np.float32)
    weights[:4, :4], weights[4:, 4:], weights[:4, 4:] = 1.0, -0.5, 0.25  # (1, 0) does nothing
    image = np.ones((1, 8, 8, 1), np.float32)
    maps = Explainer(linear_model(weights), "sobol", grid=2, designs=32, fill=0.0)(image,
                                                                                  Unit(0))
    indices = per_cell(maps[0], 2).reshape(-1)
    assert indices[2] == 0  # the score never moves with that cell's mask
    assert indices[0] > indices[3] > indices[1] > 0
    # Linear in independent masks: cell i's total index is s_i^2 / sum s^2.
    contributions = np.array([16.0, 4.0, 0.0, -8.0])
    np.testing.assert_allclose(indices, contributions ** 2 / (contributions ** 2).sum(),
                               atol=0.1)


# -- RISE ------------------------------------------------------------------------------------


def test_rise_points_at_the_only_region_that_moves_the_score():
    weights = np.zeros((8, 8, 1, 1), np.float32)
    weights[5:7, 1:3] = 1.0
    image = np.ones((1, 8, 8, 1), np.float32)
    maps = Explainer(linear_model(weights), "rise", grid=4, masks=500, fill=0.0)(image,
                                                                                Unit(0))
    saliency = maps[0, ..., 0]
    row, column = np.unravel_index(np.argmax(saliency), saliency.shape)
    assert 5 <= row <= 6 and 1 <= column <= 2
    assert saliency[5:7, 1:3].min() > saliency[:3, 5:].max() + 0.3


def test_rise_is_zero_for_a_constant_score_and_blind_to_an_offset():
    # sum_i (f_i - mean f) M_i / (masks * p): a score no mask moves gives exactly 0 (the
    # paper's map would be c * sum_i M_i / (masks * p), about c everywhere), and adding a
    # constant to the score changes nothing.
    inputs = keras.Input((8, 8, 1))
    constant = keras.layers.Dense(1, kernel_initializer="zeros", bias_initializer="ones")
    model = keras.Model(inputs, constant(keras.layers.Flatten()(inputs)))
    maps = Explainer(model, "rise", grid=2, masks=200, keep_probability=0.25)(IMAGES[:1],
                                                                              Unit(0))
    np.testing.assert_allclose(maps, 0.0, atol=1e-6)

    weights = WEIGHTS[..., :1]
    inputs = keras.Input((8, 8, 1))
    shifted = keras.layers.Dense(1, use_bias=True)
    model = keras.Model(inputs, shifted(keras.layers.Flatten()(inputs)))
    shifted.set_weights([weights.reshape(64, 1), np.array([100.0], np.float32)])
    offset = Explainer(model, "rise", grid=2, masks=64, fill=0.0)(IMAGES, Unit(0))
    plain = Explainer(linear_model(weights), "rise", grid=2, masks=64, fill=0.0)(IMAGES,
                                                                                 Unit(0))
    assert np.ptp(plain) > 1
    np.testing.assert_allclose(offset, plain, atol=2e-4)


# -- how they run ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reference_maps(cnn) -> dict:
    return Explainer(cnn, ",".join(BLACKBOX), seed=3, **SMALL).explain(IMAGES, 1).by_method


def test_maps_are_seeded_per_image_and_do_not_depend_on_batching(cnn, reference_maps):
    for method in BLACKBOX:
        assert reference_maps[method].shape == (3, 8, 8, 1)
    other = Explainer(cnn, ",".join(BLACKBOX), seed=3, batch_size=5, **SMALL).explain(
        IMAGES, 1).by_method
    alone = Explainer(cnn, ",".join(BLACKBOX), seed=3, **SMALL).explain(IMAGES[:1], 1).by_method
    reseeded = Explainer(cnn, ",".join(BLACKBOX), seed=4, **SMALL).explain(IMAGES, 1).by_method
    for method in BLACKBOX:
        np.testing.assert_allclose(other[method], reference_maps[method], rtol=1e-5,
                                   atol=1e-6)
        np.testing.assert_allclose(alone[method][0], reference_maps[method][0], rtol=1e-5,
                                   atol=1e-6)
        changed = not np.allclose(reseeded[method], reference_maps[method])
        assert changed == (method != "sobol"), method  # Sobol's design is not random


def test_under_smoothgrad_each_noisy_copy_has_its_own_stream_whatever_the_batching(cnn):
    # 3 copies per image: batch_size 2 explains an image's copies 2 at a time, 16 explains
    # 5 images' copies at once; the draws are keyed (seed, image, copy) either way.
    fields = {**SMALL, "smooth": 3, "noise": 0.1, "seed": 3}
    small = Explainer(cnn, ",".join(BLACKBOX), batch_size=2, **fields).explain(IMAGES, 1)
    large = Explainer(cnn, ",".join(BLACKBOX), batch_size=16, **fields).explain(IMAGES, 1)
    for method in BLACKBOX:
        np.testing.assert_allclose(small.by_method[method], large.by_method[method],
                                   rtol=1e-5, atol=1e-6)


def test_several_targets_share_the_copies_and_equal_one_at_a_time(cnn, reference_maps):
    explainer = Explainer(cnn, ",".join(BLACKBOX), seed=3, **SMALL)
    explained = explainer.explain_classes(IMAGES, [1, 2])
    one = explainer.explain(IMAGES, 2).by_method
    for method in BLACKBOX:
        np.testing.assert_allclose(explained[0].by_method[method], reference_maps[method],
                                   rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(explained[1].by_method[method], one[method], rtol=1e-5,
                                   atol=1e-6)
        assert not np.allclose(one[method], reference_maps[method])


def test_a_saved_model_is_explained_without_gradients(cnn, tmp_path, reference_maps):
    cnn.export(str(tmp_path / "exported"))  # no verbose=: Keras 3.4 (the floor) has none
    loaded = guidedbp.load_model(str(tmp_path / "exported"))
    assert loaded.format == "savedmodel"
    maps = Explainer(loaded, "rise", seed=3, **SMALL)(IMAGES, 1)
    np.testing.assert_allclose(maps, reference_maps["rise"], rtol=1e-4, atol=1e-5)


def test_bad_grids_and_too_many_passes_are_refused(linear):
    with pytest.raises(ArgumentError, match=r"grid=16 cells per side is finer than the 8x8 "):
        Explainer(linear, "lime", grid=16)(IMAGES)
    with pytest.raises(ArgumentError, match=r"designs=2000 with grid=8 take 132000 forward "):
        Explainer(linear, "sobol", grid=8, designs=2000)(IMAGES)
    for fields, message in [({"masks": 0}, "masks=0 must be a positive integer"),
                            ({"masks": 100001}, "above the upper bound of 100000"),
                            ({"keep_probability": 0.0}, r"keep_probability=0.0 must be"),
                            ({"grid": 65}, "grid=65 is above the upper bound of 64")]:
        with pytest.raises(ArgumentError, match=message):
            Explainer(linear, "rise", **fields)


# -- progress --------------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "fields", "per_image"), [
    ("rise", {"masks": 10}, 10),
    ("kernelshap", {"grid": 2, "samples": 14}, 16),  # every coalition, the empty and the full
    ("kernelshap", {"grid": 2, "samples": 10}, 12),
    ("lime", {"samples": 9}, 9),
    ("sobol", {"grid": 2, "designs": 2}, 12),  # designs x (cells + 2)
    ("occlusion", {"patch": 4, "stride": 4}, 5),  # the image and 4 positions
    ("scorecam", {}, 4),  # the Conv2D's 4 channels
])
def test_progress_counts_every_forward_pass_of_a_perturbation_method(cnn, method, fields,
                                                                       per_image):
    calls = []
    explainer = Explainer(cnn, method, batch_size=4, progress=lambda *call: calls.append(call),
                          **fields)
    explainer(IMAGES[:2], target=[0, 2])
    total = 2 * per_image
    assert all(name == method and every == total for name, _, every in calls)
    done = [count for _, count, _ in calls]
    # Each call adds one forward pass of at most batch_size copies, ending at the total.
    steps = np.diff([0, *done])
    assert done[-1] == total and np.all(steps > 0) and np.all(steps <= 4)
    if method == "rise":  # chunks of 4 per image: 4, 4, 2 twice
        assert done == [4, 8, 10, 14, 18, 20]


def test_progress_is_only_for_perturbation_methods(cnn):
    calls = []
    Explainer(cnn, "guided,gradcam,rise", masks=3, progress=lambda *call: calls.append(call))(
        IMAGES[:1], 1)
    assert calls == [("rise", 3, 3)]


@pytest.mark.filterwarnings("ignore:no Rescaling/Normalization layer")
def test_explain_files_hands_the_passes_to_its_progress_object(cnn, tmp_path):
    from PIL import Image

    for index in range(3):
        Image.fromarray((IMAGES[index, ..., 0] * 16).astype(np.uint8)).save(
            tmp_path / f"{index}.png")

    class Recorder:
        def __init__(self):
            self.events = []

        def begin(self, total):
            self.events.append(("begin", total))

        def advance(self):
            self.events.append(("advance",))

        def passes(self, method, done, total):
            self.events.append((method, done, total))

    recorder = Recorder()
    guidedbp.explain_files(cnn, [tmp_path / f"{i}.png" for i in range(3)], tmp_path / "out",
                           methods="lime", samples=6, batch_size=2, progress=recorder)
    # Batches of 2 images, then 1: 6 copies per image, 2 per forward pass (batch_size).
    assert recorder.events[0] == ("begin", 3)
    passes = [event for event in recorder.events if event[0] == "lime"]
    assert passes == [("lime", 2, 12), ("lime", 4, 12), ("lime", 6, 12), ("lime", 8, 12),
                      ("lime", 10, 12), ("lime", 12, 12), ("lime", 2, 6), ("lime", 4, 6),
                      ("lime", 6, 6)]
    assert recorder.events.count(("advance",)) == 3


def test_the_progress_bar_shows_the_passes_until_the_next_image(capsys):
    from guidedbp.cli.progress import Progress

    bar = Progress()
    bar.begin(4)
    bar.drawn = 0.0  # past the redraw interval
    bar.passes("rise", 1200, 1600)
    bar.drawn = 0.0  # past the redraw interval
    bar.passes("rise", 1600, 1600)
    bar.advance()
    bar.close()
    lines = capsys.readouterr().err.split("\r")[1:]
    # begin() draws at once; then each count of passes, then the first image through.
    assert [line.split("] ")[1].split(" ")[0] for line in lines] == ["0/4", "0/4", "0/4", "1/4"]
    assert lines[0].endswith(" · starting...\x1b[K")
    assert lines[1].endswith(" · first pass... · rise 1200/1600 passes\x1b[K")
    assert lines[2].endswith(" · first pass... · rise 1600/1600 passes\x1b[K")
    assert " images/s · ETA " in lines[3] and lines[3].endswith("\x1b[K\n")


def test_cli_explains_with_rise_and_refuses_a_bad_value(cnn, tmp_path):
    from PIL import Image

    cnn.save(tmp_path / "cnn.keras")
    Image.fromarray((IMAGES[0, ..., 0] * 16).astype(np.uint8)).save(tmp_path / "a.png")
    out = tmp_path / "out"
    run_cli("explain", tmp_path / "cnn.keras", tmp_path / "a.png", "-o", out, "--method",
            "rise", "--masks", "64", "--grid", "2", "--raw", "-q", code=0)
    saliency = np.load(out / "a.png.rise.npy")
    assert saliency.shape == (8, 8, 1) and np.ptp(saliency) > 0
    result = run_cli("explain", tmp_path / "cnn.keras", tmp_path / "a.png", "-o",
                     tmp_path / "bad", "--method", "kernelshap", "--grid", "9")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "Error: --grid 9 cells per side is finer than the 8x8 images" in result.stderr
    assert not (tmp_path / "bad").exists()


def test_docstring_examples_run():
    import doctest

    from guidedbp.engine.methods import blackbox as _blackbox
    from guidedbp.engine.methods import superpixels as _superpixels

    assert doctest.testmod(_blackbox).failed == 0
    assert doctest.testmod(_superpixels).failed == 0
