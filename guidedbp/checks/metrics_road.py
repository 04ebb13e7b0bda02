"""ROAD: remove the pixels a map ranks, impute them, and follow the class probability.

Rong, Leemann, Borisov, Kasneci and Kasneci (2022), "A Consistent and Efficient
Evaluation Strategy for Attribution Methods" (ICML). Removing pixels by setting them to
a constant leaks the removal mask's shape to the model; ROAD instead imputes each removed
pixel with *noisy linear imputation*: its value is the weighted mean of its 8 neighbours
(weight 1/6 for the 4 edge neighbours, 1/12 for the 4 diagonal ones; neighbours outside
the image are left out and the weights renormalised), removed neighbours included, which
makes one sparse linear system per picture and channel; then Gaussian noise is added to
the imputed pixels.

- **MoRF** (most relevant first): remove the top ``k`` of the pixels, for ``k`` in
  :data:`ROAD_FRACTIONS` (10%, 20%, ..., 90%). A faithful map makes the probability
  fall fast: **lower is better**.
- **LeRF** (least relevant first): remove the bottom ``k``. The probability should stay
  high: **higher is better**.

Per image, the curve is the explained class's probability at each ``k``, and its area
is the trapezoid rule over ``k`` divided by the span (0.8), i.e. the curve's mean height,
in [0, 1].

Conventions and differences from Rong et al.'s code (``road/imputations.py``,
``NoisyLinearImputer``), which solves the system with scipy's ``spsolve``:

- scipy is not a dependency: the system (symmetric positive definite whenever a pixel is
  kept) is solved with Jacobi-preconditioned conjugate gradients in numpy, every picture
  of a batch at once, until the residual is below :data:`TOLERANCE` times the right-hand
  side's norm (well below a grey level for 0-255 pixels);
- pixels are ranked by ``max_c |map|`` with ties in row-major order, as the deletion
  game ranks them (:func:`guidedbp.checks.pixel_removal.pixel_order`); LeRF takes that
  ranking reversed; ``k`` pixels are ``floor(k * H * W)``;
- the noise's standard deviation is a parameter in the pictures' units (Rong et al.:
  0.01 on ImageNet-normalised tensors, about 0.6 grey levels; ``guidedbp evaluate``:
  2.55 on 0-255 pixels, 0.01 of the range);
- the curve follows one image's class probability; the paper reports a data set's
  accuracy at each ``k`` (with no retraining either: that is ROAD's point).

>>> ramp = np.add.outer(np.arange(6.0), 2 * np.arange(6.0))[None, :, :, None]
>>> removed = np.zeros((1, 6, 6), bool); removed[0, 2:4, 1:5] = True
>>> bool(np.allclose(impute_linear(ramp, removed), ramp, atol=1e-3))
True
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from guidedbp.checks.metrics_arrays import (
    Predict,
    as_classes,
    as_images,
    as_maps,
    class_scores,
    seeded,
)
from guidedbp.checks.pixel_removal import pixel_order
from guidedbp.curves import positive_int
from guidedbp.errors import ArgumentError

__all__ = ["ORDERS", "ROAD_FRACTIONS", "TOLERANCE", "RoadCurves", "impute_linear", "road"]

#: The shares of pixels removed, as in Rong et al.'s figures.
ROAD_FRACTIONS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
#: Most relevant first, least relevant first.
ORDERS = ("morf", "lerf")
#: The conjugate gradients stop at this residual, relative to the right-hand side.
TOLERANCE = 1e-4
_SALT = {"morf": 4, "lerf": 5}  # each order's noise stream, apart from other metrics'


def _blur121(values: np.ndarray) -> np.ndarray:
    """``values`` convolved with ``outer([1, 2, 1], [1, 2, 1])``, 0 outside the picture."""
    rows = 2.0 * values
    rows[:, 1:] += values[:, :-1]
    rows[:, :-1] += values[:, 1:]
    out = 2.0 * rows
    out[:, :, 1:] += rows[:, :, :-1]
    out[:, :, :-1] += rows[:, :, 1:]
    return out


def _neighbour_sum(values: np.ndarray) -> np.ndarray:
    """``sum_o w_o values[i + o]`` over the 8 neighbours, 0 outside the picture: the
    weights are ``outer([1, 2, 1], [1, 2, 1]) / 12`` less the centre's 4/12, so two
    1-D passes and a subtraction instead of 8 shifted sums."""
    out = _blur121(values)
    out -= 4.0 * values
    out *= np.float32(1 / 12)
    return out


def _system(direction: np.ndarray, centre: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``(D - W) direction`` on the removed pixels: ``centre = D + 1/3`` folds the
    kernel's centre into the diagonal."""
    out = _blur121(direction)
    out *= np.float32(-1 / 12)
    out += centre * direction
    out *= mask
    return out


