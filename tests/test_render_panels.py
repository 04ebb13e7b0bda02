"""Panels that read at a glance (issue 34): a grid of at most six tiles a row, signed
coarse maps laid over the picture, a region's outline, and colorbars in the render's own
colours with a legend. Pixels are checked against layouts and colours computed here."""

from __future__ import annotations

import numpy as np
import pytest

from guidedbp import render as rendering
from guidedbp.pipeline.writing import comparison_panel
from guidedbp.render import (
    DEFAULT_TILE,
    PANEL_COLUMNS,
    PANEL_GAP,
    PANEL_MARGIN,
    PANEL_ROW_GAP,
    marks,
)
from guidedbp.render.panel import Column, Scale, render_panel

MARGIN, GAP = PANEL_MARGIN, PANEL_GAP
#: A title line's height and a colorbar's (bar and tick labels), from the panel's constants.
TITLE = marks._line_height(marks._TITLE_SIZE) + marks._LINE_GAP
BAR = 2 * marks._BAR_GAP + marks._BAR_HEIGHT + marks._line_height(marks._TICK_SIZE)


def _colour(number: int) -> tuple[int, int, int]:
    return (10 + 11 * number, 250 - 9 * number, 60 + 3 * number)


def _find(panel: np.ndarray, colour) -> tuple[int, int, int, int]:
    """(top, left, height, width) of the pixels of ``colour``."""
    rows, columns = np.nonzero(np.all(panel == colour, axis=-1))
    assert rows.size, f"no pixel of colour {colour}"
    return rows.min(), columns.min(), rows.max() - rows.min() + 1, columns.max() - columns.min() + 1


# -- the grid ---------------------------------------------------------------------------


def test_a_panel_of_22_pictures_wraps_into_four_rows_of_at_most_six():
    """--method all: the original and 21 maps, 96 px each, at the default 224-px tile."""
    ramp = Scale(np.repeat(np.arange(256, dtype=np.uint8)[:, None], 3, axis=1), ("0", "1"))
    columns = [Column(f"method {number}", np.full((96, 96, 3), _colour(number), np.uint8),
                      None if number == 0 else ramp) for number in range(22)]
    panel = render_panel(columns, caption="star (class 3) p=1.000")
    assert PANEL_COLUMNS == 6 and DEFAULT_TILE == 224
    assert panel.shape[1] == 2 * MARGIN + 6 * 224 + 5 * GAP == 1400  # not 5,112
    first_top = _find(panel, _colour(0))[0]
    pitch = TITLE + 224 + BAR + PANEL_ROW_GAP  # a row: titles, tiles, colorbars, the gap
    for number in range(22):
        row, column = divmod(number, 6)
        assert _find(panel, _colour(number)) == (
            first_top + row * pitch, MARGIN + column * (224 + GAP), 224, 224), number
    assert panel.shape[0] == first_top + 3 * pitch + 224 + BAR + MARGIN  # four rows
    last_row = panel[first_top + 3 * pitch:, MARGIN + 4 * (224 + GAP):]
    assert np.all(last_row == 255)  # rows 0-2 hold six pictures, the last one four


def test_up_to_six_pictures_stay_in_one_row():
    columns = [(f"m{number}", np.full((96, 96, 3), _colour(number), np.uint8))
               for number in range(6)]
    panel = render_panel(columns)
    tops = {_find(panel, _colour(number))[0] for number in range(6)}
    assert len(tops) == 1 and panel.shape[1] == 2 * MARGIN + 6 * 224 + 5 * GAP
    assert render_panel(columns, per_row=2).shape[1] == 2 * MARGIN + 2 * 224 + GAP
    with pytest.raises(ValueError, match="per_row must be a positive integer"):
        render_panel(columns, per_row=0)


def test_a_narrower_picture_is_centred_in_its_grid_column():
    wide, narrow = np.full((10, 20, 3), 40, np.uint8), np.full((10, 8, 3), 200, np.uint8)
    panel = render_panel([("", wide), ("", wide), ("", narrow), ("", wide)], tile=None,
                         per_row=2)
    assert _find(panel, (200, 200, 200))[1:] == (MARGIN + 6, 10, 8)  # (20 - 8) / 2 = 6


# -- outlines ---------------------------------------------------------------------------


