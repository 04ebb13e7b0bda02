"""KernelSHAP and LIME over SLIC superpixels (``segments="slic"``, scikit-image): the
superpixels follow the image's colours, the values are the regression's on them (checked
against sums over the superpixels scikit-image itself returns), and without scikit-image
the option is refused in one line.
"""

from __future__ import annotations

import subprocess
import sys

import keras
import numpy as np
import pytest

from guidedbp import Explainer
from guidedbp.engine.methods.superpixels import slic_segments

from .helpers import run_cli

SIDE = 32
#: Four flat quadrants of far-apart colours (0-255): top left, top right, bottom left,
#: bottom right.
COLOURS = np.array([[230, 30, 30], [30, 200, 40], [40, 40, 220], [240, 230, 60]], np.float32)


def quadrants() -> np.ndarray:
    """float32 ``(32, 32, 3)``: :data:`COLOURS` in four quadrants."""
    image = np.zeros((SIDE, SIDE, 3), np.float32)
    half = SIDE // 2
    for index, (rows, cols) in enumerate([(slice(0, half), slice(0, half)),
                                          (slice(0, half), slice(half, None)),
                                          (slice(half, None), slice(0, half)),
                                          (slice(half, None), slice(half, None))]):
        image[rows, cols] = COLOURS[index]
    return image


def blobs() -> np.ndarray:
    """float32 ``(32, 32, 3)``: a grey background with a red disc and a blue bar, regions
    that no grid's cells follow (SLIC asked for 9 superpixels gives 6, the disc and the
    bar among them)."""
    image = np.full((SIDE, SIDE, 3), 128.0, np.float32)
    rows, cols = np.mgrid[:SIDE, :SIDE]
    image[(rows - 11) ** 2 + (cols - 20) ** 2 < 40] = [220, 20, 20]
    image[22:27, 3:29] = [20, 30, 210]
    return image


#: Dyadic weights: a linear model's sums stay exact in float32.
WEIGHTS = (np.random.default_rng(5).integers(-4, 5, (SIDE, SIDE, 3, 2)) / 64).astype(np.float32)


@pytest.fixture(scope="module")
def linear() -> keras.Model:
    """``(32, 32, 3)`` -> ``logit_c = sum(WEIGHTS[..., c] * x)``, 2 classes."""
    inputs = keras.Input((SIDE, SIDE, 3))
    dense = keras.layers.Dense(2, use_bias=False)
    model = keras.Model(inputs, dense(keras.layers.Flatten()(inputs)))
    dense.set_weights([WEIGHTS.reshape(-1, 2)])
    return model


def test_slic_superpixels_are_the_flat_regions_numbered_by_their_first_pixel():
    labels = slic_segments(quadrants(), 4)
    half = SIDE // 2
    expected = np.zeros((SIDE, SIDE), np.int64)
    expected[:half, half:], expected[half:, :half], expected[half:, half:] = 1, 2, 3
    np.testing.assert_array_equal(labels, expected)
    # The image's range does not matter: SLIC sees it scaled to its own minimum and maximum.
    np.testing.assert_array_equal(slic_segments(quadrants() / 127.5 - 1, 4), expected)
    # One channel: segmented on its values.
    grey = quadrants()[..., :1]
    np.testing.assert_array_equal(slic_segments(grey, 4), expected)


@pytest.mark.parametrize(("image", "grid"), [(quadrants(), 2), (blobs(), 3)],
                         ids=["quadrants", "blobs"])
def test_kernelshap_over_slic_superpixels_recovers_a_linear_models_contributions(
        linear, image, grid):
    # A linear model is additive over any regions: with every coalition scored, the
    # Shapley value of superpixel s is sum over s of W * (x - fill), fill 0 here.
    labels = slic_segments(image, grid * grid)
    cells = labels.max() + 1
    assert 4 <= cells <= 8  # few enough to score all 2^cells - 2 coalitions
    explainer = Explainer(linear, "kernelshap", grid=grid, segments="slic", fill=0.0,
                          samples=int(2 ** cells))
    for target in (0, 1):
        saliency = explainer(image[None], target)[0, ..., 0]
        contributions = (WEIGHTS[..., target] * image).sum(axis=-1)
        expected = np.array([contributions[labels == s].sum() for s in range(cells)])
        np.testing.assert_allclose(saliency, expected[labels], rtol=1e-4, atol=1e-3)


