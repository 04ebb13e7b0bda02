"""Faithfulness without masks: the deletion and insertion games of Petsiuk et al. (2018).

Petsiuk, Das and Saenko (2018), "RISE: Randomized Input Sampling for Explanation of
Black-box Models" (BMVC), score a saliency map by what happens to the model when the
pixels it ranks highest are taken away or given back:

- *deletion*: starting from the image, replace the most salient pixels by a baseline,
  a growing share at each step. A faithful map makes the explained class's probability
  fall fast: a low area under the curve (AUC) is better.
- *insertion*: starting from the baseline, put the most salient pixels of the image
  back. A faithful map makes the probability rise fast: a high AUC is better.

Conventions (the same for every method, so their AUCs compare):

- pixels are ranked by the map's magnitude, ``max_c |map|`` as
  :func:`guidedbp.render.maps.magnitude` takes it; ties go to the lower row-major
  index (a stable sort), so a ranking is reproducible (:func:`pixel_order`; this and
  the next two conventions are :mod:`guidedbp.checks.pixel_removal`'s);
- ``steps`` steps: step ``i`` (0..steps) perturbs the top ``floor(i * P / steps)`` of the
  ``P`` pixels (:func:`step_counts`), so a curve has ``steps + 1`` points, the untouched
  and the fully perturbed picture included;
- a pixel is perturbed in all its channels at once, in pixel space (0-255): the
  ``"black"`` baseline is pixel value 0, the ``"blur"`` baseline the picture under a
  Gaussian blur of standard deviation :data:`BLUR_SIGMA` times its shorter side
  (:func:`blurred`). The mixed pixels then go through the model's preprocessing
  (``pixel_to_input``), as the picture itself did;
- the curve is the explained class's *probability* (softmax or sigmoid output, not the
  logit), and the AUC is the trapezoid rule over x = 0, 1/steps, ..., 1 (:func:`auc`),
  so it lies in [0, 1].

This module knows numpy and a probability function, nothing about files or flags.

>>> import numpy as np
>>> def predict(inputs):  # class 1's probability is the mean input value
...     mean = inputs.mean(axis=(1, 2, 3))
...     return np.stack([1 - mean, mean], axis=1)
>>> picture = np.array([[1.0, 0.0], [0.0, 0.0]]).reshape(2, 2, 1)
>>> result = deletion_insertion(predict, [picture], [picture], classes=[1], steps=4,
...                             baseline="black")
>>> result.games["deletion"].curves.tolist(), result.games["deletion"].aucs.tolist()
([[0.25, 0.0, 0.0, 0.0, 0.0]], [0.03125])
>>> result.games["insertion"].curves.tolist(), result.games["insertion"].aucs.tolist()
([[0.0, 0.25, 0.25, 0.25, 0.25]], [0.21875])
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from guidedbp.checks.metrics_arrays import as_classes
from guidedbp.checks.pixel_removal import (
    BASELINES,
    BLUR_SIGMA,
    baseline_picture,
    blurred,
    checked_picture,
    pixel_order,
    step_counts,
)
from guidedbp.curves import GAMES, auc, fractions, positive_int
from guidedbp.errors import ArgumentError

__all__ = [
    "BASELINES",
    "BLUR_SIGMA",
    "DEFAULT_STEPS",
    "GAMES",
    "Faithfulness",
    "GameCurves",
    "auc",
    "baseline_picture",
    "blurred",
    "deletion_insertion",
    "fractions",
    "join",
    "pixel_order",
    "step_counts",
]

#: Steps of a curve unless told otherwise (a curve has one point more).
DEFAULT_STEPS = 20
#: Steps of a curve at most: each step is a forward pass per image and game.
MAX_STEPS = 1000


@dataclass(frozen=True)
class GameCurves:
    """One game's curves, one per image.

    Attributes:
        game: ``"deletion"`` or ``"insertion"``.
        curves: Float64 ``(N, steps + 1)``: the explained class's probability after
            step 0, 1, ..., steps.
        aucs: Float64 ``(N,)``: the area under each curve (:func:`auc`).
    """

    game: str
    curves: np.ndarray
    aucs: np.ndarray

    @property
    def mean_auc(self) -> float:
        """The AUC averaged over the images."""
        return float(np.mean(self.aucs))


@dataclass(frozen=True)
class Faithfulness:
    """What :func:`deletion_insertion` measured for one method's maps.

    Attributes:
        classes: Int ``(N,)``, the class whose probability each curve follows.
        steps: Steps per curve.
        baseline: A :data:`BASELINES` entry.
        games: Game name -> its :class:`GameCurves`, in :data:`GAMES` order.
    """

    classes: np.ndarray
    steps: int
    baseline: str
    games: dict[str, GameCurves]

    @property
    def fractions(self) -> np.ndarray:
        """The x of every curve point: the share of pixels perturbed, nominally."""
        return fractions(self.steps)


# -- the games ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Image:
    """One picture made ready: float32 pixels, its baseline and its pixel ranking."""

    pixels: np.ndarray
    baseline: np.ndarray
    order: np.ndarray
    counts: np.ndarray

    def perturbed(self, game: str, step: int) -> np.ndarray:
        """The picture after ``step`` steps of ``game``, float32 pixels."""
        chosen = self.order[: self.counts[step]]
        start, source = ((self.pixels, self.baseline) if game == "deletion"
                         else (self.baseline, self.pixels))
        out = start.copy()
        channels = out.shape[-1]
        out.reshape(-1, channels)[chosen] = source.reshape(-1, channels)[chosen]
        return out


def deletion_insertion(
    predict_probabilities: Callable[[np.ndarray], np.ndarray],
    pictures: np.ndarray | Sequence[np.ndarray],
    maps: np.ndarray | Sequence[np.ndarray],
    classes: Sequence[int] | np.ndarray | None = None,
    *,
    steps: int = DEFAULT_STEPS,
    baseline: str = "blur",
    pixel_to_input: Callable[[np.ndarray], np.ndarray] | None = None,
    batch_size: int = 16,
    which: Sequence[str] = GAMES,
) -> Faithfulness:
    """The deletion and insertion curves of one method's maps (see the module docstring).

    Every perturbed picture of every image goes through ``predict_probabilities`` in
    batches of at most ``batch_size`` (fewer where the pictures change size): several
    images' steps share a batch, and only one batch of inputs is held at a time.

    Args:
        predict_probabilities: ``(n, H, W, C)`` float32 model inputs -> ``(n, classes)``
            probabilities, e.g. ``lambda inputs: explainer.predict(inputs)[1]``.
        pictures: The pictures the maps explain, in pixel space (0-255, at the model's
            input resolution): ``(N, H, W, C)``, or a sequence of ``(H, W, C)`` arrays
            that may differ in size.
        maps: One map per picture, of its height and width: ``(H, W)`` or ``(H, W, C)``
            (ranked by ``max_c |map|``).
        classes: The class each curve follows, one per picture; ``None`` for each
            picture's most probable class (one more pass over the pictures).
        steps: Steps per curve, from 1 to :data:`MAX_STEPS`; a curve has ``steps + 1``
            points.
        baseline: A :data:`BASELINES` entry.
        pixel_to_input: Maps float32 pixels ``(n, H, W, C)`` into the model's input space
            (the model's preprocessing); ``None`` when the model takes pixels as they are.
        batch_size: Perturbed pictures per call of ``predict_probabilities``.
        which: The games to play, a non-empty subset of :data:`GAMES`.

    Returns:
        A :class:`Faithfulness` with a :class:`GameCurves` per game asked.

    Raises:
        ArgumentError: A bad argument (named, with what was expected), pictures and maps
            that do not match, a class out of range, or probabilities of the wrong shape.

    >>> explainer = guidedbp.Explainer("demo", "guided")  # doctest: +SKIP
    >>> result = deletion_insertion(lambda x: explainer.predict(x)[1], pictures,
    ...                             explainer(inputs), pixel_to_input=explainer.pixel_to_input
    ...                             )  # doctest: +SKIP
    >>> result.games["deletion"].mean_auc < result.games["insertion"].mean_auc  # doctest: +SKIP
    True
    """
    if not callable(predict_probabilities):
        raise ArgumentError("predict_probabilities must be a callable: inputs -> "
                            f"probabilities, got {type(predict_probabilities).__name__}")
    steps = positive_int(steps, "steps")
    if steps > MAX_STEPS:
        raise ArgumentError(f"steps={steps} is above the upper bound of {MAX_STEPS}")
    batch_size = positive_int(batch_size, "batch_size")
    if baseline not in BASELINES:
        raise ArgumentError(f"baseline={baseline!r} is not one of {', '.join(BASELINES)}")
    games = _games(which)
    pictures = _pictures(pictures)
    maps = list(maps)
    if len(maps) != len(pictures):
        raise ArgumentError(f"maps has {len(maps)} maps for {len(pictures)} pictures")
    images = []
    for index, (picture, saliency_map) in enumerate(zip(pictures, maps)):
        shape = np.shape(saliency_map)[:2]
        if shape != picture.shape[:2]:
            raise ArgumentError(f"maps[{index}] is {shape[0]}x{shape[1]} (H x W) but its "
                                f"picture is {picture.shape[0]}x{picture.shape[1]}")
        images.append(_Image(picture, baseline_picture(picture, baseline),
                             pixel_order(saliency_map),
                             step_counts(picture.shape[0] * picture.shape[1], steps)))
    model = _Model(predict_probabilities, pixel_to_input, batch_size)
    if classes is None:
        top = model.probabilities(((i, images[i].pixels) for i in range(len(images))), None)
        targets = np.array([int(np.argmax(row)) for row in top], np.int64)
    else:
        targets = as_classes(classes, len(images), items="pictures")
    curves = {}
    for game in games:
        jobs = ((index, image.perturbed(game, step))
                for index, image in enumerate(images) for step in range(steps + 1))
        values = model.probabilities(jobs, targets)
        curves[game] = np.asarray(values, np.float64).reshape(len(images), steps + 1)
    return Faithfulness(
        classes=targets, steps=steps, baseline=baseline,
        games={game: GameCurves(game, curve, np.array([auc(row) for row in curve]))
               for game, curve in curves.items()},
    )


def join(parts: Sequence[Faithfulness]) -> Faithfulness:
    """Several results of the same settings as one, images in order (e.g. one result
    per batch of images).

    Raises:
        ArgumentError: No parts, or parts of different steps, baselines or games.
    """
    parts = list(parts)
    if not parts:
        raise ArgumentError("parts is empty: expected at least one result")
    first = parts[0]
    for part in parts[1:]:
        if (part.steps, part.baseline, tuple(part.games)) != (
                first.steps, first.baseline, tuple(first.games)):
            raise ArgumentError("parts must share steps, baseline and games, got "
                                f"{part.steps}/{part.baseline}/{','.join(part.games)} and "
                                f"{first.steps}/{first.baseline}/{','.join(first.games)}")
    return Faithfulness(
        classes=np.concatenate([part.classes for part in parts]),
        steps=first.steps, baseline=first.baseline,
        games={game: GameCurves(
            game, np.concatenate([part.games[game].curves for part in parts]),
            np.concatenate([part.games[game].aucs for part in parts]))
            for game in first.games},
    )


class _Model:
    """The probability function, fed in batches of one picture size."""

    def __init__(self, predict_probabilities, pixel_to_input, batch_size: int):
        self.predict = predict_probabilities
        self.pixel_to_input = pixel_to_input
        self.batch_size = batch_size

    def probabilities(self, jobs: Iterator[tuple[int, np.ndarray]], targets) -> list:
        """Each job's ``(image index, pixels)`` probabilities: the target's (a float),
        or, with ``targets`` None, the whole row."""
        out: list = []
        batch: list[tuple[int, np.ndarray]] = []
        for job in jobs:
            if batch and (len(batch) == self.batch_size or job[1].shape != batch[0][1].shape):
                out += self._run(batch, targets)
                batch = []
            batch.append(job)
        if batch:
            out += self._run(batch, targets)
        return out

    def _run(self, batch: list, targets) -> list:
        pixels = np.stack([pixels for _, pixels in batch])
        inputs = pixels if self.pixel_to_input is None else self.pixel_to_input(pixels)
        inputs = np.asarray(inputs, np.float32)
        result = np.asarray(self.predict(inputs))
        if result.ndim != 2 or len(result) != len(batch) or result.dtype.kind not in "biuf":
            raise ArgumentError(
                f"predict_probabilities returned shape {result.shape} for {len(batch)} "
                f"inputs; expected ({len(batch)}, classes) probabilities (from "
                "explainer.predict, take [1]: lambda inputs: explainer.predict(inputs)[1])")
        if targets is None:
            return list(result.astype(np.float64))
        indices = np.array([targets[index] for index, _ in batch])
        if np.any(indices >= result.shape[1]):
            bad = int(indices[indices >= result.shape[1]][0])
            raise ArgumentError(f"class {bad} is out of range: the model has "
                                f"{result.shape[1]} classes (0..{result.shape[1] - 1})")
        return result[np.arange(len(batch)), indices].astype(np.float64).tolist()


# -- arguments ----------------------------------------------------------------------------


def _games(which) -> tuple[str, ...]:
    names = (which,) if isinstance(which, str) else tuple(which)
    unknown = [name for name in names if name not in GAMES]
    if unknown or not names:
        raise ArgumentError(f"which={which!r}: choose one or both of {', '.join(GAMES)}")
    return tuple(game for game in GAMES if game in names)


def _pictures(pictures) -> list[np.ndarray]:
    if isinstance(pictures, np.ndarray) and pictures.ndim != 4:
        raise ArgumentError(f"pictures must have shape (N, H, W, C) or be a sequence of "
                            f"(H, W, C) pictures, got an array of shape {pictures.shape}")
    arrays = [checked_picture(picture, f"pictures[{index}]").astype(np.float32)
              for index, picture in enumerate(pictures)]
    if not arrays:
        raise ArgumentError("pictures is empty: expected at least one picture")
    return arrays