def _boundary(region: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The region's pixels with a 4-neighbour outside it (or on the picture's edge), and
    the outside pixels with a 4-neighbour in it: pixel by pixel."""
    height, width = region.shape
    inside, outside = np.zeros_like(region), np.zeros_like(region)
    for y in range(height):
        for x in range(width):
            near = [(y + dy, x + dx) for dy, dx in ((-1, 0), (1, 0), (0, -1), (0, 1))]
            values = [bool(region[a, b]) if 0 <= a < height and 0 <= b < width else False
                      for a, b in near]
            if region[y, x]:
                inside[y, x] = not all(values)
            else:
                outside[y, x] = any(values)
    return inside, outside


def test_the_outline_lies_exactly_on_the_regions_boundary():
    region = np.zeros((12, 10), bool)
    region[3:8, 2:6] = True
    region[5, 6] = True  # a bump
    region[9:12, 7:10] = True  # a corner touching the picture's edges
    picture = np.full((12, 10, 3), 90, np.uint8)
    panel = render_panel([Column("", picture, outline=region)], tile=None)
    drawn = panel[MARGIN:MARGIN + 12, MARGIN:MARGIN + 10]
    inside, outside = _boundary(region)
    # the block's 14 edge pixels but (5, 5), which the bump closes in, the bump, and the
    # corner's 9 but its centre
    assert inside.sum() == 13 + 1 + 8 and outside.sum() > 0
    assert np.all(drawn[inside] == 255)  # white just inside
    assert np.all(drawn[outside] == 0)  # black just outside
    assert np.all(drawn[~inside & ~outside] == 90)  # the picture everywhere else


def test_the_outline_is_drawn_at_the_tiles_scale():
    region = np.zeros((8, 8), bool)
    region[2:5, 3:7] = True
    picture = np.full((8, 8, 3), 90, np.uint8)
    panel = render_panel([Column("", picture, outline=region)], tile=64)  # eight times
    drawn = panel[MARGIN:MARGIN + 64, MARGIN:MARGIN + 64]
    inside, outside = _boundary(np.kron(region, np.ones((8, 8), bool)))
    assert np.all(drawn[inside] == 255) and np.all(drawn[outside] == 0)
    assert np.all(drawn[~inside & ~outside] == 90)


def test_an_outline_of_another_size_is_refused():
    with pytest.raises(ValueError, match=r"outline must be bool of the picture's shape"):
        render_panel([Column("", np.zeros((4, 4), np.uint8), outline=np.ones((4, 5), bool))])


# -- colorbars and legends ----------------------------------------------------------------


def _bar_pixels(panel: np.ndarray, picture_top: int, height: int, width: int) -> np.ndarray:
    """The colorbar under a picture at the left margin, inside its frame."""
    top = picture_top + height + marks._BAR_GAP
    return panel[top + 1:top + marks._BAR_HEIGHT - 1, MARGIN + 1:MARGIN + width - 1]


def test_the_color_renders_bar_shows_its_own_colours_channel_by_channel():
    """A map whose green channel alone varies is drawn magenta to green: so is its bar."""
    saliency = np.zeros((4, 64, 3), np.float32)
    saliency[:, :, 1] = np.linspace(-1, 1, 64)  # mean 0: red and blue at mid-grey
    column = rendering.render_column("color", saliency)
    picture = column.picture.reshape(-1, 3)
    assert picture[:, 1].min() < 100 < 160 < picture[:, 1].max()
    # Each pixel is the scale's colour of its level: the render's own colour table.
    green = column.scale.colors[1]
    np.testing.assert_array_equal(picture, green[picture[:, 1]])
    assert green[0].tolist() == [128, 0, 128] and green[255].tolist() == [128, 255, 128]
    panel = render_panel([column], tile=None)
    top = _find(panel, tuple(column.picture[0, 0]))[0]
    bar = _bar_pixels(panel, top, 4, 64)
    levels = (np.arange(1, 63) * 256) // 64
    assert len(bar) == 8  # three stripes: red rows 0-2, green 3-4, blue 5-7
    for rows, channel in ((range(0, 3), 0), (range(3, 5), 1), (range(5, 8), 2)):
        for row in rows:
            np.testing.assert_array_equal(bar[row], column.scale.colors[channel][levels])


def test_a_one_channel_color_render_keeps_its_grey_bar():
    saliency = np.linspace(-1, 1, 64, dtype=np.float32).reshape(4, 16, 1)
    column = rendering.render_column("color", saliency)
    picture = column.picture.reshape(-1, 3)
    np.testing.assert_array_equal(picture, column.scale.colors[picture[:, 0]])
    assert column.scale.colors.shape == (256, 3)
    assert column.scale.legend == "lighter than grey raises the score, darker lowers it"


def test_the_color_legend_says_lighter_raises_the_score_only_when_grey_is_zero():
    centred = rendering.render_column("color", np.array([[[-1.0, 0.0, 1.0]]]))
    assert centred.scale.legend.startswith("lighter than grey raises the score")
    assert "red, green, blue raise it and cyan, magenta, yellow lower it" in centred.scale.legend
    shifted = rendering.render_column("color", np.array([[[1.0, 2.0, 3.0]]]))  # mean 2
    assert shifted.scale.legend.startswith("lighter than grey: above the map's mean")
    assert "raise" not in shifted.scale.legend


def test_each_legend_is_written_once_under_the_grid():
    picture = np.full((30, 100, 3), 50, np.uint8)
    ramp = np.repeat(np.arange(256, dtype=np.uint8)[:, None], 3, axis=1)
    plain = render_panel([("a", picture, Scale(ramp, ("0", "1")))] * 3, tile=None)
    one = render_panel([("a", picture, Scale(ramp, ("0", "1"), "light: more"))] * 3,
                       tile=None)
    two = render_panel([("a", picture, Scale(ramp, ("0", "1"), "light: more")),
                        ("b", picture, Scale(ramp, ("0", "1"), "dark: less"))], tile=None)
    line = marks._line_height(marks._CAVEAT_SIZE) + marks._LINE_GAP
    assert one.shape[0] == plain.shape[0] + 2 * marks._LINE_GAP + line
    assert two.shape[0] == plain.shape[0] + 2 * marks._LINE_GAP + 2 * line
    np.testing.assert_array_equal(one[:plain.shape[0] - MARGIN], plain[:plain.shape[0] - MARGIN])
    legend = one[plain.shape[0] - MARGIN:]
    # a sample of the bar at the left margin, then the text
    swatch = legend[:, MARGIN + 1:MARGIN + marks._SWATCH_WIDTH - 1]
    assert (swatch < 60).any() and (swatch > 200).any()
    assert (legend[:, MARGIN + marks._SWATCH_WIDTH + 8:] < 100).any()


# -- signed coarse maps -------------------------------------------------------------------


def _grey(picture: np.ndarray) -> np.ndarray:
    return picture[..., 0] * 0.299 + picture[..., 1] * 0.587 + picture[..., 2] * 0.114


def test_a_signed_overlay_is_red_and_blue_over_the_picture_in_grey():
    rng = np.random.default_rng(4)
    image = rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)
    saliency = np.zeros((6, 8, 1), np.float32)
    saliency[0:2, 0:4] = 4.0  # raises the score
    saliency[3:5, 4:8] = -2.0  # lowers it
    drawn = rendering.render_signed_overlay(saliency, image, alpha=0.5, clip=100.0)
    grey = _grey(image.astype(np.float64))
    zero = saliency[..., 0] == 0
    # where the map is 0, the picture shows (in grey, every channel alike)
    np.testing.assert_array_equal(drawn[zero], np.repeat(
        np.floor(grey[zero] + 0.5)[:, None], 3, axis=1).astype(np.uint8))
    # full weight (alpha) at the largest value, half of it at half
    red = np.floor(grey[0:2, 0:4, None] * 0.5 + np.array([255, 0, 81]) * 0.5 + 0.5)
    blue = np.floor(grey[3:5, 4:8, None] * 0.75 + np.array([0, 139, 251]) * 0.25 + 0.5)
    np.testing.assert_array_equal(drawn[0:2, 0:4], red)
    np.testing.assert_array_equal(drawn[3:5, 4:8], blue)
    column = rendering.render_column("signed-overlay", saliency, image, clip=100.0)
    np.testing.assert_array_equal(column.picture, drawn)
    assert column.scale.labels == ("-4", "0", "4 (p100)")
    assert column.scale.legend == "on the image in grey: red raises the score, blue lowers it"
    colours = column.scale.colors
    assert colours[0].tolist() == [0, 139, 251] and colours[255].tolist() == [255, 0, 81]
    assert colours[127].min() >= 250 and colours[128].min() >= 250  # white about 0


@pytest.mark.parametrize("name", ["occlusion", "kernelshap", "lime"])
def test_a_comparison_panel_lays_perturbation_maps_over_the_picture(name):
    rng = np.random.default_rng(7)
    picture = rng.integers(0, 256, (12, 12, 3), dtype=np.uint8)
    signed = np.zeros((12, 12, 1), np.float32)
    signed[0:6, 0:6] = 3.0
    signed[6:12, 6:12] = -3.0
    gradient = rng.normal(size=(12, 12, 3)).astype(np.float32)
    cam = np.abs(rng.normal(size=(12, 12, 1))).astype(np.float32)
    maps = {"guided": gradient, name: signed, "rise": cam}
    panel = comparison_panel(maps, picture, "caption", {"clip": 100.0}, None)
    top = _find(panel, tuple(picture[0, 0]))[0]  # the original's first pixel

    def tile(number: int) -> np.ndarray:
        left = MARGIN + number * (12 + GAP)
        return panel[top:top + 12, left:left + 12]

    np.testing.assert_array_equal(tile(0), picture)
    np.testing.assert_array_equal(tile(1), rendering.render_color(gradient))  # gradients
    grey = np.floor(_grey(picture.astype(np.float64)) + 0.5).astype(np.uint8)
    drawn = tile(2).astype(int)
    blank = signed[..., 0] == 0
    np.testing.assert_array_equal(drawn[blank], np.repeat(grey[blank][:, None], 3, axis=1))
    assert np.all(drawn[0:6, 0:6, 0] > drawn[0:6, 0:6, 1])  # red where it raises the score
    assert np.all(drawn[6:12, 6:12, 2] > drawn[6:12, 6:12, 0])  # blue where it lowers it
    np.testing.assert_array_equal(tile(3), rendering.render_overlay(cam, picture, clip=100.0))
