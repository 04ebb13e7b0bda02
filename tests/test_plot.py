"""Tests for guidedbp.plot: what each figure column shows, its limits, and the files.

Limits are computed here with numpy, straight from the maps, and compared with what the
figure holds; files are written twice (and once in another process) and compared byte
for byte.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

import guidedbp
from guidedbp import plot as plotting
from guidedbp.errors import ArgumentError, GuidedbpError
from guidedbp.io.write import is_own_png
from guidedbp.render import DEFAULT_CLIP, colormap_lut

REPO = Path(__file__).resolve().parents[1]
CIRCLE = REPO / "sample_images" / "shapes" / "circle_0.png"

# The synthetic figure drawn here and, for the byte comparison, in a fresh process.
SYNTHETIC = """
import numpy as np
from guidedbp import plot as plotting
rows, columns = np.mgrid[0:12, 0:16]
picture = (np.stack([rows * 20, columns * 15, rows * columns], axis=2) % 256).astype(np.uint8)
wave = np.sin(rows / 2.0) * np.cos(columns / 3.0)
gradient = wave[..., None] * np.array([1.0, -0.5, 0.25])
cam = np.exp(-((rows - 6.0) ** 2 + (columns - 8.0) ** 2) / 10.0)[..., None]
figure = plotting.draw(picture, {"guided": gradient, "gradcam": cam}, "class 3 p=0.250")
"""


def synthetic() -> dict:
    scope: dict = {}
    exec(SYNTHETIC, scope)
    return scope


def method_axes(figure) -> list:
    """The image axes: the picture, then one per method (colorbars come after them)."""
    return [axis for axis in figure.axes if axis.images and not hasattr(axis, "_colorbar")]


def shown(axis) -> np.ndarray:
    (image,) = axis.images
    return np.asarray(image.get_array())


@pytest.fixture(scope="module")
def result():
    return guidedbp.explain_image("demo", CIRCLE, methods="guided,gradcam")


@pytest.fixture(scope="module")
def figure(result):
    return plotting.plot(result)


@pytest.fixture(scope="module")
def files(figure) -> dict[str, bytes]:
    return {name: plotting.figure_bytes(figure, name) for name in plotting.FIGURE_FORMATS}


def fake_result(image, fitted, maps, original_maps, target=3, label=None, probability=0.25):
    return SimpleNamespace(image=image, fitted=fitted, maps=maps,
                           original_maps=lambda: original_maps, target=target, label=label,
                           probability=probability)


# -- what the figure shows ---------------------------------------------------------------------


def test_one_column_per_method_titled_each_with_its_colorbar(figure):
    axes = method_axes(figure)
    assert [axis.get_title() for axis in axes] == ["image", "guided", "gradcam"]
    assert axes[0].images[0].colorbar is None  # the picture has none
    assert [axis.get_xlabel() for axis in axes] == ["", "gradient, sum over channels",
                                                    "magnitude"]
    bars = [axis.images[0].colorbar for axis in axes[1:]]
    assert all(bar is not None for bar in bars)
    assert len(figure.axes) == 3  # colorbars are insets of their maps
    assert [len(axis.child_axes) for axis in axes] == [0, 1, 1]
    assert [bar.ax for bar in bars] == [axis.child_axes[0] for axis in axes[1:]]
    # Laid out side by side: no two axes (colorbars included) overlap, each colorbar
    # sits right of its own map and left of the next column.
    figure.draw_without_rendering()
    boxes = [axis.get_window_extent() for axis in [*axes, *(bar.ax for bar in bars)]]
    for first in range(len(boxes)):
        for second in range(first + 1, len(boxes)):
            assert not boxes[first].overlaps(boxes[second]), (first, second)
    for index, bar in enumerate(bars, start=1):
        box = bar.ax.get_window_extent()
        assert box.x0 >= axes[index].get_window_extent().x1
        if index + 1 < len(axes):
            assert box.x1 <= axes[index + 1].get_window_extent().x0


def test_the_picture_column_shows_the_decoded_image(figure, result):
    np.testing.assert_array_equal(shown(method_axes(figure)[0]), result.image)


def test_a_signed_map_is_summed_over_channels_with_symmetric_limits(figure, result):
    guided = result.original_maps()["guided"]
    assert guided.shape[2] == 3
    summed = guided.astype(np.float64).sum(axis=2)
    limit = np.percentile(np.abs(summed), DEFAULT_CLIP)
    assert limit > 0
    image = method_axes(figure)[1].images[0]
    np.testing.assert_array_equal(np.asarray(image.get_array()), summed)
    assert image.get_cmap().name == plotting.SIGNED_COLORMAP == "RdBu_r"
    assert (image.colorbar.vmin, image.colorbar.vmax) == (-limit, limit)
    assert image.norm(0.0) == 0.5  # zero sits at the centre of the diverging map
    # Values beyond +-limit exist on both sides (the 99th percentile cuts), and say so.
    assert summed.min() < -limit and summed.max() > limit
    assert image.colorbar.extend == "both"


def test_a_magnitude_map_uses_the_sequential_colormap_from_zero(figure, result):
    gradcam = result.original_maps()["gradcam"]
    magnitude = np.abs(gradcam.astype(np.float64)).max(axis=2)
    limit = np.percentile(magnitude, DEFAULT_CLIP)
    image = method_axes(figure)[2].images[0]
    np.testing.assert_array_equal(np.asarray(image.get_array()), magnitude)
    assert image.get_cmap().name == "inferno"
    assert (image.colorbar.vmin, image.colorbar.vmax) == (0.0, limit)
    # The PNG renders' own table: the same colours at both ends.
    table = colormap_lut("inferno")
    for value, entry in ((0.0, 0), (limit, 255)):
        rgb = np.asarray(image.get_cmap()(image.norm(value))[:3]) * 255
        np.testing.assert_allclose(rgb, table[entry], atol=1e-9)


def test_the_suptitle_names_the_class_its_probability_and_the_cam_layer(figure, result):
    # The demo's last convolution before its global pooling: Grad-CAM's default layer.
    assert result.layers == {"gradcam": "conv5"}
    match = re.fullmatch(r"circle \(class 0\) p=(\d\.\d{3}) · gradcam at conv5",
                         figure.get_suptitle())
    assert match, figure.get_suptitle()
    assert float(match.group(1)) == pytest.approx(result.probability, abs=5e-4)
    # A figure without the class activation map does not name its layer.
    assert " at " not in plotting.plot(result, methods="guided").get_suptitle()


def test_clip_and_cmap_change_the_limits_and_colours(result):
    figure = plotting.plot(result, methods=["gradcam", "guided"], cmap="viridis", clip=100)
    axes = method_axes(figure)
    assert [axis.get_title() for axis in axes] == ["image", "gradcam", "guided"]
    gradcam, guided = axes[1].images[0], axes[2].images[0]
    cam = result.original_maps()["gradcam"]
    assert gradcam.get_cmap().name == "viridis"
    assert (gradcam.colorbar.vmin, gradcam.colorbar.vmax) == (0.0, float(np.abs(cam).max()))
    summed = result.original_maps()["guided"].astype(np.float64).sum(axis=2)
    assert guided.colorbar.vmax == np.abs(summed).max()
    assert guided.colorbar.extend == "neither"  # nothing lies beyond the 100th percentile


def test_a_duck_typed_result_its_caption_and_sizes():
    picture = np.arange(8 * 8 * 3, dtype=np.uint8).reshape(8, 8, 3)
    fitted = picture[::2, ::2]
    cam = np.linspace(0, 1, 16).reshape(4, 4, 1)
    big_cam = np.linspace(0, 1, 64).reshape(8, 8, 1)
    result = fake_result(picture, fitted, {"gradcam": cam}, {"gradcam": big_cam},
                         target=3, label=None, probability=0.998)
    original = plotting.plot(result)
    assert original.get_suptitle() == "class 3 p=0.998"
    np.testing.assert_array_equal(shown(method_axes(original)[0]), picture)
    np.testing.assert_array_equal(shown(method_axes(original)[1]), big_cam[..., 0])
    model = plotting.plot(result, size="model", figsize=(5, 2))
    np.testing.assert_array_equal(shown(method_axes(model)[0]), fitted)
    np.testing.assert_array_equal(shown(method_axes(model)[1]), cam[..., 0])
    assert model.get_size_inches().tolist() == [5.0, 2.0]
    named = fake_result(picture, fitted, {"gradcam": cam}, {"gradcam": big_cam},
                        target=0, label="tabby", probability=0.87349)
    assert plotting.plot(named).get_suptitle() == "tabby (class 0) p=0.873"


def test_pictures_gray_larger_and_maps_two_dimensional():
    gray = np.arange(64, dtype=np.uint8).reshape(8, 8, 1)
    figure = plotting.draw(gray, {"vanilla": np.ones((8, 8))}, "")
    np.testing.assert_array_equal(shown(method_axes(figure)[0]), np.repeat(gray, 3, axis=2))
    # A picture twice the maps' size (maps capped at the largest shown size) is reduced.
    large = np.zeros((16, 16, 3), np.uint8)
    figure = plotting.draw(large, {"gradcam": np.ones((8, 8, 1))}, "")
    assert shown(method_axes(figure)[0]).shape == (8, 8, 3)


def test_sparse_and_all_zero_maps_still_get_a_scale():
    sparse = np.zeros((40, 25, 1))
    sparse[3, 4] = 5.0  # one pixel of 1000: the 99th percentile is 0
    figure = plotting.draw(np.zeros((40, 25), np.uint8),
                           {"gradcam": sparse, "guided": np.zeros((40, 25, 3))}, "")
    cam, guided = (axis.images[0].colorbar for axis in method_axes(figure)[1:])
    assert (cam.vmin, cam.vmax) == (0.0, 5.0)  # the maximum, as the renders do
    assert (guided.vmin, guided.vmax) == (-1.0, 1.0)


def test_a_tiny_map_is_drawn_as_the_same_map_at_scale_one():
    # issue 19: no floor on any scale. 2**-47 (7e-15) scales exactly: the limits scale
    # with the map and every map pixel gets the very same colour.
    rows, columns = np.mgrid[0:12, 0:16]
    wave = np.sin(rows / 2.0) * np.cos(columns / 3.0)
    maps = {"guided": wave[..., None] * np.array([1.0, -0.5, 0.25]),
            "gradcam": np.abs(wave)[..., None]}
    picture = np.zeros((12, 16), np.uint8)
    figures = [plotting.draw(picture, {name: values * scale for name, values in maps.items()},
                             "t") for scale in (1.0, 2.0**-47)]
    for one, tiny in zip(*(method_axes(figure)[1:] for figure in figures), strict=True):
        colours = [axis.images[0].to_rgba(shown(axis), bytes=True) for axis in (one, tiny)]
        assert colours[0].std() > 20  # a picture, not a flat one
        np.testing.assert_array_equal(colours[1], colours[0])
        bar_one, bar_tiny = one.images[0].colorbar, tiny.images[0].colorbar
        assert (bar_tiny.vmin, bar_tiny.vmax) == (bar_one.vmin * 2.0**-47,
                                                  bar_one.vmax * 2.0**-47)


@pytest.mark.parametrize("maps, keywords, fragments", [
    ({"guided": np.zeros((4, 4, 2))}, {}, ["maps['guided']", "(4, 4, 2)"]),
    ({"guided": np.full((4, 4), np.nan)}, {}, ["maps['guided']", "finite"]),
    ({"guided": np.zeros((4, 4), complex)}, {}, ["maps['guided']", "complex"]),
    ({"sharp": np.zeros((4, 4))}, {}, ["method='sharp'", "guided"]),
    ({}, {}, ["maps must"]),
    ({"guided": np.zeros((4, 4)), "gradcam": np.zeros((2, 2))}, {}, ["guided 4x4", "gradcam 2x2"]),
    ({"guided": np.zeros((5, 4))}, {}, ["picture has size 4x4", "maps have 5x4"]),
    ({"guided": np.zeros((4, 4))}, {"clip": 0}, ["clip=0", "(0, 100]"]),
    ({"guided": np.zeros((4, 4))}, {"clip": True}, ["clip=True"]),
    ({"guided": np.zeros((4, 4))}, {"cmap": "jet"}, ["cmap='jet'", "inferno"]),
    ({"guided": np.zeros((4, 4))}, {"column_width": -1}, ["column_width=-1"]),
])
def test_draw_names_what_is_wrong(maps, keywords, fragments):
    with pytest.raises(ArgumentError) as caught:
        plotting.draw(np.zeros((4, 4, 3), np.uint8), maps, "title", **keywords)
    for fragment in fragments:
        assert fragment in str(caught.value)


def test_draw_rejects_a_picture_that_is_not_uint8():
    with pytest.raises(ArgumentError, match="picture must have dtype uint8, got float64"):
        plotting.draw(np.zeros((4, 4)), {"guided": np.zeros((4, 4))}, "")


def test_plot_names_what_is_wrong(result):
    with pytest.raises(ArgumentError, match=r"methods='nope'.*guided, gradcam"):
        plotting.plot(result, methods="nope")
    with pytest.raises(ArgumentError, match=r"size='huge' is not one of original, model"):
        plotting.plot(result, size="huge")
    with pytest.raises(ArgumentError, match=r"figsize=\(1, 0\)"):
        plotting.plot(result, figsize=(1, 0))
    with pytest.raises(ArgumentError, match="a dict has no image, fitted"):
        plotting.plot({})


def boxes_in_figure(figure, axes) -> list:
    """Each axis' box in figure coordinates (0..1 across the figure), after layout."""
    return [axis.get_position() for axis in axes]