def _dot(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """Per picture, ``sum first * second`` (float64 ``(B,)``)."""
    return np.einsum("bhwc,bhwc->b", first, second, dtype=np.float64)


def impute_linear(pictures, removed, *, tolerance: float = TOLERANCE,
                  max_iterations: int | None = None) -> np.ndarray:
    """Fill the removed pixels with the linear imputation: each the weighted mean of its
    8 neighbours (the noise is :func:`road`'s to add).

    Args:
        pictures: Real ``(B, H, W, C)``.
        removed: Bool ``(B, H, W)``, True where a pixel is imputed; at least one pixel of
            each picture must be kept.
        tolerance: Stop once the residual is below this share of the right-hand side's
            norm (float32 arithmetic: about 1e-6 at best).
        max_iterations: A cap on the conjugate-gradient iterations (default ``10 *
            (H + W)``, far more than they need).

    Returns:
        Float32 ``(B, H, W, C)``: kept pixels unchanged, removed ones imputed.

    Raises:
        ArgumentError: Shapes that do not match, or a picture with every pixel removed.
    """
    values = as_images(pictures, "pictures").astype(np.float32)
    unknown = np.asarray(removed)
    if unknown.dtype != np.bool_ or unknown.shape != values.shape[:3]:
        raise ArgumentError(f"removed must be a bool array of shape {values.shape[:3]}, got "
                            f"{unknown.dtype} {unknown.shape}")
    if np.any(unknown.reshape(len(unknown), -1).all(axis=1)):
        raise ArgumentError("removed takes every pixel of a picture: keep at least one")
    limit = max_iterations or 10 * (values.shape[1] + values.shape[2])
    mask = unknown[..., None]
    return np.where(mask, _solve(values, mask.astype(np.float32), tolerance, limit), values)


def _solve(values: np.ndarray, mask: np.ndarray, tolerance: float, limit: int) -> np.ndarray:
    """The removed pixels' values (0 elsewhere): Jacobi-preconditioned conjugate gradients
    on ``(D - W_uu) x = W_uk v`` from 0, every picture at once. A picture leaves the batch
    once its residual is below ``tolerance`` times the right-hand side's norm."""
    height, width = values.shape[1:3]
    degree = _neighbour_sum(np.ones((1, height, width, 1), np.float32))
    centre = degree + np.float32(1 / 3)
    inverse = 1 / degree  # the Jacobi preconditioner
    rhs = _neighbour_sum(values * (1 - mask)) * mask
    scale = np.sqrt(_dot(rhs, rhs))
    solution = np.zeros_like(values)
    active = np.arange(len(values))
    x, system, residual = np.zeros_like(values), mask, rhs
    direction = residual * inverse
    rho = _dot(residual, direction)
    for _ in range(limit):
        norms = np.sqrt(_dot(residual, residual))
        done = norms <= tolerance * np.maximum(scale[active], 1e-30)
        if np.any(done):
            solution[active[done]] = x[done]
            keep = ~done
            active, x, residual, system = active[keep], x[keep], residual[keep], system[keep]
            direction, rho = direction[keep], rho[keep]
        if not len(active):
            break
        product = _system(direction, centre, system)
        curvature = _dot(direction, product)
        step = np.where(curvature > 0, rho / np.where(curvature > 0, curvature, 1), 0.0)
        x += step.astype(np.float32)[:, None, None, None] * direction
        residual -= step.astype(np.float32)[:, None, None, None] * product
        preconditioned = residual * inverse
        new_rho = _dot(residual, preconditioned)
        beta = np.where(rho > 0, new_rho / np.where(rho > 0, rho, 1), 0.0)
        direction = preconditioned + beta.astype(np.float32)[:, None, None, None] * direction
        rho = new_rho
    solution[active] = x  # any left at the cap: their best so far
    return solution


@dataclass(frozen=True)
class RoadCurves:
    """One order's ROAD curves, one per image.

    Attributes:
        order: ``"morf"`` or ``"lerf"``.
        fractions: Float64 ``(F,)``: the shares of pixels removed.
        curves: Float64 ``(N, F)``: the class probability after each removal.
        aucs: Float64 ``(N,)``: each curve's mean height (trapezoid rule over the
            fractions, divided by their span).
    """

    order: str
    fractions: np.ndarray
    curves: np.ndarray
    aucs: np.ndarray


def _area(fractions: np.ndarray, curves: np.ndarray) -> np.ndarray:
    if len(fractions) == 1:
        return curves[:, 0].copy()
    widths = np.diff(fractions)
    return ((curves[:, 1:] + curves[:, :-1]) / 2 * widths).sum(axis=1) / widths.sum()


def road(predict_probabilities: Predict, pictures, maps, classes, *, order: str = "morf",
         fractions=ROAD_FRACTIONS, noise: float = 0.01, seed: int = 0, batch_size: int = 16,
         first_index: int = 0) -> RoadCurves:
    """The ROAD curves of one method's maps (see the module docstring).

    Args:
        predict_probabilities: ``(n, H, W, C)`` pictures -> ``(n, classes)``
            probabilities (``guidedbp evaluate`` maps its 0-255 pixels through the
            model's preprocessing inside it).
        pictures: Real ``(N, H, W, C)``.
        maps: One map per picture, ranked by ``max_c |map|``.
        classes: The class each curve follows.
        order: ``"morf"`` (remove the most relevant first) or ``"lerf"``.
        fractions: Increasing shares of pixels removed, each in (0, 1).
        noise: The imputation noise's standard deviation, in the pictures' units
            (Rong et al.: 0.01 on normalised images; ``guidedbp evaluate``: 2.55 on
            0-255 pixels, 0.01 of the range).
        seed: Seeds the noise; picture ``i`` (numbered from ``first_index``) has its own
            stream per order.
        batch_size: Pictures imputed and predicted per batch.
        first_index: The first picture's number, for its noise stream.

    Returns:
        A :class:`RoadCurves`.
    """
    if order not in ORDERS:
        raise ArgumentError(f"order={order!r} is not one of {', '.join(ORDERS)}")
    images = as_images(pictures, "pictures")
    maps = as_maps(maps, images)
    targets = as_classes(classes, len(images))
    batch_size = positive_int(batch_size, "batch_size")
    shares = np.asarray(fractions, np.float64)
    if shares.ndim != 1 or not len(shares) or np.any((shares <= 0) | (shares >= 1)) \
            or np.any(np.diff(shares) <= 0):
        raise ArgumentError(f"fractions={fractions!r} must increase, each in (0, 1)")
    if not np.isfinite(noise) or noise < 0:
        raise ArgumentError(f"noise={noise!r} must be a non-negative standard deviation")
    pixels = images.shape[1] * images.shape[2]
    counts = np.floor(shares * pixels + 1e-9).astype(np.int64)
    jobs = [(index, level) for index in range(len(images)) for level in range(len(shares))]
    rankings: dict[int, np.ndarray] = {}
    noises: dict[int, np.ndarray] = {}
    curves = np.empty((len(images), len(shares)), np.float64)
    for start in range(0, len(jobs), batch_size):
        chunk = jobs[start : start + batch_size]
        removed = np.zeros((len(chunk), pixels), bool)
        for row, (index, level) in enumerate(chunk):
            if index not in rankings:  # one picture at a time: keep only its own
                rankings = {index: pixel_order(maps[index])}
            ranking = rankings[index]
            chosen = ranking[: counts[level]] if order == "morf" else ranking[::-1][
                : counts[level]]
            removed[row, chosen] = True
        filled = impute_linear(images[[index for index, _ in chunk]],
                               removed.reshape(len(chunk), *images.shape[1:3]))
        if noise:
            for row, (index, level) in enumerate(chunk):
                if index not in noises:  # one draw per picture: every level's noise
                    noises = {index: seeded(seed, first_index + index, _SALT[order]).normal(
                        0.0, float(noise), size=(len(shares), *images.shape[1:]))}
                filled[row] += np.where(removed[row].reshape(images.shape[1:3])[..., None],
                                        noises[index][level], 0.0).astype(np.float32)
        scores = class_scores(predict_probabilities, filled,
                              targets[[index for index, _ in chunk]], batch_size)
        for row, (index, level) in enumerate(chunk):
            curves[index, level] = scores[row]
    return RoadCurves(order, shares, curves, _area(shares, curves))
