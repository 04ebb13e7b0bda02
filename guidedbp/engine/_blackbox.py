"""Black-box methods: RISE, KernelSHAP, LIME and Sobol indices, forward passes only.

Each hides regions of an image (a pixel hidden to the fraction ``1 - m`` becomes
``m * x + (1 - m) * fill``, ``fill`` occlusion's fill in the model's input space), scores
the copies through the same forward-only function as occlusion, ``chunk`` copies of one
image per pass (built as the batches go, so memory holds one batch), and turns the
scores into a map. The regions are the cells of a ``grid`` x ``grid`` grid over the
image, or for KernelSHAP and LIME with ``segments="slic"`` about ``grid ** 2`` SLIC
superpixels per image (scikit-image, the ``segments`` extra). Every target of an image
shares its copies: the scores function returns the K targets' scores of each copy.

Random draws (RISE's masks, the coalitions) come from
``numpy.random.default_rng([seed, i])`` for image ``i`` (its position in the images
explained; under SmoothGrad, ``[seed, i, j]`` for its noisy copy ``j``), drawn before the
copies are batched, so maps do not depend on ``chunk`` or ``batch_size``. Sobol's designs are a
quasi-random Sobol sequence (``tf.math.sobol_sample``, as Xplique's default sampler): no
seed.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from guidedbp.engine._perturbation import Probe, ScoresFunction
from guidedbp.engine._superpixels import require_slic, segments, slic_segments
from guidedbp.engine.options import MAX_BLACKBOX_PASSES, BlackBoxOptions
from guidedbp.errors import ArgumentError

#: Cells per side by default: RISE's (the paper's and Xplique's 7), the others' (Xplique's
#: Sobol grid, 8).
RISE_GRID, GRID = 7, 8
#: LIME's kernel: ``sqrt(exp(-d ** 2 / width ** 2))`` of the cosine distance ``d`` between a
#: coalition and the whole image, and its ridge penalty (``lime_image``'s defaults).
LIME_KERNEL_WIDTH, LIME_RIDGE = 0.25, 1.0
#: KernelSHAP enumerates every coalition when they are at most this many (and the samples
#: allow): the regression is then exact.
MAX_ENUMERATED = 2 ** 16
#: RISE draws its random masks in blocks of this many, whatever ``chunk``.
_BLOCK = 1024
#: The methods whose regions may be SLIC superpixels (``segments="slic"``).
SUPERPIXEL_METHODS = ("kernelshap", "lime")


@dataclass(frozen=True)
class BlackBoxProbe(Probe):
    """:class:`~guidedbp.engine._perturbation.Probe` and the black-box methods
    (see :class:`~guidedbp.engine.methods.Probe`); ``seed`` and each image's ``streams``
    row (int ``(N, k)``; ``None``: its index) key its random draws."""

    seed: int = 0
    streams: np.ndarray | None = None

    @property
    def keys(self) -> list[list[int]]:
        """Each image's seed sequence: ``[seed, *streams[i]]``."""
        streams = np.arange(len(self.images))[:, None] if self.streams is None \
            else self.streams
        return [[self.seed, *map(int, stream)] for stream in streams]

    def _settings(self, method: str) -> tuple[BlackBoxOptions, int]:
        options = self.options.blackbox
        return options, grid_of(options, method, *self.images.shape[1:3])

    def rise(self) -> np.ndarray:
        options, grid = self._settings("rise")
        return rise(self.images, self.columns, self.scores, self.chunk, self.fill, self.keys,
                    options.masks, grid, options.keep_probability)

    def kernelshap(self) -> np.ndarray:
        options, grid = self._settings("kernelshap")
        return kernelshap(self.images, self.columns, self.scores, self.chunk, self.fill,
                          self.keys, options.samples, grid, options.segments)

    def lime(self) -> np.ndarray:
        options, grid = self._settings("lime")
        return lime(self.images, self.columns, self.scores, self.chunk, self.fill, self.keys,
                    options.samples, grid, options.segments)

    def sobol(self) -> np.ndarray:
        options, grid = self._settings("sobol")
        return sobol(self.images, self.columns, self.scores, self.chunk, self.fill,
                     options.designs, grid)


