"""Faithfulness metrics of one forward pass per perturbed image: MuFidelity and the
Average Drop, Increase and Gain of the image kept by its map.

- :func:`mufidelity` (Bhatt, Weller and Moura 2020, "Evaluating and Aggregating
  Feature-based Model Explanations", def. 3; Xplique's ``MuFidelity``): for random
  subsets ``S`` of a ``grid_size`` x ``grid_size`` grid of cells (each cell in ``S`` with
  probability ``subset_percent``), set ``S`` to ``baseline`` and correlate (Pearson)
  the score's drop ``f(x) - f(x_S)`` with the map's sum over ``S``. **Higher is better**
  (1: the map's sums predict every drop).
- :func:`confidence_change` with :func:`average_drop` and :func:`average_increase`
  (Chattopadhay et al. 2018, "Grad-CAM++", WACV) and :func:`average_gain` (Zhang et al.
  2024, "Opti-CAM", CVIU); Xplique's ``AverageDropMetric``, ``AverageIncreaseMetric``,
  ``AverageGainMetric``. The image is multiplied by its map normalised to [0, 1]
  (``mean_c |map|``, min-max per image) and the class probability compared before (``Y``)
  and after (``O``): Drop ``100 * max(0, Y - O) / Y`` (**lower is better**), Increase
  ``100 * [O > Y]`` (**higher is better**), Gain ``100 * max(0, O - Y) / (1 - Y)``
  (**higher is better**), each averaged over the images.

Differences from Xplique: MuFidelity correlates with Pearson's coefficient, as Bhatt et
al. define it (Xplique uses Spearman's: ``correlation="spearman"``); it draws each
image's own subsets (Xplique draws one set per batch of images, inside TensorFlow;
``cells=`` takes explicit subsets); the three averages are percentages, as both
papers report them (Xplique returns fractions). The rest is Xplique's: the grid cells
cover the image by nearest-neighbour resizing, a constant correlation counts 0, the
ratios divide by ``Y + 1e-8`` and ``1 - Y + 1e-8``. The inputs are perturbed in whatever
space they are given: ``guidedbp evaluate`` gives pixels (0-255, so baseline 0 is black)
and maps them through the model's preprocessing inside ``predict``.

>>> def predict(inputs):  # class 0's score is the sum of the inputs: a linear model
...     total = inputs.sum(axis=(1, 2, 3))
...     return np.stack([total, -total], axis=1)
>>> image = np.arange(1.0, 17.0).reshape(1, 4, 4, 1)
>>> float(mufidelity(predict, image, image, [0], grid_size=4, samples=50)[0])
1.0
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from guidedbp.checks.metrics_arrays import (
    Predict,
    as_choice,
    as_classes,
    as_images,
    as_maps,
    class_scores,
    seeded,
)
from guidedbp.checks.stats import pearson, spearman
from guidedbp.curves import positive_int
from guidedbp.errors import ArgumentError

__all__ = [
    "CORRELATIONS",
    "MUFIDELITY_DEFAULTS",
    "ConfidenceChange",
    "MuFidelitySubsets",
    "average_drop",
    "average_gain",
    "average_increase",
    "confidence_change",
    "kept_by_map",
    "mufidelity",
    "mufidelity_subsets",
]

#: Xplique's defaults: grid cells per side, the share of cells removed, subsets per image
#: and the value a removed cell takes.
MUFIDELITY_DEFAULTS = {"grid_size": 9, "subset_percent": 0.2, "samples": 200, "baseline": 0.0}
#: MuFidelity's correlations: Pearson's (Bhatt et al.'s, the default) or Spearman's
#: (Xplique's).
CORRELATIONS = {"pearson": pearson, "spearman": spearman}
_EPS = 1e-8  # as Xplique's


# -- MuFidelity ---------------------------------------------------------------------------


@dataclass(frozen=True)
class MuFidelitySubsets:
    """The random subsets of every image and the score drop each caused: they depend on
    the images and the model, not on the maps, so one set serves every method.

    Attributes:
        cells: Bool ``(N, samples, grid_size, grid_size)``: the grid cells each subset
            set to the baseline.
        drops: Float64 ``(N, samples)``: ``f(x) - f(x_S)`` of the image's class.
        cell_of: Int64 ``(H, W)``: the flat grid cell of each pixel.
    """

    cells: np.ndarray
    drops: np.ndarray
    cell_of: np.ndarray

    @property
    def removed(self) -> np.ndarray:
        """Bool ``(N, samples, H, W)``: the pixels each subset set to the baseline."""
        flat = self.cells.reshape(*self.cells.shape[:2], -1)
        return flat[:, :, self.cell_of]

    def correlations(self, maps, correlation: str = "pearson") -> np.ndarray:
        """Each image's correlation (a :data:`CORRELATIONS` name) between its drops and
        its map's sums over the subsets (0 where either is constant), float64 ``(N,)``."""
        as_choice(correlation, CORRELATIONS, "correlation")
        maps = as_maps(maps)
        if len(maps) != len(self.cells) or maps.shape[1:3] != self.cell_of.shape:
            raise ArgumentError(f"maps has shape {maps.shape}; expected "
                                f"({len(self.cells)}, {self.cell_of.shape[0]}, "
                                f"{self.cell_of.shape[1]}, C)")
        count = self.cells.shape[2] * self.cells.shape[3]
        per_cell = np.stack([np.bincount(self.cell_of.ravel(), weights=image.ravel(),
                                         minlength=count)
                             for image in maps.sum(axis=-1)])
        sums = np.einsum("nsc,nc->ns", self.cells.reshape(*self.cells.shape[:2], -1),
                         per_cell)
        values = [CORRELATIONS[correlation](drop, total)
                  for drop, total in zip(self.drops, sums)]
        return np.nan_to_num(np.array(values, np.float64), nan=0.0)


