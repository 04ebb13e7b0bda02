"""Tests for guidedbp.render: exact pixel values, computed by hand where possible."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import ImageFont

from guidedbp import render as rendering
from guidedbp.render import panel as panel_module

SOURCES_MD = Path(rendering.__file__).parent / "data" / "SOURCES.md"


# --------------------------------------------------------------------- color

def test_color_hand_computed_2x2x3():
    # Twelve values: 11, three 3s, eight 5s. mean = (11 + 9 + 40) / 12 = 5.
    # Centred: 6, -2, -2, -2, 0 x 8; variance = (36 + 3 * 4) / 12 = 4, std = 2.
    # z = centred / std = 3, -1, 0  ->  z * 0.1 + 0.5 = 0.8, 0.4, 0.5
    # -> * 255 = 204, 102, 127.5 -> round half up: 204, 102, 128.
    saliency = np.array(
        [[[11, 3, 5], [3, 5, 5]],
         [[5, 5, 3], [5, 5, 5]]], dtype=np.float32)
    expected = np.array(
        [[[204, 102, 128], [102, 128, 128]],
         [[128, 128, 102], [128, 128, 128]]], dtype=np.uint8)
    out = rendering.render_color(saliency)
    assert out.dtype == np.uint8
    np.testing.assert_array_equal(out, expected)


def test_color_single_channel_spike_clips_and_repeats():
    # 100 pixels, one of 1.0: mean 0.01, centred 0.99 and -0.01 (x99),
    # variance (0.9801 + 99 * 0.0001) / 100 = 0.0099, std = 0.099499.
    # Spike: z = 9.95 -> 0.5 + 0.995 > 1 -> clipped to 255.
    # Others: z = -0.100504 -> 0.5 - 0.0100504 = 0.489950 -> 124.94 -> 125.
    saliency = np.zeros((10, 10, 1), np.float32)
    saliency[0, 0, 0] = 1.0
    out = rendering.render_color(saliency)
    assert out.shape == (10, 10, 3)
    assert out[0, 0].tolist() == [255, 255, 255]
    rest = np.ones((10, 10), bool)
    rest[0, 0] = False
    assert np.all(out[rest] == 125)


@pytest.mark.parametrize("value", [0.0, 0.1, -3.0])
def test_color_constant_map_is_mid_gray(value):
    out = rendering.render_color(np.full((4, 3, 3), value, np.float32))
    assert np.all(out == 128)


def test_color_ignores_positive_scale():
    rng = np.random.default_rng(0)
    saliency = rng.normal(size=(5, 6, 3)).astype(np.float32)
    # A power of two scales exactly, so mean and std scale exactly too.
    np.testing.assert_array_equal(rendering.render_color(saliency),
                                  rendering.render_color(saliency * 4.0))


def _wave() -> np.ndarray:
    rows, columns = np.mgrid[0:24, 0:32]
    wave = np.sin(rows / 3.0) * np.cos(columns / 5.0) + 0.1 * rows / 24.0
    return (wave[..., None] * np.array([1.0, -0.5, 0.25])).astype(np.float32)


@pytest.mark.parametrize("render", ["color", "gray", "heatmap", "overlay"])
def test_tiny_maps_render_as_the_same_map_at_scale_one(render):
    # issue 19: a map of std 2.5e-14 was flat gray (levels 122-134): a 1e-12 floor.
    # 2**-47 (7e-15) scales exactly, so every render must give the very same bytes; 1e-14
    # (not a power of two, in float64) the same levels too.
    saliency = _wave()
    image = np.full((24, 32, 3), 90, np.uint8)
    at_one = rendering.render(render, saliency, image)
    assert at_one.max() - at_one.min() > 120  # a picture with contrast, not a flat one
    tiny = rendering.render(render, saliency * np.float32(2.0**-47), image)
    assert tiny.tobytes() == at_one.tobytes()
    np.testing.assert_array_equal(
        rendering.render(render, saliency.astype(np.float64) * 1e-14, image), at_one)


def test_color_of_a_tiny_map_uses_its_full_range():
    # The case: float32 values of about 1e-14 used only levels 122-134. Now they
    # use the levels of the same map at 1 (+-1: 1e-14 rounds differently in float32).
    levels = rendering.render_color(_wave() * np.float32(1e-14))
    at_one = rendering.render_color(_wave())
    assert (levels.min(), levels.max()) == (at_one.min(), at_one.max()) == (52, 209)
    assert np.abs(levels.astype(int) - at_one).max() <= 1


def test_all_zero_map_is_flat_in_every_render():
    zeros = np.zeros((4, 5, 3), np.float32)
    assert np.all(rendering.render_color(zeros) == 128)
    assert np.all(rendering.render_gray(zeros) == 0)
    assert np.all(rendering.render_heatmap(zeros, "gray") == 0)


def test_tiny_map_colorbar_labels_are_its_own_values():
    # Labels scale with the map: the old floor read +-5.12e-12 for any map below it.
    saliency = _wave()
    for column in ("color", "gray"):
        at_one = rendering.render_column(column, saliency).scale.labels
        tiny = rendering.render_column(column, saliency * np.float32(2.0**-47)).scale.labels
        for one, small in zip(at_one, tiny, strict=True):
            number = re.match(r"-?[0-9.e+-]+", one).group(0)
            assert float(re.match(r"-?[0-9.e+-]+", small).group(0)) == pytest.approx(
                float(number) * 2.0**-47, rel=5e-3)


@pytest.mark.parametrize(
    "bad, message",
    [
        (np.zeros((4, 4), np.float32), "shape"),
        (np.zeros((4, 4, 2), np.float32), "shape"),
        (np.zeros((0, 4, 3), np.float32), "empty"),
        (np.array([[[np.nan]]], np.float32), "finite"),
        (np.array([[[np.inf]]], np.float32), "finite"),
        (np.zeros((2, 2, 1), np.complex64), "real"),
    ],
)
def test_saliency_validation(bad, message):
    functions = (rendering.render_color, rendering.render_gray, rendering.render_heatmap,
                 rendering.magnitude)
    for function in functions:
        with pytest.raises(ValueError, match=message):
            function(bad)


# ---------------------------------------------------------- magnitude / gray

def test_magnitude_is_max_abs_over_channels():
    saliency = np.array([[[1.0, -3.0, 2.0], [-0.5, 0.25, 0.0]]], np.float32)
    out = rendering.magnitude(saliency)
    assert out.dtype == np.float32
    assert out.tolist() == [[3.0, 0.5]]


def _ramp_0_to_4() -> np.ndarray:
    # Three channels whose max |g| is 0, 1, 2, 3, 4 (signs and channel vary).
    return np.array([[[0, 0, 0], [-1, 0.5, 0], [1, -2, 0], [3, 0, 1], [-4, 4, 2]]], np.float32)


@pytest.mark.parametrize(
    "clip, expected",
    [
        # 75th percentile of [0..4] (linear): index 0.75 * 4 = 3 -> 3.
        # v / 3 * 255 = 0, 85, 170, 255, (340 clipped) 255.
        (75.0, [0, 85, 170, 255, 255]),
        # 100th -> 4: 0, 63.75, 127.5, 191.25, 255 -> half up: 0, 64, 128, 191, 255.
        (100.0, [0, 64, 128, 191, 255]),
        # 87.5th: index 3.5 -> 3.5 (only 'linear' gives this; 'lower' 3, 'higher' 4).
        # 1, 2, 3 / 3.5 * 255 = 72.86, 145.71, 218.57 -> 73, 146, 219.
        (87.5, [0, 73, 146, 219, 255]),
        # 50th: 2 -> 0, 127.5, 255, 255, 255.
        (50.0, [0, 128, 255, 255, 255]),
    ],
)
def test_gray_known_percentile(clip, expected):
    out = rendering.render_gray(_ramp_0_to_4(), clip=clip)
    assert out.dtype == np.uint8
    assert out.shape == (1, 5)
    assert out[0].tolist() == expected


def test_gray_all_zero_is_black():
    out = rendering.render_gray(np.zeros((3, 4, 3), np.float32))
    assert out.shape == (3, 4)
    assert not out.any()


def test_gray_sparse_map_falls_back_to_maximum():
    # 200 pixels, one non-zero: the 99th percentile (index 197.01) is 0,
    # so the maximum (2.0) is the ceiling instead of dividing by zero.
    saliency = np.zeros((10, 20, 1), np.float32)
    saliency[3, 7, 0] = -2.0
    assert np.percentile(np.abs(saliency), 99.0) == 0.0
    out = rendering.render_gray(saliency)
    assert out[3, 7] == 255
    assert out.sum() == 255


@pytest.mark.parametrize("clip", [0, 0.0, -1.0, 100.5, float("nan"), True, "99", None])
def test_gray_rejects_bad_clip(clip):
    with pytest.raises(ValueError, match="clip"):
        rendering.render_gray(_ramp_0_to_4(), clip=clip)


# ------------------------------------------------------------------ colormaps

def test_colormap_names_and_tables():
    names = rendering.colormap_names()
    assert names == rendering.COLORMAPS
    for required in ("inferno", "viridis", "magma", "plasma", "cividis", "gray", "turbo"):
        assert required in names
    assert rendering.DEFAULT_COLORMAP == "inferno"
    for name in names:
        table = rendering.colormap_lut(name)
        assert table.shape == (256, 3)
        assert table.dtype == np.uint8


@pytest.mark.parametrize(
    "name, index, rgb",
    [
        ("viridis", 0, (68, 1, 84)),  # #440154
        ("viridis", 128, (33, 145, 140)),  # #21918c
        ("viridis", 255, (253, 231, 37)),  # #fde725
        ("inferno", 0, (0, 0, 4)),  # #000004
        ("inferno", 255, (252, 255, 164)),  # #fcffa4
        ("magma", 255, (252, 253, 191)),  # #fcfdbf
        ("plasma", 0, (13, 8, 135)),  # #0d0887
        ("plasma", 255, (240, 249, 33)),  # #f0f921
        ("cividis", 0, (0, 34, 78)),  # #00224e (matplotlib's cividis)
        ("cividis", 255, (254, 232, 56)),  # #fee838
        ("turbo", 0, (48, 18, 59)),  # Google's turbo_srgb_bytes[0]
        ("turbo", 128, (164, 252, 60)),  # turbo_srgb_bytes[128]
        ("turbo", 255, (122, 4, 3)),  # turbo_srgb_bytes[255]
        ("gray", 0, (0, 0, 0)),
        ("gray", 77, (77, 77, 77)),
        ("gray", 255, (255, 255, 255)),
    ],
)
def test_lut_entries_match_published_values(name, index, rgb):
    assert tuple(rendering.colormap_lut(name)[index].tolist()) == rgb


def test_lut_checksums_match_sources_md():
    # SOURCES.md records the SHA-256 of each table: an accidental edit of the
    # data file (or of the document) shows up here.
    recorded = dict(re.findall(r"^\| (\w+) \| ([0-9a-f]{64}) \|$", SOURCES_MD.read_text("utf-8"),
                               flags=re.MULTILINE))
    assert set(recorded) == set(rendering.COLORMAPS)
    for name, digest in recorded.items():
        table = np.ascontiguousarray(rendering.colormap_lut(name))
        assert hashlib.sha256(table.tobytes()).hexdigest() == digest, name


def test_lut_is_a_copy():
    table = rendering.colormap_lut("viridis")
    table[0] = 0
    assert rendering.colormap_lut("viridis")[0].tolist() == [68, 1, 84]


def test_unknown_colormap_lists_names():
    names = "inferno, viridis, magma, plasma, cividis, gray, turbo"
    with pytest.raises(ValueError, match=rf"'jet'.*{names}"):
        rendering.colormap_lut("jet")
    with pytest.raises(ValueError, match="unknown colormap"):
        rendering.render_heatmap(_ramp_0_to_4(), cmap="jet")


def test_apply_colormap_exact_indexing():
    lut = rendering.colormap_lut("viridis")
    # v * 255 + 0.5, floored: 0 -> 0, 1.4 -> 1, 1.6 -> 2, 127.5 -> 128, 255 -> 255.
    values = np.array([[0.0, 1.4 / 255, 1.6 / 255, 0.5, 1.0]])
    out = rendering.apply_colormap(values, "viridis")
    assert out.shape == (1, 5, 3)
    np.testing.assert_array_equal(out[0], lut[[0, 1, 2, 128, 255]])


@pytest.mark.parametrize(
    "values, message",
    [
        (np.array([[1.01]]), r"\[0, 1\]"),
        (np.array([[-0.01]]), r"\[0, 1\]"),
        (np.array([[np.nan]]), r"\[0, 1\]"),
        (np.zeros((2, 2, 1)), "shape"),
    ],
)
def test_apply_colormap_rejects(values, message):
    with pytest.raises(ValueError, match=message):
        rendering.apply_colormap(values)


# ------------------------------------------------------------------- heatmap

@pytest.mark.parametrize("name", rendering.COLORMAPS)
def test_heatmap_of_a_ramp_is_the_lut(name):
    # Magnitudes 0..255 with clip=100: value i / 255 takes entry i, so the first
    # and last pixels are the table's end points and every entry shows once.
    ramp = np.arange(256, dtype=np.float32).reshape(1, 256, 1)
    out = rendering.render_heatmap(ramp, cmap=name, clip=100.0)
    lut = rendering.colormap_lut(name)
    assert out[0, 0].tolist() == lut[0].tolist()
    assert out[0, -1].tolist() == lut[255].tolist()
    np.testing.assert_array_equal(out[0], lut)


def test_heatmap_is_the_gray_render_through_the_lut():
    rng = np.random.default_rng(1)
    saliency = rng.normal(size=(9, 7, 3)).astype(np.float32)
    gray = rendering.render_gray(saliency, clip=95.0)
    heat = rendering.render_heatmap(saliency, cmap="magma", clip=95.0)
    np.testing.assert_array_equal(heat, rendering.colormap_lut("magma")[gray])


# ------------------------------------------------------------------- overlay

def test_overlay_hand_computed():
    # Heatmap with cmap gray, clip 100 of magnitudes [0, 1]: black, white.
    # alpha 0.25: 0.75 * image + 0.25 * heat
    #   pixel 0: 0.75 * (10, 20, 30) = 7.5, 15, 22.5 -> 8, 15, 23 (halves up)
    #   pixel 1: 0.75 * (100, 150, 200) + 63.75 = 138.75, 176.25, 213.75 -> 139, 176, 214
    saliency = np.array([[[0.0], [1.0]]], np.float32)
    image = np.array([[[10, 20, 30], [100, 150, 200]]], np.uint8)
    out = rendering.render_overlay(saliency, image, alpha=0.25, cmap="gray", clip=100.0)
    assert out.dtype == np.uint8
    assert out.tolist() == [[[8, 15, 23], [139, 176, 214]]]


def test_overlay_alpha_end_points():
    rng = np.random.default_rng(2)
    saliency = rng.normal(size=(6, 5, 3)).astype(np.float32)
    image = rng.integers(0, 256, size=(6, 5, 3), dtype=np.uint8)
    np.testing.assert_array_equal(rendering.render_overlay(saliency, image, alpha=0.0), image)
    np.testing.assert_array_equal(rendering.render_overlay(saliency, image, alpha=1.0),
                                  rendering.render_heatmap(saliency))


@pytest.mark.parametrize("shape", [(1, 2), (1, 2, 1)])
def test_overlay_gray_image_is_broadcast(shape):
    # alpha 0.5, cmap gray: 0.5 * 40 + 0 = 20; 0.5 * 80 + 127.5 = 167.5 -> 168.
    saliency = np.array([[[0.0], [1.0]]], np.float32)
    image = np.array([40, 80], np.uint8).reshape(shape)
    out = rendering.render_overlay(saliency, image, alpha=0.5, cmap="gray", clip=100.0)
    assert out.tolist() == [[[20, 20, 20], [168, 168, 168]]]


def test_overlay_validation():
    saliency = np.zeros((4, 4, 3), np.float32)
    with pytest.raises(ValueError, match="size 4x5"):
        rendering.render_overlay(saliency, np.zeros((4, 5, 3), np.uint8))
    with pytest.raises(ValueError, match="uint8"):
        rendering.render_overlay(saliency, np.zeros((4, 4, 3), np.float32))
    with pytest.raises(ValueError, match="shape"):
        rendering.render_overlay(saliency, np.zeros((4, 4, 4), np.uint8))
    for alpha in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="alpha"):
            rendering.render_overlay(saliency, np.zeros((4, 4, 3), np.uint8), alpha=alpha)


# --------------------------------------------------------------------- panel

WIDTHS = (20, 30, 12)
HEIGHT = 6
MARGIN, GAP = rendering.PANEL_MARGIN, rendering.PANEL_GAP


def _columns(titles=("a", "bb", "c")):
    return [
        (titles[0], np.full((HEIGHT, WIDTHS[0]), 10, np.uint8)),
        (titles[1], np.tile(np.array([200, 0, 0], np.uint8), (HEIGHT, WIDTHS[1], 1))),
        (titles[2], np.full((HEIGHT, WIDTHS[2], 1), 77, np.uint8)),
    ]


def _column_lefts():
    return [MARGIN, MARGIN + 20 + GAP, MARGIN + 20 + GAP + 30 + GAP]


def _picture_top(panel, picture, left):
    """The row where ``picture`` (H, W, 3) sits in ``panel`` at column ``left``."""
    height, width = picture.shape[:2]
    rows = [top for top in range(panel.shape[0] - height + 1)
            if np.array_equal(panel[top:top + height, left:left + width], picture)]
    assert len(rows) == 1, rows
    return rows[0]


def _assert_pictures_at(panel, top):
    lefts = _column_lefts()
    body = panel[top:top + HEIGHT]
    assert np.all(body[:, lefts[0]:lefts[0] + 20] == 10)
    assert np.all(body[:, lefts[1]:lefts[1] + 30] == [200, 0, 0])
    assert np.all(body[:, lefts[2]:lefts[2] + 12] == 77)
    for gap_left in (lefts[0] + 20, lefts[1] + 30):
        assert np.all(body[:, gap_left:gap_left + GAP] == 255)


def _has_ink(region):
    return bool((region < 128).any())


def test_panel_layout_untiled():
    panel = rendering.render_panel(_columns(), tile=None)
    assert panel.dtype == np.uint8
    assert panel.shape[1] == MARGIN + 20 + GAP + 30 + GAP + 12 + MARGIN
    top = _picture_top(panel, np.full((HEIGHT, 20, 3), 10, np.uint8), MARGIN)
    _assert_pictures_at(panel, top)
    assert panel.shape[0] == top + HEIGHT + MARGIN  # no scales: no colorbars
    titles = panel[MARGIN:top]
    for left, width in zip(_column_lefts(), WIDTHS, strict=True):
        assert _has_ink(titles[:, left:left + width])
    assert np.all(panel[:, :MARGIN] == 255) and np.all(panel[:, -MARGIN:] == 255)


def test_panel_caption_goes_above_the_titles():
    plain = rendering.render_panel(_columns(), tile=None)
    captioned = rendering.render_panel(_columns(), caption="tabby (class 281) p=0.873",
                                       tile=None)
    picture = np.full((HEIGHT, 20, 3), 10, np.uint8)
    below = _picture_top(captioned, picture, MARGIN) - _picture_top(plain, picture, MARGIN)
    assert below > 12  # one line of 16-px text
    assert captioned.shape[0] == plain.shape[0] + below
    assert _has_ink(captioned[MARGIN:MARGIN + below])


def test_panel_caveat_lines_go_under_the_caption_in_dark_red():
    caption = "tabby (class 281) p=0.873"
    plain = rendering.render_panel(_columns(), caption=caption, tile=64)
    warned = rendering.render_panel(_columns(), caption=caption, tile=64,
                                    caveats=["guided = plain gradient: no guided activation"])
    assert warned.shape[1] == plain.shape[1]
    below = warned.shape[0] - plain.shape[0]
    assert below > 12  # a line of 13-px text
    # Everything above the line is as it was, everything under it moved down unchanged.
    line_top = np.flatnonzero((warned[:plain.shape[0]] != plain).any(axis=(1, 2)))[0]
    np.testing.assert_array_equal(warned[:line_top], plain[:line_top])
    np.testing.assert_array_equal(warned[line_top + below:], plain[line_top:])
    band = warned[line_top:line_top + below].astype(int)
    red = np.all(np.abs(band - [170, 30, 0]) <= 6, axis=-1)
    amber = np.all(np.abs(band - [255, 176, 0]) <= 6, axis=-1)
    # The amber warning sign at the left margin, then the text in dark red after it.
    sign = amber.any(axis=0).nonzero()[0]
    assert amber.sum() > 20 and sign.min() <= MARGIN + 2 and sign.max() < MARGIN + 20
    assert red[:, sign.max() + 2:].sum() > 50
    assert not np.all(np.abs(plain.astype(int) - [170, 30, 0]) <= 6, axis=-1).any()
    again = rendering.render_panel(_columns(), caption=caption, tile=64,
                                   caveats=["guided = plain gradient: no guided activation"])
    assert again.tobytes() == warned.tobytes()  # deterministic
    by_name = rendering.render("panel", np.ones((4, 4, 3), np.float32), caveats=["x y"])
    assert by_name.shape[0] > rendering.render("panel", np.ones((4, 4, 3), np.float32)).shape[0]
    with pytest.raises(TypeError, match="caveats must be a sequence of strings"):
        rendering.render_panel(_columns(), caveats="one string")


def test_panel_without_titles_has_no_title_row():
    panel = rendering.render_panel(_columns(titles=("", "", "")), tile=None)
    assert panel.shape[0] == MARGIN + HEIGHT + MARGIN
    _assert_pictures_at(panel, top=MARGIN)


def test_panel_tile_enlarges_with_nearest_neighbour():
    rng = np.random.default_rng(0)
    picture = rng.integers(0, 256, size=(8, 5, 3), dtype=np.uint8)
    panel = rendering.render_panel([("", picture)], tile=64)  # 8 px -> 64: eight times
    expected = np.kron(picture, np.ones((8, 8, 1), np.uint8))
    assert panel.shape == (MARGIN + 64 + MARGIN, MARGIN + 40 + MARGIN, 3)
    np.testing.assert_array_equal(panel[MARGIN:MARGIN + 64, MARGIN:MARGIN + 40], expected)


def test_panel_tile_reduces_by_area():
    rng = np.random.default_rng(1)
    small = rng.integers(0, 256, size=(112, 56, 3), dtype=np.uint8)
    large = np.kron(small, np.ones((4, 4, 1), np.uint8))  # 448 x 224: constant 4x4 blocks
    panel = rendering.render_panel([("", large), ("", large)], tile=112)
    assert panel.shape == (MARGIN + 112 + MARGIN, MARGIN + 56 + GAP + 56 + MARGIN, 3)
    np.testing.assert_array_equal(panel[MARGIN:MARGIN + 112, MARGIN:MARGIN + 56], small)
    np.testing.assert_array_equal(panel[MARGIN:MARGIN + 112, -MARGIN - 56:-MARGIN], small)


def test_panel_tile_is_the_longer_side_of_the_widest_picture():
    pictures = [("a", np.zeros((100, 50), np.uint8)), ("b", np.zeros((100, 200), np.uint8))]
    panel = rendering.render_panel(pictures, tile=256)  # factor 256 / 200
    assert panel.shape[1] == MARGIN + 64 + GAP + 256 + MARGIN


def test_panel_colorbar_shows_the_scale_under_its_picture():
    colors = np.stack([np.arange(256), 255 - np.arange(256), np.full(256, 7)], 1).astype(np.uint8)
    scale = rendering.Scale(colors, ("0", "1.5 (p99)"))
    picture = np.full((64, 64, 3), 30, np.uint8)
    panel = rendering.render_panel([("x", picture, scale), ("y", picture)], tile=None)
    plain = rendering.render_panel([("x", picture), ("y", picture)], tile=None)
    top = _picture_top(panel, picture, MARGIN)
    assert panel.shape[0] > plain.shape[0]  # room for the bar and its labels
    bar_rows = [row for row in range(top + 64, panel.shape[0])
                if np.array_equal(panel[row, MARGIN + 1, :], colors[(1 * 256) // 64])]
    assert bar_rows, "no colorbar under the first picture"
    row = panel[bar_rows[len(bar_rows) // 2], MARGIN + 1:MARGIN + 63]  # inside the frame
    np.testing.assert_array_equal(row, colors[(np.arange(1, 63) * 256) // 64])
    labels = panel[bar_rows[-1] + 2:, MARGIN:MARGIN + 64]
    assert _has_ink(labels)
    # The second column has no scale: nothing under its picture.
    second = MARGIN + 64 + GAP
    assert np.all(panel[top + 64:, second:second + 64] == 255)


def test_panel_long_title_wraps_inside_its_column():
    short = rendering.render_panel(_columns(titles=("a", "bb", "c")), tile=64)
    wrapped = rendering.render_panel(
        _columns(titles=("integrated gradients and more words", "bb", "c")), tile=64)
    assert wrapped.shape[0] > short.shape[0]  # more lines, not a cut title
    assert wrapped.shape[1] == short.shape[1]
    gap = MARGIN + round(20 * 64 / 30)  # the first column's right edge
    assert np.all(wrapped[:, gap:gap + GAP] == 255)  # no text crosses into the gap


def test_panel_wrap_breaks_long_words_and_ends_in_an_ellipsis():
    font = panel_module._font(14)
    lines = panel_module._wrap("integrated-gradients", 60, 14)
    assert "".join(lines) == "integrated-gradients" and len(lines) > 1
    assert all(font.getlength(line) <= 60 for line in lines)
    many = panel_module._wrap(" ".join(["word"] * 40), 60, 14)
    assert len(many) == 3 and many[-1].endswith("...")


def test_panel_text_is_deterministic_and_sanitised():
    first = rendering.render_panel(_columns(), caption="tabby (class 281) p=0.873")
    second = rendering.render_panel(_columns(), caption="tabby (class 281) p=0.873")
    np.testing.assert_array_equal(first, second)
    # Outside Latin-1 -> '?', control characters -> space; never an exception.
    np.testing.assert_array_equal(
        rendering.render_panel(_columns(), caption="cat \U0001F408\nx"),
        rendering.render_panel(_columns(), caption="cat ? x"))
    assert not np.array_equal(first, rendering.render_panel(_columns(), caption="tiger"))


def test_panel_text_is_a_truetype_font():
    font = panel_module._font(14)
    assert isinstance(font, ImageFont.FreeTypeFont)
    assert panel_module._line_height(14) >= 14  # Pillow's old bitmap font was 11 px


def test_panel_validation():
    with pytest.raises(ValueError, match=r"same height.*\[6, 5\]"):
        rendering.render_panel([("a", np.zeros((6, 4), np.uint8)),
                                ("b", np.zeros((5, 4), np.uint8))])
    with pytest.raises(ValueError, match="empty"):
        rendering.render_panel([("a", np.zeros((6, 0), np.uint8))])
    with pytest.raises(ValueError, match="at least one"):
        rendering.render_panel([])
    with pytest.raises(ValueError, match="uint8"):
        rendering.render_panel([("a", np.zeros((6, 4), np.float32))])
    with pytest.raises(ValueError, match="pair"):
        rendering.render_panel([np.zeros((6, 4), np.uint8)])
    with pytest.raises(TypeError, match="title must be a string"):
        rendering.render_panel([(1, np.zeros((6, 4), np.uint8))])
    with pytest.raises(TypeError, match="caption"):
        rendering.render_panel(_columns(), caption=3)
    with pytest.raises(ValueError, match="tile must be an integer from 64 to 4096.*32"):
        rendering.render_panel(_columns(), tile=32)
    with pytest.raises(TypeError, match="scale must be a Scale"):
        rendering.render_panel([("a", np.zeros((6, 4), np.uint8), "0..1")])
    with pytest.raises(ValueError, match=r"uint8 of shape \(256, 3\)"):
        rendering.Scale(np.zeros((10, 3), np.uint8), ("0", "1"))


def test_render_column_scales_name_the_values_shown():
    rng = np.random.default_rng(5)
    saliency = rng.normal(size=(16, 16, 3)).astype(np.float32)
    color = rendering.render_column("color", saliency)
    np.testing.assert_array_equal(color.picture, rendering.render_color(saliency))
    mean, std = saliency.astype(np.float64).mean(), saliency.astype(np.float64).std()
    # Black is mean - 5 std, white mean + 5 std (one std is 0.1 of the range).
    assert color.scale.labels == tuple(f"{v:.3g}" for v in (mean - 5 * std, mean, mean + 5 * std))
    for channel in range(3):  # a stripe per channel: that channel's ramp, the others grey
        np.testing.assert_array_equal(color.scale.colors[channel, :, channel], np.arange(256))
    gray = rendering.render_column("gray", saliency, clip=90.0)
    ceiling = np.percentile(np.abs(saliency).max(axis=2), 90.0)
    assert gray.scale.labels == ("0", f"{ceiling:.3g} (p90)")
    np.testing.assert_array_equal(gray.picture[..., 1], rendering.render_gray(saliency, 90.0))
    image = rng.integers(0, 256, size=(16, 16, 3), dtype=np.uint8)
    overlay = rendering.render_column("overlay", saliency, image, title="guided", cmap="viridis")
    assert overlay.title == "guided"
    np.testing.assert_array_equal(overlay.scale.colors, rendering.colormap_lut("viridis"))
    np.testing.assert_array_equal(overlay.picture,
                                  rendering.render_overlay(saliency, image, cmap="viridis"))
    with pytest.raises(ValueError, match="has no column"):
        rendering.render_column("panel", saliency)



# -------------------------------------------------------------------- render

def test_render_by_name():
    rng = np.random.default_rng(3)
    saliency = rng.normal(size=(8, 10, 3)).astype(np.float32)
    image = rng.integers(0, 256, size=(8, 10, 3), dtype=np.uint8)
    assert rendering.RENDERS == ("color", "gray", "heatmap", "overlay", "panel")
    assert rendering.DEFAULT_RENDERS == ("color", "overlay")
    np.testing.assert_array_equal(rendering.render("color", saliency),
                                  rendering.render_color(saliency))
    np.testing.assert_array_equal(rendering.render("gray", saliency, clip=90.0),
                                  rendering.render_gray(saliency, clip=90.0))
    np.testing.assert_array_equal(rendering.render("overlay", saliency, image, alpha=0.3,
                                                   cmap="turbo"),
                                  rendering.render_overlay(saliency, image, 0.3, "turbo"))
    with_image = rendering.render("panel", saliency, image, caption="x", tile=None)
    assert with_image.shape[1] == 2 * MARGIN + 4 * 10 + 3 * GAP
    top = _picture_top(with_image, image, MARGIN)
    np.testing.assert_array_equal(with_image[top:top + 8, MARGIN + 10 + GAP:MARGIN + 20 + GAP],
                                  rendering.render_color(saliency))
    # Tiled by default: 10 px wide -> 224, nearest-neighbour (factor 22.4).
    tiled = rendering.render("panel", saliency, image, caption="x")
    assert tiled.shape[1] == 2 * MARGIN + 4 * 224 + 3 * GAP
    without_image = rendering.render("panel", saliency, tile=None)
    assert without_image.shape[1] == 2 * MARGIN + 2 * 10 + GAP


def test_render_errors():
    saliency = np.zeros((2, 2, 3), np.float32)
    with pytest.raises(ValueError, match="needs the original image"):
        rendering.render("overlay", saliency)
    with pytest.raises(ValueError, match=r"'sparkle'.*color, gray, heatmap, overlay, panel"):
        rendering.render("sparkle", saliency)


def test_render_room_never_imports_tensorflow():
    code = (
        "import sys, numpy as np\n"
        "import guidedbp.render as r, guidedbp.io.write as w\n"
        "image = np.zeros((4, 4, 3), np.uint8)\n"
        "r.render('panel', np.ones((4, 4, 3), np.float32), image, caption='c')\n"
        "w.encode_png(np.zeros((2, 2), np.uint8))\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras'))\n"
        "print(bad)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, check=True)
    assert result.stdout.strip() == "[]"
