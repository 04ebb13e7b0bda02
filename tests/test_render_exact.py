"""The renders' fast paths give the bytes of their literal float64 formulas.

guidedbp.render computes in place in reused float64 work arrays, takes the magnitude
of a float32 map in float32 and blends through a lookup table; the references below
are the formulas as the module docstring states them, one numpy expression each (what
the renders computed before they were made fast). Every pixel must agree: not within a
level, equal.
"""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest

from guidedbp.render import colormap_lut, overlays, render, render_column, strips


def reference_color(saliency: np.ndarray) -> np.ndarray:
    values = np.asarray(saliency)
    shape = (*values.shape[:2], 3)
    highest, lowest = float(values.max()), float(values.min())
    if highest == lowest:
        return np.full(shape, 128, np.uint8)
    unit = math.ldexp(1.0, -math.frexp(max(abs(highest), abs(lowest)))[1])
    whole = values.astype(np.float64) * unit
    mean = whole.mean()
    std = (whole - mean).std()
    if not std > 0.0:
        return np.full(shape, 128, np.uint8)
    shown = np.clip((whole - mean) / std * 0.1 + 0.5, 0.0, 1.0)
    levels = np.clip(np.floor(shown * 255.0 + 0.5), 0, 255).astype(np.uint8)
    return np.broadcast_to(levels, shape)


def reference_gray(saliency: np.ndarray, clip: float) -> np.ndarray:
    magnitude = np.max(np.abs(np.asarray(saliency).astype(np.float64)), axis=2)
    exact = np.float32 if np.can_cast(np.asarray(saliency).dtype, np.float32, "safe") \
        else np.float64
    magnitude = magnitude.astype(exact).astype(np.float64)
    ceiling = float(np.percentile(magnitude, clip, method="linear"))
    if ceiling <= 0.0:
        ceiling = float(magnitude.max())
    if ceiling <= 0.0:
        return np.zeros(magnitude.shape, np.uint8)
    shown = np.clip(magnitude / ceiling, 0.0, 1.0)
    return np.clip(np.floor(shown * 255.0 + 0.5), 0, 255).astype(np.uint8)


def reference_overlay(saliency, image, alpha, cmap, clip) -> np.ndarray:
    heat = colormap_lut(cmap)[reference_gray(saliency, clip)].astype(np.float64)
    rgb = np.broadcast_to(image.reshape(*image.shape[:2], -1), heat.shape).astype(np.float64)
    blended = (1.0 - alpha) * rgb + alpha * heat
    return np.clip(np.floor(blended + 0.5), 0, 255).astype(np.uint8)


def maps_to_check() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    found = []
    for shape in [(48, 64, 3), (37, 29, 1), (5, 7, 3), (1, 1, 3), (1, 9, 1)]:
        found += [
            rng.normal(0, 1e-3, shape).astype(np.float32),  # a gradient
            rng.normal(5, 1e-6, shape).astype(np.float32),  # a large offset, tiny spread
            rng.normal(0, 1e-30, shape).astype(np.float32),  # far below one
            np.where(rng.random(shape) < 0.02, rng.normal(0, 1, shape), 0).astype(np.float32),
            np.full(shape, 3.0, np.float32),
            rng.normal(0, 1, shape),  # float64
            rng.normal(0, 1, shape).astype(np.float16),
            rng.integers(-5, 6, shape).astype(np.int16),
            rng.integers(-5, 6, shape).astype(np.int64),
            rng.random(shape) < 0.5,
        ]
    return found


STYLES = [{"cmap": "inferno", "clip": 99.0, "alpha": 0.5},
          {"cmap": "viridis", "clip": 90.0, "alpha": 0.3},
          {"cmap": "gray", "clip": 100.0, "alpha": 0.77}]