def grid_of(options: BlackBoxOptions, method: str, height: int, width: int) -> int:
    """The grid's cells per side for ``method`` on ``height`` x ``width`` images: the
    option, else the method's default, at most the shorter side.

    >>> grid_of(BlackBoxOptions(), "rise", 224, 224), grid_of(BlackBoxOptions(), "lime", 4, 6)
    (7, 4)
    """
    if options.grid is not None:
        return options.grid
    return min(RISE_GRID if method == "rise" else GRID, height, width)


def passes_per_image(method: str, options: BlackBoxOptions, height: int, width: int) -> int:
    """The copies ``method`` scores per image: one forward pass each, ``chunk`` per batch
    (for KernelSHAP over SLIC superpixels, whose number each image sets, an upper bound).

    >>> [passes_per_image(m, BlackBoxOptions(), 224, 224)
    ...  for m in ("rise", "kernelshap", "lime", "sobol")]
    [100, 258, 256, 528]
    """
    grid = grid_of(options, method, height, width)
    cells = grid * grid
    if method == "rise":
        return options.masks
    if method == "lime":
        return options.samples
    if method == "sobol":
        return options.designs * (cells + 2)
    others = 2 ** cells - 2 if cells < 64 else None
    if options.segments == "grid" and others is not None and \
            options.samples >= others and others <= MAX_ENUMERATED:
        return 2 + others
    return 2 + options.samples


def check(method: str, options: BlackBoxOptions, height: int, width: int) -> None:
    """Refuse a grid finer than ``height`` x ``width`` images, Sobol designs of more than
    :data:`MAX_BLACKBOX_PASSES` forward passes per image, and SLIC superpixels without
    scikit-image.

    Raises:
        ArgumentError: Any of them.
    """
    if options.segments == "slic" and method in SUPERPIXEL_METHODS:
        require_slic()
    grid = grid_of(options, method, height, width)
    if grid > min(height, width):
        raise ArgumentError(f"grid={grid} cells per side is finer than the {height}x{width} "
                            f"images ({method})")
    if method == "sobol":
        passes = options.designs * (grid * grid + 2)
        if passes > MAX_BLACKBOX_PASSES:
            raise ArgumentError(
                f"designs={options.designs} with grid={grid} take {passes} forward passes per "
                f"image (designs x (grid^2 + 2)): above the upper bound of "
                f"{MAX_BLACKBOX_PASSES}")


# -- the copies ------------------------------------------------------------------------------