def test_on_flat_quadrants_slic_gives_the_grids_map(linear):
    image = quadrants()[None]
    slic = Explainer(linear, "kernelshap", grid=2, segments="slic", fill=0.0, samples=14)
    grid = Explainer(linear, "kernelshap", grid=2, fill=0.0, samples=14)
    np.testing.assert_allclose(slic(image, 0), grid(image, 0), rtol=1e-6)


def test_lime_over_slic_superpixels_ranks_the_contributions(linear):
    image = blobs()
    labels = slic_segments(image, 9)
    cells = labels.max() + 1
    saliency = Explainer(linear, "lime", grid=3, segments="slic", fill=0.0, samples=300)(
        image[None], 1)[0, ..., 0]
    contributions = (WEIGHTS[..., 1] * image).sum(axis=-1)
    expected = np.array([contributions[labels == s].sum() for s in range(cells)])
    coefficients = np.array([saliency[labels == s][0] for s in range(cells)])
    for s in range(cells):  # one value per superpixel
        assert np.all(saliency[labels == s] == coefficients[s])
    np.testing.assert_array_equal(np.argsort(coefficients), np.argsort(expected))
    np.testing.assert_allclose(coefficients, expected, rtol=0.1, atol=0.5)


def test_the_grid_stays_the_default_and_sobol_and_rise_ignore_segments(linear):
    image = blobs()[None]
    for method in ("kernelshap", "lime"):
        grid = Explainer(linear, method, grid=2, samples=14)(image, 0)
        assert len(np.unique(grid)) <= 4
        np.testing.assert_array_equal(grid[0, :16, :16], np.full((16, 16, 1), grid[0, 0, 0]))
    for method, fields in (("sobol", {"designs": 4}), ("rise", {"masks": 16})):
        plain = Explainer(linear, method, grid=2, **fields)(image, 0)
        slic = Explainer(linear, method, grid=2, segments="slic", **fields)(image, 0)
        np.testing.assert_array_equal(plain, slic)


def test_a_bad_segments_value_is_refused():
    from guidedbp.errors import ArgumentError

    with pytest.raises(ArgumentError, match="segments='quickshift' is not one of grid, slic"):
        Explainer(keras.Sequential([keras.Input((4, 4, 1)), keras.layers.Flatten()]),
                  "lime", segments="quickshift")


def test_without_scikit_image_slic_is_refused_in_one_line(tmp_path):
    # A fresh interpreter where `import skimage` fails, as without the extra.
    code = (
        "import sys; sys.modules['skimage'] = None\n"
        "import keras, numpy as np\n"
        "from guidedbp import Explainer\n"
        "from guidedbp.errors import ArgumentError\n"
        "model = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Flatten(),"
        " keras.layers.Dense(2)])\n"
        "Explainer(model, 'lime', segments='grid', samples=4)(np.ones((1, 8, 8, 1)))\n"
        "try:\n"
        "    Explainer(model, 'kernelshap', segments='slic')(np.ones((1, 8, 8, 1)))\n"
        "except ArgumentError as error:\n"
        "    print('refused:', error)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == ("refused: segments='slic' needs scikit-image: pip "
                                     "install 'guidedbp[segments]'")


def test_cli_explains_over_slic_superpixels(linear, tmp_path):
    from PIL import Image

    linear.save(tmp_path / "linear.keras")
    Image.fromarray(blobs().astype(np.uint8)).save(tmp_path / "blobs.png")
    out = tmp_path / "out"
    run_cli("explain", tmp_path / "linear.keras", tmp_path / "blobs.png", "-o", out,
            "--method", "kernelshap", "--segments", "slic", "--grid", "3", "--samples", "62",
            "--fill", "0", "--raw", "-q", "--class", "1", code=0)
    saliency = np.load(out / "blobs.png.1.kernelshap.npy")[..., 0]
    labels = slic_segments(blobs(), 9)
    contributions = (WEIGHTS[..., 1] * blobs()).sum(axis=-1)
    expected = np.array([contributions[labels == s].sum() for s in range(labels.max() + 1)])
    np.testing.assert_allclose(saliency, expected[labels], rtol=1e-4, atol=1e-3)