def test_a_wide_figsize_keeps_the_panels_together():
    """One method in a figure much wider than the pictures need: the picture and the map
    stay side by side, the spare width goes to both outer margins, not between them."""
    rows, columns = np.mgrid[0:32, 0:32]
    picture = (rows * 8 % 256).astype(np.uint8)
    gradient = np.sin(rows / 3.0)[..., None] * np.cos(columns / 4.0)[..., None]
    result = fake_result(picture, picture, {"guided": gradient}, {"guided": gradient})
    figure = plotting.plot(result, figsize=(12, 3))
    image, guided = boxes_in_figure(figure, method_axes(figure))
    width, height = figure.get_size_inches()
    # Square pictures stay square (in inches), as tall as the figure allows.
    for box in (image, guided):
        assert box.width * width == pytest.approx(box.height * height, rel=1e-6)
    gap = guided.x0 - image.x1
    assert 0 < gap * width < 0.5  # inches: the layout's spacing, not a third of the figure
    # The pair (and the map's colorbar, with its ticks) sits in the middle.
    bar = figure.axes[1].child_axes[0]
    right = bar.get_tightbbox().transformed(figure.transFigure.inverted()).x1
    assert image.x0 == pytest.approx(1 - right, abs=0.05)
    assert image.x0 > 0.2  # 12 inches are far more than two 2.3-inch pictures need


