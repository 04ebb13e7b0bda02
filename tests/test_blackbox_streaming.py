"""The black-box methods drawn, scored and fitted a block at a time give the maps of the
same methods computed on their whole designs: the reference below is the code before
issue 33 (every mask, coalition and score held at once, KernelSHAP's system solved by
least squares), kept here as it was. The scores are a small numpy function of the
copies (no model: both paths see the same copies in the same batches, so any difference
is the streaming's). Blocks are made small (``DESIGN_BYTES``) so that every design spans
several blocks, with a partial last one.

RISE and Sobol are bitwise the same or within float64 rounding; KernelSHAP and LIME, whose
sums come in another order and whose systems are solved another way, within float32
rounding (1e-6 of the map's largest value: measured, most are bitwise the same, the
others 1 ulp apart).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import tensorflow as tf

from guidedbp.engine.methods import blackbox as _blackbox
from guidedbp.engine.methods import copies as _copies
from guidedbp.engine.methods import regression as _regression
from guidedbp.engine.methods.superpixels import segments

FILL = np.array([0.25, -0.5, 1.0], np.float32)


def numpy_scores(height: int, width: int, columns: int = 2, seed: int = 0):
    """A fixed nonlinear score of ``columns`` targets: tanh of a random projection of the
    copy, then a random mix; float32 in, as a model's scores."""
    rng = np.random.default_rng(seed)
    hidden = rng.normal(size=(height * width * 3, 8)).astype(np.float32) / 8
    mix = rng.normal(size=(8, columns)).astype(np.float32)

    def scores(copies: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return np.tanh(copies.reshape(len(copies), -1) @ hidden) @ mix
    return scores


def images(count: int, height: int, width: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, (count, height, width, 3)).astype(
        np.float32)


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    """Blocks of a few rows: every design spans several, the last one partial."""
    monkeypatch.setattr(_copies, "DESIGN_BYTES", 4096)
    monkeypatch.setattr(_regression, "DESIGN_BYTES", 4096)


# -- the code before issue 33, whole designs -------------------------------------------------


def old_scores(image, row, masks, fill, scores, chunk) -> np.ndarray:
    """float64 ``(n, K)``: the copies under ``masks`` (float32 ``(n, H, W)``), scored
    ``chunk`` at a time."""
    found = []
    for start in range(0, len(masks), chunk):
        kept = masks[start : start + chunk][..., None]
        copies = (kept * image + (1 - kept) * fill).astype(np.float32)
        found.append(np.asarray(scores(copies, np.full(len(kept), row)), np.float64))
    return np.concatenate(found)


def old_cells(images_, columns, grid, scores, chunk, fill, attribute) -> np.ndarray:
    count, height, width = images_.shape[:3]
    labels = segments(height, width, grid)
    result = np.zeros((count, columns, height, width), np.float32)
    for row, image in enumerate(images_):
        def score(design, image=image, row=row):
            return old_scores(image, row, design.astype(np.float32)[:, labels], fill, scores,
                              chunk)
        result[row] = attribute(row, grid * grid, score).T[:, labels]
    return result[..., None]


def old_kernelshap(images_, columns, scores, chunk, fill, keys, samples, grid):
    def attribute(row, cells, score):
        rng = np.random.default_rng(keys[row])
        if cells == 1:
            coalitions, weights = np.zeros((0, 1)), np.zeros(0)
        elif samples >= 2 ** cells - 2 and 2 ** cells - 2 <= 2 ** 16:
            coalitions = np.array(list(itertools.product((0.0, 1.0), repeat=cells))[1:-1])
            sizes = coalitions.sum(axis=1).astype(int)
            binomials = np.array([math.comb(cells, int(size)) for size in sizes], np.float64)
            weights = (cells - 1) / (binomials * sizes * (cells - sizes))
        else:
            sizes = np.arange(1, cells)
            probabilities = (cells - 1) / (sizes * (cells - sizes))
            drawn = rng.choice(sizes, size=-(-samples // 2),
                               p=probabilities / probabilities.sum())
            ranks = rng.random((len(drawn), cells)).argsort(axis=1).argsort(axis=1)
            half = (ranks < drawn[:, None]).astype(np.float64)
            coalitions = np.concatenate([half, 1 - half])[:samples]
            weights = np.ones(len(coalitions))
        found = score(np.concatenate([np.zeros((1, cells)), np.ones((1, cells)), coalitions]))
        empty, full = found[0], found[1]
        weighted = coalitions.T * weights
        system = np.zeros((cells + 1, cells + 1))
        system[:cells, :cells] = weighted @ coalitions
        system[:cells, cells] = system[cells, :cells] = 1.0
        right = np.concatenate([weighted @ (found[2:] - empty), (full - empty)[None]])
        return np.linalg.lstsq(system, right, rcond=None)[0][:cells]
    return old_cells(images_, columns, grid, scores, chunk, fill, attribute)


def old_lime(images_, columns, scores, chunk, fill, keys, samples, grid):
    def attribute(row, cells, score):
        rng = np.random.default_rng(keys[row])
        coalitions = (rng.random((samples, cells)) < 0.5).astype(np.float64)
        coalitions[0] = 1.0
        found = score(coalitions)
        distances = 1 - np.sqrt(coalitions.sum(axis=1) / cells)
        weights = np.sqrt(np.exp(-distances ** 2 / 0.25 ** 2))
        share = weights / weights.sum()
        centred = coalitions - share @ coalitions
        gains = found - share @ found
        weighted = centred.T * weights
        return np.linalg.solve(weighted @ centred + np.eye(cells), weighted @ gains)
    return old_cells(images_, columns, grid, scores, chunk, fill, attribute)


def old_sobol(images_, columns, scores, chunk, fill, designs, grid):
    cells = grid * grid
    points = tf.math.sobol_sample(2 * cells, designs, dtype=tf.float32).numpy()
    first, second = points[:, :cells], points[:, cells:]
    replicated = np.repeat(first[None], cells, axis=0)
    replicated[np.arange(cells), :, np.arange(cells)] = second.T
    design = np.concatenate([first, second, replicated.reshape(-1, cells)])

    def attribute(row, cells, score):
        found = score(design)
        a = found[:designs]
        c = found[2 * designs:].reshape(cells, designs, -1)
        variance = a.var(axis=0, ddof=1) if designs > 1 else np.zeros(a.shape[1])
        squares = ((a[None] - c) ** 2).sum(axis=1)
        return np.divide(squares, 2 * designs * variance, out=np.zeros_like(squares),
                         where=variance > 1e-12)
    return old_cells(images_, columns, grid, scores, chunk, fill, attribute)


def old_rise(images_, columns, scores, chunk, fill, keys, masks, grid, keep):
    count, height, width = images_.shape[:3]
    cell_h, cell_w = -(-height // grid), -(-width // grid)
    up_h = _blackbox._bilinear((grid + 1) * cell_h, grid)
    up_w = _blackbox._bilinear((grid + 1) * cell_w, grid)
    result = np.zeros((count, columns, height, width), np.float64)
    for row, image in enumerate(images_):
        rng = np.random.default_rng(keys[row])
        cells, shifts = [], []
        for start in range(0, masks, 1024):
            size = min(1024, masks - start)
            cells.append(rng.random((size, grid, grid)) < keep)
            shifts.append(np.stack([rng.integers(0, cell_h, size),
                                    rng.integers(0, cell_w, size)], axis=1))
        kept, shift = np.concatenate(cells), np.concatenate(shifts)
        density, total = np.zeros((height, width)), np.zeros(columns)
        for start in range(0, masks, chunk):
            rows = up_h[shift[start : start + chunk, :1] + np.arange(height)]
            cols = up_w[shift[start : start + chunk, 1:] + np.arange(width)]
            mask = rows @ kept[start : start + chunk].astype(np.float32) @ cols.transpose(0, 2, 1)
            found = old_scores(image, row, mask, fill, scores, chunk)
            result[row] += np.tensordot(found.T, mask, axes=1)
            density += mask.sum(axis=0)
            total += found.sum(axis=0)
        result[row] -= (total / masks)[:, None, None] * density
    return (result / (masks * keep)).astype(np.float32)[..., None]


# -- the same maps -----------------------------------------------------------------------------


KEYS = [[7, 0], [7, 1]]


def assert_float32_close(new: np.ndarray, old: np.ndarray) -> None:
    assert new.dtype == old.dtype == np.float32 and new.shape == old.shape
    scale = float(np.abs(old).max())
    assert scale > 0
    np.testing.assert_allclose(new, old, rtol=0, atol=1e-6 * scale)  # a few float32 ulps


@pytest.mark.parametrize(("grid", "samples", "chunk"), [
    (2, 14, 3),  # every coalition: the Shapley kernel's weights
    (2, 9, 4),  # drawn, an odd count: the last half has no complement
    (4, 200, 16),  # drawn, a unique solution: solved by LU
    (4, 10, 5),  # fewer coalitions than regions: singular, least squares as before
    (1, 5, 2),  # one region: its value is f(1) - f(0)
], ids=["enumerated", "odd", "drawn", "singular", "one-region"])
def test_kernelshap_is_the_whole_design_regression(grid, samples, chunk):
    data = images(2, 8, 8)
    scores = numpy_scores(8, 8)
    new = _regression.kernelshap(data, 2, scores, chunk, FILL, KEYS, samples, grid)
    old = old_kernelshap(data, 2, scores, chunk, FILL, KEYS, samples, grid)
    assert_float32_close(new, old)


def test_kernelshap_draws_the_coalitions_of_before():
    """Sorting a row's draws once picks the regions that ranking them twice picked."""
    for cells, samples in [(16, 300), (64, 1001), (4096, 40)]:
        rng = np.random.default_rng([3, cells])
        coalitions = _regression.shapley_coalitions(rng, cells, samples)
        rng = np.random.default_rng([3, cells])
        sizes = np.arange(1, cells)
        probabilities = (cells - 1) / (sizes * (cells - sizes))
        drawn = rng.choice(sizes, size=-(-samples // 2), p=probabilities / probabilities.sum())
        ranks = rng.random((len(drawn), cells)).argsort(axis=1).argsort(axis=1)
        half = (ranks < drawn[:, None]).astype(np.float64)
        expected = np.concatenate([half, 1 - half])[:samples]
        np.testing.assert_array_equal(coalitions.design(2, 2 + samples), expected)
        assert coalitions.halves.nbytes == len(drawn) * -(-cells // 8)  # bits, not floats


@pytest.mark.parametrize(("grid", "samples", "chunk"), [(2, 50, 3), (4, 300, 16), (8, 40, 7)])
def test_lime_is_the_whole_design_ridge(grid, samples, chunk):
    data = images(2, 8, 8)
    scores = numpy_scores(8, 8)
    new = _regression.lime(data, 2, scores, chunk, FILL, KEYS, samples, grid)
    old = old_lime(data, 2, scores, chunk, FILL, KEYS, samples, grid)
    assert_float32_close(new, old)


@pytest.mark.parametrize(("grid", "designs", "chunk"), [(2, 8, 3), (4, 5, 16), (4, 1, 4)])
def test_sobol_is_the_whole_design_estimate(grid, designs, chunk):
    data = images(2, 8, 8)
    scores = numpy_scores(8, 8)
    new = _blackbox.sobol(data, 2, scores, chunk, FILL, designs, grid)
    old = old_sobol(data, 2, scores, chunk, FILL, designs, grid)
    if designs == 1:  # one design: no variance, zeros as before
        assert new.shape == old.shape and not new.any() and not old.any()
    else:
        assert_float32_close(new, old)


@pytest.mark.parametrize(("masks", "chunk"), [(2500, 700), (100, 7), (1025, 1024)])
def test_rise_is_bitwise_the_masks_drawn_at_once(masks, chunk):
    """RISE's draws come a block at a time as the batches need them: the same masks, the
    same sums in the same order, the same bits."""
    data = images(2, 9, 7)
    scores = numpy_scores(9, 7)
    new = _blackbox.rise(data, 2, scores, chunk, FILL, KEYS, masks, 3, 0.5)
    old = old_rise(data, 2, scores, chunk, FILL, KEYS, masks, 3, 0.5)
    np.testing.assert_array_equal(new, old)


def test_a_block_is_a_whole_number_of_batches():
    """The forward passes are those of the whole design scored a batch at a time: a block
    never ends inside a batch (which would make a smaller one)."""
    for regions in (1, 4, 64, 4096):
        for chunk in (1, 3, 16, 1024):
            rows = _copies.block_rows(regions, chunk)
            assert rows % chunk == 0 and rows >= chunk


def test_docstring_examples_run(monkeypatch):
    import doctest

    from guidedbp.io import store

    monkeypatch.undo()  # the examples name the real block size
    for module in (_copies, _regression, store):
        assert doctest.testmod(module).failed == 0, module.__name__