def _cell_of(grid_size: int, height: int, width: int) -> np.ndarray:
    """Each pixel's flat grid cell: the grid resized to the image by nearest neighbour,
    half-pixel centres."""
    rows = np.minimum(((np.arange(height) + 0.5) * grid_size / height).astype(np.int64),
                      grid_size - 1)
    columns = np.minimum(((np.arange(width) + 0.5) * grid_size / width).astype(np.int64),
                         grid_size - 1)
    return rows[:, None] * grid_size + columns[None, :]


def mufidelity_subsets(predict: Predict, inputs, classes, *, grid_size: int = 9,
                       subset_percent: float = 0.2, samples: int = 200,
                       baseline: float = 0.0, seed: int = 0, batch_size: int = 64,
                       first_index: int = 0, cells=None) -> MuFidelitySubsets:
    """Draw every image's subsets (seeded per image) and measure the score drops.

    Args:
        predict: ``(n, H, W, C)`` inputs -> ``(n, classes)`` scores (the score the maps
            explain: ``guidedbp evaluate`` gives the logits).
        inputs: Real ``(N, H, W, C)``.
        classes: One class per image.
        grid_size: Cells per side of the grid the subsets are drawn on.
        subset_percent: Probability that a cell is removed, in (0, 1).
        samples: Subsets per image.
        baseline: The value of a removed pixel, in every channel.
        seed: Seeds the subsets; image ``i`` (numbered from ``first_index``) draws from
            its own stream, so a batch's subsets do not depend on the batch.
        batch_size: Perturbed inputs per call of ``predict`` (and held at a time).
        first_index: The first image's number, for its random stream.
        cells: Explicit subsets instead of random ones: bool ``(N, samples, grid_size,
            grid_size)``, True where a cell is set to ``baseline`` (``seed`` and
            ``subset_percent`` are then unused), e.g. to replay another library's draws.

    Returns:
        A :class:`MuFidelitySubsets`; ``.correlations(maps)`` is the metric.
    """
    images = as_images(inputs)
    targets = as_classes(classes, len(images))
    grid_size = positive_int(grid_size, "grid_size")
    samples = positive_int(samples, "samples")
    batch_size = positive_int(batch_size, "batch_size")
    if not 0 < subset_percent < 1:
        raise ArgumentError(f"subset_percent={subset_percent!r} must be between 0 and 1")
    cell_of = _cell_of(grid_size, *images.shape[1:3])
    if cells is None:
        cells = np.stack([seeded(seed, first_index + index).uniform(
            size=(samples, grid_size, grid_size)) <= subset_percent
            for index in range(len(images))])
    else:
        cells = np.asarray(cells)
        if cells.dtype != np.bool_ or cells.shape != (len(images), samples, grid_size,
                                                        grid_size):
            raise ArgumentError(f"cells has shape {cells.shape} and dtype {cells.dtype}; "
                                f"expected bool ({len(images)}, {samples}, {grid_size}, "
                                f"{grid_size})")
    base = class_scores(predict, images, targets, batch_size)
    flat_cells = cells.reshape(len(images) * samples, -1)
    after = np.empty(len(images) * samples, np.float64)
    for start in range(0, len(after), batch_size):  # one batch of perturbed inputs held
        rows = np.arange(start, min(start + batch_size, len(after)))
        removed = flat_cells[rows][:, cell_of]
        perturbed = np.where(removed[..., None], float(baseline), images[rows // samples])
        after[rows] = class_scores(predict, perturbed, targets[rows // samples], batch_size)
    return MuFidelitySubsets(cells, base[:, None] - after.reshape(len(images), samples),
                             cell_of)


def mufidelity(predict: Predict, inputs, maps, classes, *, correlation: str = "pearson",
               **options) -> np.ndarray:
    """MuFidelity of each image's map (Bhatt et al. 2020); higher is better.

    Args:
        predict, inputs, classes: As :func:`mufidelity_subsets`.
        maps: One map per image, ``(N, H, W, C)`` or ``(N, H, W)``.
        correlation: ``"pearson"`` (Bhatt et al.'s) or ``"spearman"`` (Xplique's).
        **options: :func:`mufidelity_subsets`'s keyword options (Xplique's defaults:
            :data:`MUFIDELITY_DEFAULTS`).

    Returns:
        Float64 ``(N,)`` correlations in [-1, 1].
    """
    as_choice(correlation, CORRELATIONS, "correlation")  # before the forward passes
    images = as_images(inputs)
    maps = as_maps(maps, images)
    return mufidelity_subsets(predict, images, classes, **options).correlations(
        maps, correlation)


# -- Average Drop, Increase and Gain ------------------------------------------------------


def kept_by_map(inputs, maps) -> np.ndarray:
    """The inputs multiplied by their maps normalised to [0, 1]: ``mean_c |map|``, then
    ``(m - min) / (max - min + 1e-8)`` per image (Xplique's ``_perturb_with_mask``).

    >>> kept_by_map(np.full((1, 1, 2, 1), 10.0), np.array([[[[2.0], [-4.0]]]]))[0, 0].round(4)
    array([[ 0.],
           [10.]])
    """
    images = as_images(inputs)
    mask = np.abs(as_maps(maps, images)).mean(axis=-1)  # |.| first, as Xplique 2.0.2
    low = mask.min(axis=(1, 2), keepdims=True)
    high = mask.max(axis=(1, 2), keepdims=True)
    return images * ((mask - low) / (high - low + _EPS))[..., None]


@dataclass(frozen=True)
class ConfidenceChange:
    """The class probability of each image before (``base``, ``Y``) and after (``after``,
    ``O``) it was multiplied by its normalised map, float64 ``(N,)`` each."""

    base: np.ndarray
    after: np.ndarray

    @property
    def drop(self) -> np.ndarray:
        """Per image, :func:`average_drop`'s term."""
        return average_drop(self.base, self.after)

    @property
    def increase(self) -> np.ndarray:
        """Per image, :func:`average_increase`'s term."""
        return average_increase(self.base, self.after)

    @property
    def gain(self) -> np.ndarray:
        """Per image, :func:`average_gain`'s term."""
        return average_gain(self.base, self.after)


def confidence_change(predict_probabilities: Predict, inputs, maps, classes, *,
                      base=None, batch_size: int = 64) -> ConfidenceChange:
    """Each image's class probability, and that of the image kept by its map
    (:func:`kept_by_map`): one forward pass per image (two without ``base``).

    Args:
        predict_probabilities: ``(n, H, W, C)`` inputs -> ``(n, classes)`` probabilities.
        inputs: Real ``(N, H, W, C)``.
        maps: One map per image.
        classes: One class per image.
        base: The images' own class probabilities when already known (shared by methods).
        batch_size: Inputs per call of ``predict_probabilities``.
    """
    images = as_images(inputs)
    targets = as_classes(classes, len(images))
    kept = kept_by_map(images, maps)
    if base is None:
        base = class_scores(predict_probabilities, images, targets, batch_size)
    after = class_scores(predict_probabilities, kept, targets, batch_size)
    return ConfidenceChange(np.asarray(base, np.float64), after)


def average_drop(base, after) -> np.ndarray:
    """Grad-CAM++'s drop per image, in percent: ``100 * max(0, Y - O) / (Y + 1e-8)``;
    average it over the images. Lower is better.

    >>> average_drop([0.8, 0.5], [0.2, 0.9]).round(4).tolist()
    [75.0, 0.0]
    """
    y, o = np.asarray(base, np.float64), np.asarray(after, np.float64)
    return 100.0 * np.maximum(0.0, y - o) / (y + _EPS)


def average_increase(base, after) -> np.ndarray:
    """Grad-CAM++'s increase in confidence per image, in percent: 100 where ``O > Y``,
    else 0; its average is the share of images. Higher is better.

    >>> average_increase([0.8, 0.5], [0.2, 0.9]).tolist()
    [0.0, 100.0]
    """
    return 100.0 * (np.asarray(after, np.float64) > np.asarray(base, np.float64))


def average_gain(base, after) -> np.ndarray:
    """Opti-CAM's gain per image, in percent: ``100 * max(0, O - Y) / (1 - Y + 1e-8)``;
    average it over the images. Higher is better.

    >>> average_gain([0.8, 0.5], [0.2, 0.9]).round(4).tolist()
    [0.0, 80.0]
    """
    y, o = np.asarray(base, np.float64), np.asarray(after, np.float64)
    return 100.0 * np.maximum(0.0, o - y) / (1.0 - y + _EPS)