def test_a_wide_figsize_with_several_methods_leaves_no_gap_either(result):
    figure = plotting.plot(result, figsize=(16, 3))
    axes = method_axes(figure)
    boxes = boxes_in_figure(figure, axes)
    width = figure.get_size_inches()[0]
    # Between two maps: only the first one's colorbar and its ticks (about an inch).
    assert (boxes[1].x0 - boxes[0].x1) * width < 0.5
    assert (boxes[2].x0 - boxes[1].x1) * width < 1.2


@pytest.fixture(scope="module")
def square(result):
    """The circle explained for the class "square": another row of the same picture."""
    return guidedbp.explain_image("demo", CIRCLE, target="square", methods="guided,gradcam")


def test_compare_is_a_grid_of_the_single_figures(result, square):
    figure = plotting.compare([result, square])
    axes = method_axes(figure)
    assert len(axes) == 6  # 2 rows x (picture + 2 methods), row by row
    grid = [axes[:3], axes[3:]]
    boxes = [boxes_in_figure(figure, row) for row in grid]
    # A grid: each row's axes side by side at one height, each column's under each other.
    for row in boxes:
        assert len({(round(box.y0, 6), round(box.y1, 6)) for box in row}) == 1
        assert row[0].x1 <= row[1].x0 and row[1].x1 <= row[2].x0
    for column in range(3):
        assert boxes[0][column].x0 == pytest.approx(boxes[1][column].x0)
    assert boxes[1][0].y1 < boxes[0][0].y0  # the second result under the first
    # The methods title the top row; each row names its image, class and probability.
    assert [axis.get_title() for axis in grid[0]] == ["image", "guided", "gradcam"]
    assert [axis.get_title() for axis in grid[1]] == ["", "", ""]
    assert grid[0][0].get_ylabel() == (f"circle_0.png\ncircle (class 0) "
                                       f"p={result.probability:.3f} · gradcam at conv5")
    assert grid[1][0].get_ylabel() == (f"circle_0.png\nsquare (class 1) "
                                       f"p={square.probability:.3f} · gradcam at conv5")
    assert figure.get_suptitle() == ""
    # Each row shows what plot() shows for its result: the same arrays, limits, colours.
    for row, single in zip(grid, (plotting.plot(result), plotting.plot(square))):
        for mine, theirs in zip(row, method_axes(single)):
            np.testing.assert_array_equal(shown(mine), shown(theirs))
            (image,), (reference,) = mine.images, theirs.images
            assert image.get_cmap().name == reference.get_cmap().name
            assert image.get_clim() == reference.get_clim()
            assert (image.colorbar is None) == (reference.colorbar is None)
    # Another class, other maps: the rows differ.
    assert not np.array_equal(shown(grid[0][1]), shown(grid[1][1]))


