"""Black-box methods: RISE, D-RISE, KernelSHAP, LIME and Sobol indices, forward passes only.

Each hides regions of an image (a pixel hidden to the fraction ``1 - m`` becomes
``m * x + (1 - m) * fill``, ``fill`` occlusion's fill in the model's input space), scores
the copies through the same forward-only function as occlusion, ``chunk`` copies of one
image per pass, and turns the scores into a map. The regions are the cells of a ``grid``
x ``grid`` grid over the image, or for KernelSHAP and LIME with ``segments="slic"`` about
``grid ** 2`` SLIC superpixels per image (scikit-image, the ``segments`` extra). Every
target of an image shares its copies: the scores function returns the K targets' scores
of each copy.

Memory holds one batch of copies and one block of the masks or designs, whatever the
masks, samples or designs: the masks and designs are drawn as the batches go and folded
into the map as they are scored (:mod:`guidedbp.engine.methods.copies`), never held whole. What
must exist whole is KernelSHAP's and LIME's ``regions ** 2`` system (128 MiB at grid 64,
:mod:`guidedbp.engine.methods.regression`); :func:`check` refuses, before any work, a run where
it cannot fit in the free memory.

D-RISE (Petsiuk et al., 2021) is RISE on a detection's similarity
(:class:`~guidedbp.engine.targets.box_target.Detection`'s score,
``max_j IoU(box, box_j) * p_j[label]`` over the detector's proposals): the same masks
from the same generator and seeds, the same estimator, on the paper's 16 x 16 grid by
default.

Random draws (RISE's masks, the coalitions) come from
``numpy.random.default_rng([seed, i])`` for image ``i`` (its position in the images
explained; under SmoothGrad, ``[seed, i, j]`` for its noisy copy ``j``), drawn in the
order of the copies whatever their batches, so maps do not depend on ``chunk`` or
``batch_size``. Sobol's designs are a quasi-random Sobol sequence
(``tf.math.sobol_sample``, as Xplique's default sampler): no seed.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from guidedbp.engine import inputs as _inputs
from guidedbp.engine.methods.copies import Scorer, cell_attributions, scored
from guidedbp.engine.methods.perturbation import Probe, ScoresFunction
from guidedbp.engine.methods.regression import MAX_ENUMERATED, fixed_bytes, kernelshap, lime
from guidedbp.engine.methods.superpixels import require_slic
from guidedbp.engine.options import MAX_BLACKBOX_PASSES, BlackBoxOptions
from guidedbp.errors import ArgumentError

#: Cells per side by default: RISE's (the paper's and Xplique's 7), D-RISE's (its paper's
#: 16, for objects smaller than the image), the others' (Xplique's Sobol grid, 8).
RISE_GRID, DRISE_GRID, GRID = 7, 16, 8
#: RISE's and D-RISE's masks where ``masks`` is ``None`` (:class:`BlackBoxOptions`).
RISE_MASKS, DRISE_MASKS = 100, 500
#: RISE draws its random masks in blocks of this many, whatever ``chunk``.
_BLOCK = 1024
#: The methods whose regions may be SLIC superpixels (``segments="slic"``).
SUPERPIXEL_METHODS = ("kernelshap", "lime")
#: The methods that solve a ``regions ** 2`` system.
REGRESSION_METHODS = ("kernelshap", "lime")


@dataclass(frozen=True)
class BlackBoxProbe(Probe):
    """:class:`~guidedbp.engine.methods.perturbation.Probe` and the black-box methods
    (see :class:`~guidedbp.engine.methods.registry.Probe`); ``seed`` and each image's ``streams``
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
                    masks_of(options, "rise"), grid, options.keep_probability)

    def drise(self) -> np.ndarray:
        # RISE's estimator and masks; the score is the Detection target's similarity.
        options, grid = self._settings("drise")
        return rise(self.images, self.columns, self.scores, self.chunk, self.fill, self.keys,
                    masks_of(options, "drise"), grid, options.keep_probability)

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
    >>> grid_of(BlackBoxOptions(), "drise", 224, 224), grid_of(BlackBoxOptions(grid=7), "drise",
    ...                                                       224, 224)
    (16, 7)
    """
    if options.grid is not None:
        return options.grid
    default = {"rise": RISE_GRID, "drise": DRISE_GRID}.get(method, GRID)
    return min(default, height, width)


def masks_of(options: BlackBoxOptions, method: str) -> int:
    """RISE's or D-RISE's masks per image: the option, else the method's default.

    >>> masks_of(BlackBoxOptions(), "rise"), masks_of(BlackBoxOptions(), "drise")
    (100, 500)
    >>> masks_of(BlackBoxOptions(masks=64), "drise")
    64
    """
    if options.masks is not None:
        return options.masks
    return DRISE_MASKS if method == "drise" else RISE_MASKS


def passes_per_image(method: str, options: BlackBoxOptions, height: int, width: int) -> int:
    """The copies ``method`` scores per image: one forward pass each, ``chunk`` per batch
    (for KernelSHAP over SLIC superpixels, whose number each image sets, an upper bound).

    >>> [passes_per_image(m, BlackBoxOptions(), 224, 224)
    ...  for m in ("rise", "drise", "kernelshap", "lime", "sobol")]
    [100, 500, 258, 256, 528]
    """
    grid = grid_of(options, method, height, width)
    cells = grid * grid
    if method in ("rise", "drise"):
        return masks_of(options, method)
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
    :data:`MAX_BLACKBOX_PASSES` forward passes per image, SLIC superpixels without
    scikit-image, and a KernelSHAP or LIME system that cannot fit in the free memory.

    Raises:
        ArgumentError: Any of them (the last naming the sizes and a grid that fits).
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
    if method in REGRESSION_METHODS:
        _check_system(method, options, grid)


def _check_system(method: str, options: BlackBoxOptions, grid: int) -> None:
    """Refuse a KernelSHAP or LIME run whose ``regions ** 2`` system (about ``grid ** 2``
    regions, SLIC's too) cannot fit in the free memory, before any work."""
    regions = grid * grid
    free = _inputs.available_memory()
    needed = fixed_bytes(method, regions, options.samples)
    if free is None or needed <= free:
        return
    fits = [side for side in range(1, grid)
            if fixed_bytes(method, side * side, options.samples) <= free]
    advice = f"try grid={fits[-1]}" if fits else "free some memory"
    raise ArgumentError(
        f"grid={grid}: {method} solves a system of {regions + 1}x{regions + 1} float64 over "
        f"its {regions} regions, {_mib(needed)} with the solver's copies, and "
        f"{_mib(free)} are free: {advice}")


def _mib(count: int) -> str:
    return f"{count / 2**20:.0f} MiB"


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

    D-RISE (Petsiuk et al., 2021) is this function on a detection's similarity ``w_i``:
    its paper's map ``sum_i w_i M_i`` is ``masks * keep`` times this map plus
    ``mean * sum_i M_i`` (the same offset as RISE's; vision-explanation-methods' D-RISE
    removes it too).

    The masks are drawn :data:`_BLOCK` at a time as the batches need them (the same draws
    whatever ``chunk``): memory holds a block and a batch, whatever ``masks``.

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
        draws = _RiseDraws(np.random.default_rng(keys[row]), masks, grid, keep, cell_h,
                           cell_w)

        def masks_of(start: int, stop: int, draws=draws) -> np.ndarray:
            kept, shift = draws.take(start, stop)
            rows = up_h[shift[:, :1] + np.arange(height)]  # (n, H, grid)
            cols = up_w[shift[:, 1:] + np.arange(width)]  # (n, W, grid)
            return rows @ kept.astype(np.float32) @ cols.transpose(0, 2, 1)

        for mask, found in scored(image, row, masks_of, masks, fill, scores, chunk):
            result[row] += np.tensordot(found.T, mask, axes=1)
            density += mask.sum(axis=0)
            total += found.sum(axis=0)
        result[row] -= (total / masks)[:, None, None] * density
    return (result / (masks * keep)).astype(np.float32)[..., None]


class _RiseDraws:
    """RISE's random masks of one image, drawn :data:`_BLOCK` at a time (each block: its
    kept cells, then its row and column shifts) and handed out in order."""

    def __init__(self, rng: np.random.Generator, masks: int, grid: int, keep: float,
                 cell_h: int, cell_w: int):
        self.rng, self.masks, self.grid, self.keep = rng, masks, grid, keep
        self.cell_h, self.cell_w = cell_h, cell_w
        self.first = 0  # the mask number of kept[0]
        self.kept = np.zeros((0, grid, grid), bool)
        self.shift = np.zeros((0, 2), np.int64)

    def take(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """Masks ``start`` to ``stop`` (never before those taken last): their kept cells,
        bool ``(n, grid, grid)``, and shifts, int ``(n, 2)``."""
        drop = start - self.first
        self.kept, self.shift, self.first = self.kept[drop:], self.shift[drop:], start
        while self.first + len(self.kept) < stop:
            size = min(_BLOCK, self.masks - self.first - len(self.kept))
            kept = self.rng.random((size, self.grid, self.grid)) < self.keep
            shift = np.stack([self.rng.integers(0, self.cell_h, size),
                              self.rng.integers(0, self.cell_w, size)], axis=1)
            self.kept = np.concatenate([self.kept, kept])
            self.shift = np.concatenate([self.shift, shift])
        return self.kept[: stop - start], self.shift[: stop - start]


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

    The design is built a block of rows at a time from ``A`` and ``B`` and each block's
    squares summed as it is scored: memory holds ``A``, ``B`` and a block, whatever
    ``designs``.

    Returns:
        float32 ``(N, K, H, W, 1)``.
    """
    first, second = _sobol_points(grid * grid, designs)

    def design(start: int, stop: int) -> np.ndarray:
        """Rows ``start`` to ``stop`` of ``A``, ``B``, ``C_1 ... C_cells``."""
        index = np.arange(start, stop)
        cell, point = np.divmod(np.maximum(index - 2 * designs, 0), designs)
        values = first[np.where(index < designs, index, point)]
        values[(index >= designs) & (index < 2 * designs)] = \
            second[index[(index >= designs) & (index < 2 * designs)] - designs]
        replicated = index >= 2 * designs
        values[replicated, cell[replicated]] = second[point[replicated], cell[replicated]]
        return values

    def attribute(row: int, cells: int, score: Scorer) -> np.ndarray:
        estimate = _Jansen(designs, cells)
        for start, _, found in score(design, designs * (cells + 2)):
            estimate.add(start, found)
        return estimate.indices()

    return cell_attributions(images, columns, grid, scores, chunk, fill, attribute)


@functools.lru_cache(maxsize=8)
def _sobol_points(cells: int, designs: int) -> tuple[np.ndarray, np.ndarray]:
    """float32 ``A`` and ``B``, ``(designs, cells)`` each: the Sobol sequence's points."""
    points = tf.math.sobol_sample(2 * cells, designs, dtype=tf.float32).numpy()
    first, second = points[:, :cells].copy(), points[:, cells:].copy()
    for array in (first, second):
        array.setflags(write=False)
    return first, second


class _Jansen:
    """Jansen's total-order indices, summed over the design's blocks as they come: the
    scores of ``A`` (rows ``0`` to ``designs``, first) are kept, ``B``'s are not needed,
    and each ``C_ij`` adds ``(f(A_j) - f(C_ij)) ** 2`` to cell ``i``'s sum."""

    def __init__(self, designs: int, cells: int):
        self.designs, self.cells = designs, cells
        self.first: np.ndarray | None = None  # f(A), (designs, K)
        self.squares: np.ndarray | None = None  # (cells, K)

    def add(self, start: int, found: np.ndarray) -> None:
        designs = self.designs
        if self.first is None:
            self.first = np.zeros((designs, found.shape[1]))
            self.squares = np.zeros((self.cells, found.shape[1]))
        index = np.arange(start, start + len(found))
        own = index < designs
        self.first[index[own]] = found[own]
        replicated = index >= 2 * designs
        cell, point = np.divmod(index[replicated] - 2 * designs, designs)
        np.add.at(self.squares, cell, (self.first[point] - found[replicated]) ** 2)

    def indices(self) -> np.ndarray:
        """``(cells, K)``: the total-order indices (zeros where ``f(A)`` never varies)."""
        first, squares = self.first, self.squares
        variance = first.var(axis=0, ddof=1) if self.designs > 1 else np.zeros(first.shape[1])
        return np.divide(squares, 2 * self.designs * variance, out=np.zeros_like(squares),
                         where=variance > 1e-12)