@pytest.mark.parametrize("style", STYLES)
def test_every_render_equals_its_float64_formula(style):
    rng = np.random.default_rng(1)
    for saliency in maps_to_check():
        image = rng.integers(0, 256, (*saliency.shape[:2], 3), dtype=np.uint8)
        gray = reference_gray(saliency, style["clip"])
        expected = {
            "color": reference_color(saliency),
            "gray": gray,
            "heatmap": colormap_lut(style["cmap"])[gray],
            "overlay": reference_overlay(saliency, image, **style),
        }
        for name, pixels in expected.items():
            drawn = render(name, saliency, image, **style)
            assert drawn.dtype == np.uint8
            np.testing.assert_array_equal(drawn, pixels, err_msg=f"{name} {saliency.dtype}")
            rgb = pixels if pixels.ndim == 3 else np.repeat(pixels[:, :, None], 3, axis=2)
            np.testing.assert_array_equal(render_column(name, saliency, image, **style).picture,
                                          rgb, err_msg=f"{name} column {saliency.dtype}")


def test_an_overlay_of_a_gray_picture_equals_its_formula():
    rng = np.random.default_rng(2)
    saliency = rng.normal(0, 1, (20, 30, 3)).astype(np.float32)
    image = rng.integers(0, 256, (20, 30), dtype=np.uint8)
    np.testing.assert_array_equal(render("overlay", saliency, image, alpha=0.6),
                                  reference_overlay(saliency, image, 0.6, "inferno", 99.0))


def test_the_blend_table_is_the_blend_of_every_pair():
    table = overlays._blend_table(0.35).reshape(256, 256)
    image, heat = np.meshgrid(np.arange(256.0), np.arange(256.0), indexing="ij")
    expected = np.clip(np.floor((1 - 0.35) * image + 0.35 * heat + 0.5), 0, 255)
    np.testing.assert_array_equal(table, expected)


@pytest.mark.parametrize("shape", [(7,), (240, 320, 3), (1000, 3), (3, 5, 1)])
def test_the_standard_deviation_is_numpys_to_the_last_bit(shape):
    rng = np.random.default_rng(3)
    for scale in (1e-30, 1e-3, 1.0, 1e20):
        values = rng.normal(0.5, 1, shape) * scale
        assert strips.std(values) == values.std()


def test_reused_work_arrays_give_the_bytes_of_fresh_ones(monkeypatch):
    drawn = [{name: render(name, saliency, np.zeros((*saliency.shape[:2], 3), np.uint8))
              for name in ("color", "gray", "overlay")} for saliency in maps_to_check()]
    monkeypatch.setattr(strips, "KEPT_WORK_VALUES", 0)  # every work array fresh
    for saliency, before in zip(maps_to_check(), drawn):
        for name, pixels in before.items():
            again = render(name, saliency, np.zeros((*saliency.shape[:2], 3), np.uint8))
            np.testing.assert_array_equal(again, pixels)


def test_renders_in_threads_equal_renders_in_turn():
    chosen = [saliency for saliency in maps_to_check() if saliency.dtype == np.float32]
    image = np.full((64, 64, 3), 90, np.uint8)

    def draw(saliency):
        picture = image[: saliency.shape[0], : saliency.shape[1]]
        return [render(name, saliency, picture) for name in ("color", "overlay")]

    expected = [draw(saliency) for saliency in chosen]
    results: dict[int, list] = {}

    def worker(offset: int) -> None:
        for _ in range(3):
            for index in range(offset, len(chosen), 2):
                results.setdefault(index, []).append(draw(chosen[index]))

    threads = [threading.Thread(target=worker, args=(offset,)) for offset in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for index, runs in results.items():
        for run in runs:
            for pixels, reference in zip(run, expected[index]):
                np.testing.assert_array_equal(pixels, reference)


def test_maps_in_strips_equal_the_whole_map_within_a_level(monkeypatch):
    """Large maps are rendered strip by strip: the colour render's sums then run strip by
    strip too, and may round a level apart; the other renders are per pixel."""
    rng = np.random.default_rng(4)
    saliency = rng.normal(0, 1e-3, (60, 50, 3)).astype(np.float32)
    image = rng.integers(0, 256, (60, 50, 3), dtype=np.uint8)
    whole = {name: render(name, saliency, image) for name in ("color", "gray", "overlay")}
    monkeypatch.setattr(strips, "STRIP_VALUES", 50 * 3 * 7)  # strips of 7 rows
    for name, pixels in whole.items():
        in_strips = render(name, saliency, image)
        if name == "color":
            assert np.abs(in_strips.astype(int) - pixels).max() <= 1
            assert np.mean(in_strips == pixels) > 0.99
        else:
            np.testing.assert_array_equal(in_strips, pixels)