def test_compare_methods_title_caveats_and_one_result():
    picture = np.zeros((6, 6, 3), np.uint8)
    cam = np.linspace(0, 1, 36).reshape(6, 6, 1)
    caveat = SimpleNamespace(line="guided = plain gradient: the model has no guided "
                                  "activation", concerns=lambda name: name == "guided")
    first = fake_result(picture, picture, {"gradcam": cam, "guided": cam},
                        {"gradcam": cam, "guided": cam}, target=1, probability=0.5)
    first.caveats = (caveat,)
    first.path = "/data/photos/cat.jpg"
    figure = plotting.compare([first], methods="guided", title="two classes")
    axes = method_axes(figure)
    assert [axis.get_title() for axis in axes] == ["image", "guided"]
    assert axes[0].get_ylabel() == "cat.jpg\nclass 1 p=0.500"
    assert axes[0].get_xlabel().replace("\n", " ") == (
        "\u26a0 guided = plain gradient: the model has no guided activation")
    assert figure.get_suptitle() == "two classes"
    # A single result is a grid of one row; a caveat about another method is not shown.
    alone = plotting.compare(first, methods="gradcam")
    assert [axis.get_title() for axis in method_axes(alone)] == ["image", "gradcam"]
    assert method_axes(alone)[0].get_xlabel() == ""