def _scored(image: np.ndarray, row: int, masks_of: Callable[[int, int], np.ndarray],
            count: int, fill: np.ndarray, scores: ScoresFunction, chunk: int
            ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(masks, scores)`` of ``count`` copies of ``image``, ``chunk`` per forward pass:
    ``masks_of(start, stop)`` gives float32 ``(n, H, W)`` masks in ``[0, 1]`` (1: kept),
    the copies are ``m * x + (1 - m) * fill``, their scores float64 ``(n, K)``."""
    for start in range(0, count, chunk):
        masks = masks_of(start, min(start + chunk, count))
        kept = masks[..., None]  # kept pixels stay exactly x, hidden ones exactly fill
        copies = (kept * image + (1 - kept) * fill).astype(np.float32)
        found = scores(copies, np.full(len(masks), row))
        yield masks, np.asarray(found, np.float64)


def _all_scores(image, row, masks_of, count, fill, scores, chunk) -> np.ndarray:
    """float64 ``(count, K)``: the scores of :func:`_scored`'s copies."""
    return np.concatenate([found for _, found in
                           _scored(image, row, masks_of, count, fill, scores, chunk)])


def _cell_masks(values: np.ndarray, labels: np.ndarray) -> Callable[[int, int], np.ndarray]:
    """``masks_of`` for per-cell values ``(n, cells)``: each pixel takes its cell's value."""
    values = values.astype(np.float32)

    def masks_of(start: int, stop: int) -> np.ndarray:
        return values[start:stop][:, labels]
    return masks_of


#: Per-cell mask values ``(n, cells)`` -> float64 ``(n, K)``: the scores of an image's
#: copies masked by them.
CellScores = Callable[[np.ndarray], np.ndarray]


def _cell_attributions(images: np.ndarray, columns: int, grid: int, scores: ScoresFunction,
                       chunk: int, fill: np.ndarray,
                       attribute: Callable[[int, int, CellScores], np.ndarray],
                       kind: str = "grid") -> np.ndarray:
    """float32 ``(N, K, H, W, 1)``: each pixel its region's value, ``attribute(row, cells,
    score)`` giving image ``row``'s ``(cells, K)`` values from the scores of the copies it
    asks for (KernelSHAP, LIME, Sobol). The regions: the grid's cells, or with ``kind``
    ``"slic"`` each image's SLIC superpixels (about ``grid ** 2``)."""
    count, height, width = images.shape[:3]
    grid_labels = segments(height, width, grid)
    result = np.zeros((count, columns, height, width), np.float32)
    for row, image in enumerate(images):
        labels = slic_segments(image, grid * grid) if kind == "slic" else grid_labels

        def score(design: np.ndarray, image=image, row=row, labels=labels) -> np.ndarray:
            return _all_scores(image, row, _cell_masks(design, labels), len(design), fill,
                               scores, chunk)

        values = attribute(row, int(labels.max()) + 1, score)  # (cells, K)
        result[row] = values.T[:, labels]
    return result[..., None]


# -- RISE ------------------------------------------------------------------------------------


def rise(images: np.ndarray, columns: int, scores: ScoresFunction, chunk: int,
         fill: np.ndarray, keys: Sequence[Sequence[int]], masks: int, grid: int, keep: float
         ) -> np.ndarray:
    """RISE (Petsiuk et al., 2018): the score of random masked copies, per pixel weighted
    by how much each mask keeps it, less the mean score.

    Each mask keeps each cell of a ``grid`` x ``grid`` grid with probability ``keep``;
    the binary grid is upsampled bilinearly (half-pixel centres) to ``(grid + 1)`` cells
    of ``ceil(H / grid)`` x ``ceil(W / grid)`` pixels and cropped to the image at a random
    shift of less than a cell (the paper's scheme). The map is
    ``sum_i (score(x_i) - mean) M_i / (masks * keep)``, ``x_i`` the copy masked by
    ``M_i`` and ``mean`` the mean of the ``masks`` scores: an estimate of
    ``E[score | pixel kept] - E[score]``, positive where keeping the pixel raises the
    score. The paper's map (the authors' code, Xplique's) is this plus
    ``mean * sum_i M_i / (masks * keep)``, an offset of about the mean score everywhere
    that leaves rankings unchanged but makes its overlays uniformly hot and its energy,
    sparseness, complexity and sensitivity reflect the offset more than the map.

    Returns:
        float32 ``(N, K, H, W, 1)``.
    """
    count, height, width = images.shape[:3]
    cell_h, cell_w = -(-height // grid), -(-width // grid)
    up_h = _bilinear((grid + 1) * cell_h, grid)  # (grid+1 cells, grid)
    up_w = _bilinear((grid + 1) * cell_w, grid)
    result = np.zeros((count, columns, height, width), np.float64)
    for row, image in enumerate(images):
        density = np.zeros((height, width), np.float64)  # sum_i M_i
        total = np.zeros(columns, np.float64)  # sum_i score(x_i)
        rng = np.random.default_rng(keys[row])  # the image's own stream
        cells, shifts = [], []
        for start in range(0, masks, _BLOCK):  # blocks of a fixed size: the same stream
            size = min(_BLOCK, masks - start)  # whatever the chunk
            cells.append(rng.random((size, grid, grid)) < keep)
            shifts.append(np.stack([rng.integers(0, cell_h, size),
                                    rng.integers(0, cell_w, size)], axis=1))
        kept, shift = np.concatenate(cells), np.concatenate(shifts)

        def masks_of(start: int, stop: int, kept=kept, shift=shift) -> np.ndarray:
            rows = up_h[shift[start:stop, :1] + np.arange(height)]  # (n, H, grid)
            cols = up_w[shift[start:stop, 1:] + np.arange(width)]  # (n, W, grid)
            grids = kept[start:stop].astype(np.float32)
            return rows @ grids @ cols.transpose(0, 2, 1)

        for mask, found in _scored(image, row, masks_of, masks, fill, scores, chunk):
            result[row] += np.tensordot(found.T, mask, axes=1)
            density += mask.sum(axis=0)
            total += found.sum(axis=0)
        result[row] -= (total / masks)[:, None, None] * density
    return (result / (masks * keep)).astype(np.float32)[..., None]


def _bilinear(size_out: int, size_in: int) -> np.ndarray:
    """float32 ``(size_out, size_in)``: a bilinear resize along one side with half-pixel
    centres (``tf.image.resize``'s), as a matrix."""
    centres = np.clip((np.arange(size_out) + 0.5) * size_in / size_out - 0.5, 0, size_in - 1)
    low = np.floor(centres).astype(int)
    high = np.minimum(low + 1, size_in - 1)
    matrix = np.zeros((size_out, size_in), np.float32)
    matrix[np.arange(size_out), low] += 1 - (centres - low)
    matrix[np.arange(size_out), high] += centres - low
    return matrix


# -- KernelSHAP and LIME ---------------------------------------------------------------------


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
    ``"slic"`` each image's :func:`slic_segments`.

    Returns:
        float32 ``(N, K, H, W, 1)``, each pixel its superpixel's value.
    """
    def attribute(row: int, cells: int, score: CellScores) -> np.ndarray:
        coalitions, weights = _shapley_coalitions(np.random.default_rng(keys[row]), cells,
                                                  samples)
        found = score(np.concatenate([np.zeros((1, cells)), np.ones((1, cells)), coalitions]))
        empty, full = found[0], found[1]
        return _constrained_regression(coalitions, found[2:] - empty, weights, full - empty)

    return _cell_attributions(images, columns, grid, scores, chunk, fill, attribute, kind)


def _shapley_coalitions(rng: np.random.Generator, cells: int, samples: int
                        ) -> tuple[np.ndarray, np.ndarray]:
    """float64 ``(n, cells)`` coalitions (1: kept) and their regression weights: every
    coalition but the empty and the full one with the Shapley kernel's weights when
    ``samples`` allows, else ``samples`` drawn by the kernel, each with its complement,
    weighted equally."""
    if cells == 1:
        return np.zeros((0, 1)), np.zeros(0)
    others = 2 ** cells - 2
    if samples >= others and others <= MAX_ENUMERATED:
        coalitions = np.array(list(itertools.product((0.0, 1.0), repeat=cells))[1:-1])
        sizes = coalitions.sum(axis=1).astype(int)
        binomials = np.array([math.comb(cells, int(size)) for size in sizes], np.float64)
        return coalitions, (cells - 1) / (binomials * sizes * (cells - sizes))
    sizes = np.arange(1, cells)
    probabilities = (cells - 1) / (sizes * (cells - sizes))
    drawn = rng.choice(sizes, size=-(-samples // 2), p=probabilities / probabilities.sum())
    ranks = rng.random((len(drawn), cells)).argsort(axis=1).argsort(axis=1)
    half = (ranks < drawn[:, None]).astype(np.float64)
    coalitions = np.concatenate([half, 1 - half])[:samples]
    return coalitions, np.ones(len(coalitions))


def _constrained_regression(coalitions: np.ndarray, gains: np.ndarray, weights: np.ndarray,
                            total: np.ndarray) -> np.ndarray:
    """``(cells, K)``: the weighted least squares of ``gains ~ coalitions @ phi`` with
    ``sum phi = total``, per target, from its KKT system (least squares where the
    coalitions leave it singular)."""
    cells = coalitions.shape[1]
    weighted = coalitions.T * weights  # (cells, n)
    system = np.zeros((cells + 1, cells + 1))
    system[:cells, :cells] = weighted @ coalitions
    system[:cells, cells] = system[cells, :cells] = 1.0
    right = np.concatenate([weighted @ gains, total[None]])  # (cells + 1, K)
    return np.linalg.lstsq(system, right, rcond=None)[0][:cells]


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
    def attribute(row: int, cells: int, score: CellScores) -> np.ndarray:
        rng = np.random.default_rng(keys[row])
        coalitions = (rng.random((samples, cells)) < 0.5).astype(np.float64)
        coalitions[0] = 1.0
        found = score(coalitions)
        kept = coalitions.sum(axis=1)
        distances = 1 - np.sqrt(kept / cells)  # cosine distance to the all-ones coalition
        weights = np.sqrt(np.exp(-distances ** 2 / LIME_KERNEL_WIDTH ** 2))
        return _ridge(coalitions, found, weights, LIME_RIDGE)

    return _cell_attributions(images, columns, grid, scores, chunk, fill, attribute, kind)


def _ridge(features: np.ndarray, targets: np.ndarray, weights: np.ndarray, penalty: float
           ) -> np.ndarray:
    """``(features, K)`` coefficients of a weighted ridge regression with an unpenalised
    intercept (scikit-learn's ``Ridge(alpha=penalty).fit(..., sample_weight=weights)``)."""
    share = weights / weights.sum()
    centred = features - share @ features
    gains = targets - share @ targets
    weighted = centred.T * weights
    system = weighted @ centred + penalty * np.eye(features.shape[1])
    return np.linalg.solve(system, weighted @ gains)


# -- Sobol indices ---------------------------------------------------------------------------


def sobol(images: np.ndarray, columns: int, scores: ScoresFunction, chunk: int,
          fill: np.ndarray, designs: int, grid: int) -> np.ndarray:
    """Sobol attribution (Fel et al., 2021): total-order Sobol indices of the grid's cells.

    Each cell's mask value is a variable in ``[0, 1]`` (1: kept); the copies are the
    image under the masks of a replicated design: ``designs`` points ``A`` and ``B`` of
    a ``2 * cells``-dimensional Sobol sequence and, per cell ``i``, ``A`` with column
    ``i`` from ``B`` (``C_i``), ``designs * (cells + 2)`` copies. Jansen's estimator gives
    cell ``i``'s total index ``sum_j (f(A_j) - f(C_ij)) ** 2 / (2 designs var f(A))``
    (``var`` with one degree of freedom; a score that never varies gives zeros). Masks
    and the map reach the image size by nearest neighbour (Xplique's inpainting
    perturbation, with ``fill`` for its zero).

    Returns:
        float32 ``(N, K, H, W, 1)``.
    """
    design = _sobol_design(grid * grid, designs)  # (designs * (cells + 2), cells)

    def attribute(row: int, cells: int, score: CellScores) -> np.ndarray:
        return _jansen(score(design), designs, cells)

    return _cell_attributions(images, columns, grid, scores, chunk, fill, attribute)


@functools.lru_cache(maxsize=8)
def _sobol_design(cells: int, designs: int) -> np.ndarray:
    """float32 ``(designs * (cells + 2), cells)``: ``A``, ``B``, then ``C_1 ... C_cells``."""
    points = tf.math.sobol_sample(2 * cells, designs, dtype=tf.float32).numpy()
    first, second = points[:, :cells], points[:, cells:]
    replicated = np.repeat(first[None], cells, axis=0)  # (cells, designs, cells)
    replicated[np.arange(cells), :, np.arange(cells)] = second.T
    design = np.concatenate([first, second, replicated.reshape(-1, cells)])
    design.setflags(write=False)
    return design


def _jansen(found: np.ndarray, designs: int, cells: int) -> np.ndarray:
    """``(cells, K)`` Jansen total-order indices from the scores of ``A``, ``B``, ``C``."""
    first = found[:designs]  # (designs, K)
    replicated = found[2 * designs:].reshape(cells, designs, -1)
    variance = first.var(axis=0, ddof=1) if designs > 1 else np.zeros(first.shape[1])
    squares = ((first[None] - replicated) ** 2).sum(axis=1)  # (cells, K)
    return np.divide(squares, 2 * designs * variance, out=np.zeros_like(squares),
                     where=variance > 1e-12)
