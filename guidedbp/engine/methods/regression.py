"""KernelSHAP and LIME: weighted regressions of an image's scores on the regions its
coalitions keep, from normal equations summed a design block at a time.

A coalition is a row of 0s and 1s over the regions (1: kept). Both methods fit the
scores of their coalitions' copies by weighted least squares; the coalitions (the design
``X``, ``samples`` x ``regions``) are drawn, scored and folded into ``X^T W X`` and
``X^T W y`` a block at a time (:func:`~guidedbp.engine.methods.copies.cell_attributions`), so
memory holds one block and the ``regions ** 2`` matrices, whatever ``samples``. Those
matrices must exist whole: at the grid's upper bound (64, 4096 regions) the system is
4097 x 4097 float64, 128 MiB, 400 MiB with the solver's copies and a block
(:func:`fixed_bytes`; a run where they cannot fit is refused before any work).

The maps are those of the regression on the whole design to float32 rounding: the sums
are the same, added in another order (KernelSHAP's ``X^T X`` of 0s and 1s is exact
either way). KernelSHAP's constrained system is solved by LU where its Gram block is
positive definite (least squares, as before, where the coalitions leave it singular):
at 4,096 regions least squares took 15 s, and on the bordered system (a border of 1s
beside sums of 1e7) its cutoff dropped a direction, so that the values missed the
efficiency constraint (by 4.5e-5 of 0.067 on a 64x64 image at 100,000 samples, where
they now meet it to 3e-9).

The costs at the upper bounds (100,000 samples of 4,096 regions): the upper triangle of
``X^T W X``, ``samples x regions ** 2 / 2`` multiply-adds: KernelSHAP's in float32
products of 0s and 1s, exact, over the drawn halves only (each complement's share
follows from its half); LIME's in float64 (its weights differ per coalition), about four
times KernelSHAP's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from guidedbp.engine.methods.copies import DESIGN_BYTES, Scorer, cell_attributions
from guidedbp.engine.methods.perturbation import ScoresFunction

#: LIME's kernel: ``sqrt(exp(-d ** 2 / width ** 2))`` of the cosine distance ``d`` between a
#: coalition and the whole image, and its ridge penalty (``lime_image``'s defaults).
LIME_KERNEL_WIDTH, LIME_RIDGE = 0.25, 1.0
#: KernelSHAP enumerates every coalition when they are at most this many (and the samples
#: allow): the regression is then exact.
MAX_ENUMERATED = 2 ** 16
#: Below this, the smallest Cholesky pivot of KernelSHAP's ``X^T W X`` squared over the
#: largest says the coalitions leave it singular: least squares (minimum norm) then.
_SINGULAR = 1e-10


def fixed_bytes(method: str, regions: int, samples: int) -> int:
    """Bytes ``method`` holds whatever its blocks: the bordered ``(regions + 1) ** 2``
    float64 system and the solver's copy of it (KernelSHAP, LIME), with the largest of
    the Cholesky test's copy and the drawn halves of KernelSHAP's coalitions (a bit
    per region), and one block of the design.

    >>> round(fixed_bytes("kernelshap", 4096, 100000) / 2**20)
    400
    """
    side = regions + 1
    held = 2 * side * side * 8 + DESIGN_BYTES
    if method == "kernelshap":
        held += max(regions * regions * 8, -(-samples // 2) * -(-regions // 8))
    return held


# -- KernelSHAP ------------------------------------------------------------------------------


def kernelshap(images: np.ndarray, columns: int, scores: ScoresFunction, chunk: int,
               fill: np.ndarray, keys: Sequence[Sequence[int]], samples: int, grid: int,
               kind: str = "grid") -> np.ndarray:
    """KernelSHAP (Lundberg & Lee, 2017): Shapley values of the grid's superpixels, by the
    Shapley kernel's weighted regression.

    A coalition keeps some superpixels and hides the others. The values ``phi`` minimise
    ``sum_z w(z) (f(z) - f(0) - sum_{j in z} phi_j) ** 2`` subject to
    ``sum phi = f(1) - f(0)`` (efficiency), ``f(0)`` and ``f(1)`` the scores with every
    and no superpixel hidden, ``w`` the Shapley kernel
    ``(M - 1) / (C(M, |z|) |z| (M - |z|))`` over the ``M`` superpixels. When ``samples``
    covers the ``2 ** M - 2`` other coalitions, all are scored and the values are the
    exact Shapley values; else coalitions are drawn with probabilities proportional to
    the kernel (a size ``k`` with probability proportional to ``(M - 1) / (k (M - k))``,
    then uniformly among those of that size, as Captum and Xplique do) and weighted
    equally, each with its complement (paired sampling).

    The superpixels are the cells of a ``grid`` x ``grid`` grid, or with ``kind``
    ``"slic"`` each image's :func:`~guidedbp.engine.methods.superpixels.slic_segments`.

    Returns:
        float32 ``(N, K, H, W, 1)``, each pixel its superpixel's value.
    """
    def attribute(row: int, cells: int, score: Scorer) -> np.ndarray:
        coalitions = shapley_coalitions(np.random.default_rng(keys[row]), cells, samples)
        fit = _ShapleyFit(coalitions)
        for start, values, found in score(coalitions.design, coalitions.rows):
            fit.add(start, values, found)
        return fit.values()

    return cell_attributions(images, columns, grid, scores, chunk, fill, attribute, kind)


@dataclass(frozen=True)
class Coalitions:
    """KernelSHAP's design: row 0 hides every region, row 1 none, then ``count``
    coalitions: every one but those two in ``itertools.product`` order
    (``halves`` ``None``), or the ``halves`` drawn (packed bits, ``(halves, ceil(cells /
    8))`` uint8) followed by the complements of the first ``count - halves``."""

    cells: int
    count: int
    halves: np.ndarray | None = None

    @property
    def rows(self) -> int:
        return 2 + self.count

    @property
    def drawn(self) -> int:
        return 0 if self.halves is None else len(self.halves)

    def design(self, start: int, stop: int) -> np.ndarray:
        """float64 ``(stop - start, cells)``: rows ``start`` to ``stop``."""
        index = np.arange(start, stop) - 2  # the coalition of each row (-2, -1: none, all)
        if self.halves is None:
            number = np.maximum(index + 1, 0)  # coalition i is product's (i + 1)-th: bits
            shifts = np.arange(self.cells - 1, -1, -1)
            values = ((number[:, None] >> shifts) & 1).astype(np.float64)
        else:
            values = np.unpackbits(self.halves[np.maximum(index, 0) % self.drawn], axis=1,
                                   count=self.cells).astype(np.float64)
            complements = index >= self.drawn
            values[complements] = 1 - values[complements]
        values[index == -2] = 0.0
        values[index == -1] = 1.0
        return values

    def weights(self, index: np.ndarray) -> np.ndarray:
        """The regression weights of the coalitions numbered ``index``."""
        if self.halves is not None:
            return np.ones(len(index))
        sizes = np.array([int(number).bit_count() for number in index + 1])
        binomials = np.array([math.comb(self.cells, int(size)) for size in sizes], np.float64)
        return (self.cells - 1) / (binomials * sizes * (self.cells - sizes))


def shapley_coalitions(rng: np.random.Generator, cells: int, samples: int) -> Coalitions:
    """The coalitions (:class:`Coalitions`): every coalition but the empty and the full
    one, with the Shapley kernel's weights, when ``samples`` allows; else ``samples``
    drawn by the kernel, each with its complement, weighted equally. A drawn coalition of
    size ``k`` keeps the ``k`` regions of smallest ``rng.random()`` draws (the draws of
    one row ranked), drawn a block of rows at a time and kept as bits."""
    if cells == 1:
        return Coalitions(cells, 0)
    others = 2 ** cells - 2
    if samples >= others and others <= MAX_ENUMERATED:
        return Coalitions(cells, others)
    sizes = np.arange(1, cells)
    probabilities = (cells - 1) / (sizes * (cells - sizes))
    drawn = rng.choice(sizes, size=-(-samples // 2), p=probabilities / probabilities.sum())
    halves = np.empty((len(drawn), -(-cells // 8)), np.uint8)
    step = max(1, DESIGN_BYTES // (8 * cells))
    for start in range(0, len(drawn), step):
        draws = rng.random((min(step, len(drawn) - start), cells))
        # The size-th smallest draw of a row: it and those below it are kept.
        kept = np.sort(draws, axis=1)[np.arange(len(draws)), drawn[start : start + step] - 1]
        halves[start : start + len(draws)] = np.packbits(draws <= kept[:, None], axis=1)
    return Coalitions(cells, samples, halves)


class _ShapleyFit:
    """KernelSHAP's normal equations, summed as the design's blocks are scored, then
    solved with the efficiency constraint (:func:`constrained_solution`)."""

    def __init__(self, coalitions: Coalitions):
        self.coalitions = coalitions
        cells = coalitions.cells
        # The bordered system [[X^T W X, 1], [1^T, 0]]: its Gram block summed in place.
        self.system = np.zeros((cells + 1, cells + 1))
        self.system[:cells, cells] = self.system[cells, :cells] = 1.0
        self.right: np.ndarray | None = None  # X^T W (f - f(0)), (cells, K)
        self.kept = np.zeros(cells)  # the sum of the halves that have a complement
        self.empty = self.full = None

    def add(self, start: int, values: np.ndarray, found: np.ndarray) -> None:
        coalitions, cells = self.coalitions, self.coalitions.cells
        for position, name in ((0, "empty"), (1, "full")):  # rows 0 and 1: first block
            if start <= position < start + len(found):
                setattr(self, name, found[position - start])
        index = np.arange(start, start + len(found)) - 2  # each row's coalition
        rows = index >= 0
        index, values, gains = index[rows], values[rows], found[rows] - self.empty
        weights = coalitions.weights(index)
        if self.right is None:
            self.right = np.zeros((cells, found.shape[1]))
        self.right += values.T @ (gains * weights[:, None])
        gram = self.system[:cells, :cells]
        if coalitions.halves is None:
            _add_product(gram, values.T * weights, values)
            return
        # Drawn: X^T X of 0s and 1s, exact in float32 products. A half h with a complement
        # adds h h^T and (1 - h)(1 - h)^T = 1 1^T - 1 h^T - h 1^T + h h^T: summed here as
        # h h^T once (doubled in values()) and as the sum of those halves.
        halves = index < coalitions.drawn
        paired = index < coalitions.count - coalitions.drawn
        bits = values[halves].astype(np.float32)
        _add_product(gram, bits.T, bits, np.where(paired[halves], 1.0, 0.5))
        self.kept += values[paired].sum(axis=0)

    def values(self) -> np.ndarray:
        """``(cells, K)``: the Shapley values of the regions, per target."""
        coalitions, cells = self.coalitions, self.coalitions.cells
        gram = self.system[:cells, :cells]
        _mirror(gram)
        if coalitions.halves is not None:
            pairs = coalitions.count - coalitions.drawn
            gram *= 2
            gram += pairs
            gram -= self.kept[None, :]
            gram -= self.kept[:, None]
        right = np.concatenate([self.right, (self.full - self.empty)[None]])
        return constrained_solution(self.system, right)


def _add_product(total: np.ndarray, left: np.ndarray, right: np.ndarray,
                 scale: np.ndarray | None = None) -> None:
    """The upper triangle of ``total += left @ (scale[:, None] * right)``, a symmetric
    product (a Gram matrix: :func:`_mirror` fills the rest once it is summed), a strip of
    columns at a time: half the multiply-adds, no ``total``-sized temporary. With
    ``scale`` (0.5 or 1 per row, for products of 0s and 1s) the product is taken in
    float32 on the rows of one scale at a time: exact."""
    strip = _strip(total)
    parts = [(left, right, 1.0)] if scale is None else [
        (left[:, scale == value], right[scale == value], value) for value in (1.0, 0.5)]
    for first, second, factor in parts:
        if first.shape[1] == 0:
            continue
        for column in range(0, total.shape[1], strip):
            end = min(column + strip, total.shape[1])
            product = first[:end] @ second[:, column:end]
            total[:end, column:end] += factor * product if factor != 1 else product


def _mirror(total: np.ndarray) -> None:
    """Fill the lower triangle of a symmetric matrix from its upper one (as summed by
    :func:`_add_product`), a strip at a time."""
    strip = _strip(total)
    for column in range(strip, len(total), strip):
        total[column : column + strip, :column] = total[:column, column : column + strip].T


def _strip(total: np.ndarray) -> int:
    """Columns of ``total`` per strip: about :data:`DESIGN_BYTES` of float64."""
    return max(1, DESIGN_BYTES // (8 * len(total)))


def constrained_solution(system: np.ndarray, right: np.ndarray) -> np.ndarray:
    """``(cells, K)``: the solution of the bordered system ``[[G, 1], [1^T, 0]]``
    (``G`` the Gram block) for ``right`` — the weighted least squares with
    ``sum phi = total`` per target — by LU where ``G`` is positive definite (a unique
    solution), else by least squares (minimum norm: the coalitions leave it singular).
    ``G`` of 4096 regions takes about a second by LU, 15 by least squares (2 cores)."""
    cells = len(system) - 1
    if _positive_definite(system[:cells, :cells]):
        return np.linalg.solve(system, right)[:cells]
    return np.linalg.lstsq(system, right, rcond=None)[0][:cells]


def _positive_definite(gram: np.ndarray) -> bool:
    try:
        pivots = np.diagonal(np.linalg.cholesky(gram))
    except np.linalg.LinAlgError:
        return False
    return bool(pivots.min() ** 2 > _SINGULAR * pivots.max() ** 2)


# -- LIME ------------------------------------------------------------------------------------


def lime(images: np.ndarray, columns: int, scores: ScoresFunction, chunk: int,
         fill: np.ndarray, keys: Sequence[Sequence[int]], samples: int, grid: int,
         kind: str = "grid") -> np.ndarray:
    """LIME (Ribeiro et al., 2016): a local linear model of the score over superpixels.

    ``samples`` coalitions: the whole image first, then each superpixel kept with
    probability 1/2 (``lime_image``'s sampling). Each is weighted by the exponential
    kernel ``sqrt(exp(-d ** 2 / 0.25 ** 2))`` of the cosine distance ``d`` between the
    coalition and the all-kept one (``lime_image``'s kernel and width), and a ridge
    regression (penalty 1, with intercept, as ``lime_image``) fits the scores; a
    superpixel's coefficient is its value. The superpixels are as :func:`kernelshap`'s.

    Returns:
        float32 ``(N, K, H, W, 1)``, each pixel its superpixel's coefficient.
    """
    def attribute(row: int, cells: int, score: Scorer) -> np.ndarray:
        rng = np.random.default_rng(keys[row])
        drawn = 0

        def design(start: int, stop: int) -> np.ndarray:
            nonlocal drawn  # the blocks come in order: the rows are one stream of draws
            assert start == drawn, (start, drawn)
            drawn = stop
            rows = (rng.random((stop - start, cells)) < 0.5).astype(np.float64)
            if start == 0:
                rows[0] = 1.0
            return rows

        fit = _RidgeFit(cells, LIME_RIDGE)
        for _, values, found in score(design, samples):
            kept = values.sum(axis=1)
            distances = 1 - np.sqrt(kept / cells)  # cosine distance to all-ones
            fit.add(values, found, np.sqrt(np.exp(-distances ** 2 / LIME_KERNEL_WIDTH ** 2)))
        return fit.coefficients()

    return cell_attributions(images, columns, grid, scores, chunk, fill, attribute, kind)


class _RidgeFit:
    """A weighted ridge regression with an unpenalised intercept (scikit-learn's
    ``Ridge(alpha=penalty).fit(..., sample_weight=weights)``) from sums over blocks of
    rows: ``sum w``, ``sum w x'``, ``sum w y'``, ``sum w x' x'^T`` and ``sum w x' y'^T``
    of the features shifted by 1/2 and the targets by the first row's (``x'``, ``y'``:
    the centred products are these sums less the means' share, with little cancellation
    for features of 0s and 1s)."""

    def __init__(self, features: int, penalty: float):
        self.penalty = penalty
        self.weight = 0.0
        self.features = np.zeros(features)
        self.gram = np.zeros((features, features))
        self.shift: np.ndarray | None = None
        self.targets = self.cross = None

    def add(self, features: np.ndarray, targets: np.ndarray, weights: np.ndarray) -> None:
        if self.shift is None:
            self.shift = targets[0].copy()
            self.targets = np.zeros(targets.shape[1])
            self.cross = np.zeros((len(self.features), targets.shape[1]))
        shifted = features - 0.5
        gains = (targets - self.shift) * weights[:, None]
        self.weight += weights.sum()
        self.features += weights @ shifted
        self.targets += gains.sum(axis=0)
        self.cross += shifted.T @ gains
        _add_product(self.gram, (shifted * weights[:, None]).T, shifted)

    def coefficients(self) -> np.ndarray:
        """``(features, K)``: the coefficients, per target."""
        mean = self.features / self.weight
        _mirror(self.gram)
        system, step = self.gram, _strip(self.gram)
        for row in range(0, len(system), step):  # a strip at a time: no system-sized temporary
            system[row : row + step] -= np.outer(self.features[row : row + step], mean)
        system[np.diag_indices_from(system)] += self.penalty
        right = self.cross - np.outer(self.features, self.targets / self.weight)
        return np.linalg.solve(system, right)