def test_compare_names_what_is_wrong():
    picture = np.zeros((4, 4, 3), np.uint8)
    cam = np.ones((4, 4, 1))
    both = fake_result(picture, picture, {"gradcam": cam, "guided": cam},
                       {"gradcam": cam, "guided": cam})
    one = fake_result(picture, picture, {"gradcam": cam}, {"gradcam": cam})
    with pytest.raises(ArgumentError, match="results must be a non-empty sequence"):
        plotting.compare([])
    with pytest.raises(ArgumentError, match=r"results\[1\] holds the methods gradcam, "
                                            r"results\[0\] gradcam, guided: choose the "
                                            r"columns with methods="):
        plotting.compare([both, one])
    with pytest.raises(ArgumentError, match=r"results\[1\]: methods='guided'"):
        plotting.compare([both, one], methods="guided")
    with pytest.raises(ArgumentError, match=r"results\[0\] must be what .* a dict has no"):
        plotting.compare([{}])
    with pytest.raises(ArgumentError, match="figsize="):
        plotting.compare([one], figsize=(0, 1))


def test_compare_as_a_person_sees_it(result, square, tmp_path):
    """The PNG, read back: two rows of three panels, the rows' maps where they belong."""
    figure = plotting.compare([result, square])
    path = tmp_path / "compare.png"
    path.write_bytes(plotting.figure_bytes(figure, "png", dpi=int(figure.dpi)))
    with Image.open(path) as png:
        pixels = np.asarray(png.convert("RGB")).astype(int)
    height, width = pixels.shape[:2]
    assert (width, height) == tuple(round(side * figure.dpi)
                                    for side in figure.get_size_inches())
    for row in (method_axes(figure)[:3], method_axes(figure)[3:]):
        for axis in row:
            box = axis.get_window_extent()
            # The middle of each panel is drawn (not the white figure background).
            middle = pixels[height - int(box.y1) + 5:height - int(box.y0) - 5,
                            int(box.x0) + 5:int(box.x1) - 5]
            assert middle.size and np.any(middle.sum(axis=2) < 3 * 250), axis.get_title()


# -- files -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, magic, mark", [
    ("pdf", b"%PDF-", b"/Creator (guidedbp)"),
    ("svg", b"<?xml", b"<dc:title>guidedbp</dc:title>"),
    ("png", b"\x89PNG\r\n\x1a\n", b"tEXtSoftware\x00guidedbp"),
])
def test_files_are_the_same_every_time_and_marked(figure, files, name, magic, mark):
    data = files[name]
    assert data.startswith(magic)
    assert mark in data
    assert plotting.figure_bytes(figure, name) == data
    assert b"CreationDate" not in data and b"<dc:date>" not in data


def test_files_are_the_same_in_another_process():
    here = {name: hashlib.sha256(plotting.figure_bytes(synthetic()["figure"], name)).hexdigest()
            for name in plotting.FIGURE_FORMATS}
    script = ("import sys\nimport guidedbp.plot\n"
              "assert 'matplotlib' not in sys.modules, 'import guidedbp.plot imported it'\n"
              + SYNTHETIC + "import hashlib, json\n"
              "print(json.dumps({name: hashlib.sha256(plotting.figure_bytes(figure, name))"
              ".hexdigest() for name in plotting.FIGURE_FORMATS}))\n")
    process = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                             text=True, timeout=120)
    assert process.returncode == 0, process.stderr
    assert json.loads(process.stdout.splitlines()[-1]) == here


def test_vector_files_keep_text_as_text_and_pictures_as_images(files):
    svg = files["svg"].decode()
    assert re.search(r"<text [^>]*>guided</text>", svg)
    assert re.search(r"<text [^>]*>circle \(class 0\) p=\d\.\d{3} · gradcam at conv5</text>",
                     svg)
    assert svg.count("<image ") >= 3  # the picture and the two maps
    pdf = files["pdf"]
    assert b"/FontFile2" in pdf  # TrueType text, not Type 3 glyph drawings
    assert pdf.count(b"/Subtype /Image") >= 3


def test_png_is_the_figure_at_its_dpi(figure, files):
    with Image.open(io.BytesIO(files["png"])) as image:
        assert image.mode == "RGB"
        width, height = figure.get_size_inches() * 150
        assert image.size == (round(width), round(height))
    small = plotting.figure_bytes(figure, "png", dpi=50)
    with Image.open(io.BytesIO(small)) as image:
        assert image.size == (round(width / 3), round(height / 3))


def test_figure_bytes_names_what_is_wrong(figure):
    with pytest.raises(ArgumentError, match=r"format='jpg' is not one of pdf, svg, png"):
        plotting.figure_bytes(figure, "jpg")
    with pytest.raises(ArgumentError, match=r"dpi=0 must be a positive whole number"):
        plotting.figure_bytes(figure, "png", dpi=0)


def test_is_own_figure_knows_its_files_from_others(tmp_path, figure, files):
    for name, data in files.items():
        path = tmp_path / f"own.{name}"
        path.write_bytes(data)
        assert plotting.is_own_figure(path), name
        assert plotting.is_own_figure(str(path))
        cut = tmp_path / f"cut.{name}"
        cut.write_bytes(data[: len(data) // 2])
        assert not plotting.is_own_figure(cut), name
        link = tmp_path / f"link.{name}"
        link.symlink_to(path)
        assert not plotting.is_own_figure(link), name
        foreign = tmp_path / f"foreign.{name}"
        figure.savefig(foreign, format=name)  # matplotlib's own metadata, not guidedbp's
        assert foreign.read_bytes()[:4] == data[:4]
        assert not plotting.is_own_figure(foreign), name
    newline = tmp_path / "newline.pdf"
    newline.write_bytes(files["pdf"] + b"\n")
    assert plotting.is_own_figure(newline)
    assert is_own_png(tmp_path / "own.png")
    assert not plotting.is_own_figure(tmp_path / "missing.pdf")
    assert not plotting.is_own_figure(tmp_path)
    (tmp_path / "empty.svg").write_bytes(b"")
    assert not plotting.is_own_figure(tmp_path / "empty.svg")


# -- without matplotlib ------------------------------------------------------------------------


def test_without_matplotlib_drawing_says_how_to_install_it(tmp_path, files):
    own = tmp_path / "own.pdf"
    own.write_bytes(files["pdf"])
    script = (
        "import sys\n"
        "sys.modules['matplotlib'] = None  # import matplotlib now fails, as when missing\n"
        "import numpy as np\n"
        "from guidedbp import plot\n"
        "print(plot.is_own_figure(sys.argv[1]))\n"
        "for call in (plot.require_matplotlib,\n"
        "             lambda: plot.draw(np.zeros((2, 2), np.uint8), {'guided': np.zeros((2, 2))},"
        " ''),\n"
        "             lambda: plot.plot(None), lambda: plot.figure_bytes(None, 'pdf')):\n"
        "    try:\n"
        "        call()\n"
        "    except plot.PlotUnavailable as error:\n"
        "        print(error)\n"
    )
    process = subprocess.run([sys.executable, "-c", script, os.fspath(own)], cwd=REPO,
                             capture_output=True, text=True, timeout=120)
    assert process.returncode == 0, process.stderr
    assert process.stdout.splitlines() == [
        "True", *["figures need matplotlib: pip install 'guidedbp[plot]'"] * 4]
    assert issubclass(plotting.PlotUnavailable, GuidedbpError)


@pytest.mark.parametrize("module", ["guidedbp.plot", "guidedbp.plot.files",
                                    "guidedbp.plot.curves", "guidedbp.figures.common",
                                    "guidedbp.figures.draw", "guidedbp.figures.files",
                                    "guidedbp.curves"])
def test_docstring_examples_run(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0, result
