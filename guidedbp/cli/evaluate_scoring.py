"""How ``guidedbp evaluate`` measures: each batch explained once, each map scored against
its mask and played in the deletion and insertion games (:func:`measure`), the metric
families measured beside (:mod:`guidedbp.cli.evaluate_metrics`), and each method's cost
over guided backprop (:func:`method_costs`, ``--costs``)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from guidedbp.checks.faithfulness import deletion_insertion, join
from guidedbp.cli.exits import UsageFailure
from guidedbp.cli.progress import Progress

if TYPE_CHECKING:
    from guidedbp.cli.evaluate_metrics import FamilyScores


@dataclass(frozen=True)
class Measured:
    """Every image's mask scores per method (empty lists without mask metrics; an image
    whose mask has no pixel has none), each method's
    :class:`~guidedbp.checks.faithfulness.Faithfulness` (none without games), the metric
    families' scores (None when none was asked), per method whether each image's map is
    constant (:func:`~guidedbp.checks.metrics_arrays.constant_maps`: no metric scores it)
    and the names of the images whose mask has no pixel."""

    scored: dict
    faithfulness: dict
    families: FamilyScores | None = None
    constant: dict = field(default_factory=dict)
    unmasked: list = field(default_factory=list)


@dataclass(frozen=True)
class Scored:
    """One map's localisation scores; a ``constant`` map's are not counted."""

    target: int
    hit: bool
    energy: float
    other_hit: bool | None
    constant: bool = False


COST_ROUNDS = 3  # timed runs per method for --costs


def method_costs(loaded, samples: list, methods, batch_size: int, options: dict,
           guide: str | None = None, precision: str = "float32") -> dict:
    """Each method's cost per image over guided's, each alone on the first batch."""
    from guidedbp.api import Explainer
    from guidedbp.checks.costs import relative_costs
    from guidedbp.models.preprocess import prepare

    chunk = samples[:batch_size]
    inputs = np.stack([prepare(sample.picture, loaded.input_shape, loaded.preprocess,
                               options.get("size"), options.get("resize", "stretch"))[2]
                       for sample in chunk])
    def explainer(name: str):
        return Explainer(loaded, name, batch_size=batch_size, guide=guide,
                         precision=precision)

    ratios = relative_costs(explainer, inputs, methods, rounds=COST_ROUNDS)
    return {"reference": "guided", "images": len(inputs), "rounds": COST_ROUNDS,
            "relative": {name: round(value, 3) for name, value in ratios.items()}}


def measure(loaded, explainer, samples: list, settings, options: dict,
            progress: Progress | None = None) -> Measured:
    """Explain the samples a batch at a time; score each map against its mask and play
    the deletion and insertion games with it, as ``settings`` (the command's
    :class:`~guidedbp.cli.evaluate.Settings`) asks; ``progress`` advances
    by each batch's images once they are measured. Each map is marked constant or not
    (the records leave constant maps out of every score) and an image whose mask has no
    pixel gets no mask score (it is named instead)."""
    from guidedbp.checks.metrics_arrays import constant_maps
    from guidedbp.cli.evaluate_metrics import FamilyScores
    from guidedbp.demo.metrics import energy_inside, pointing_game
    from guidedbp.models.preprocess import prepare
    from guidedbp.models.preprocess import preprocess as pixels_to

    scored: dict[str, list] = {m: [] for m in explainer.methods}
    parts: dict[str, list] = {m: [] for m in explainer.methods}
    constant: dict[str, list[bool]] = {m: [] for m in explainer.methods}
    unmasked: list[str] = []
    pixel_to_input = functools.partial(pixels_to, mode=loaded.preprocess)
    families = FamilyScores(settings.families, settings.seed) if settings.families else None

    def probabilities(inputs: np.ndarray) -> np.ndarray:
        return explainer.predict(inputs)[1]

    if progress is not None:
        progress.begin(len(samples))
    for start in range(0, len(samples), explainer.batch_size):
        chunk = samples[start : start + explainer.batch_size]
        prepared = [prepare(sample.picture, loaded.input_shape, loaded.preprocess,
                            options.get("size"), options.get("resize", "stretch"))
                    for sample in chunk]
        shapes = {model_input.shape for _, _, model_input in prepared}
        if len(shapes) > 1:  # a model with free dimensions takes each image at its size
            raise UsageFailure("images of different sizes for a model of free size: give "
                               "--size HxW")
        inputs = np.stack([model_input for _, _, model_input in prepared])
        truth = [sample.label for sample in chunk]
        targets = None if any(t is None for t in truth) else np.array(truth, np.int32)
        explanation = explainer.explain(inputs, targets)
        if families is not None:
            families.measure(explainer, explanation,
                             np.stack([fitted for fitted, _, _ in prepared]).astype(np.float32),
                             inputs, pixel_to_input)
        if settings.masked:
            unmasked += [sample.name for sample in chunk if not sample.mask.any()]
        for method, maps in explanation.by_method.items():
            flat = constant_maps(maps)  # as every metric reads it, at the model's input size
            if settings.games:
                parts[method].append(deletion_insertion(
                    probabilities, [fitted for fitted, _, _ in prepared], maps,
                    explanation.targets, steps=settings.steps, baseline=settings.baseline,
                    pixel_to_input=pixel_to_input, batch_size=explainer.batch_size,
                    which=settings.games))
            for index, sample in enumerate(chunk if settings.masked else ()):
                placement = prepared[index][1]
                magnitude = np.abs(placement.to_original(maps[index], max_side=None)
                                   ).max(axis=-1)[None]  # the mask's own size
                # Constant here too where the map's contrast was all in the padding.
                flat[index] |= bool(magnitude.max() == magnitude.min())
                if not sample.mask.any():
                    continue  # no pixel to point at: counted, not a miss
                other = sample.other_mask
                scored[method].append(Scored(
                    target=int(explanation.targets[index]),
                    hit=bool(pointing_game(magnitude, sample.mask[None], settings.tolerance)[0]),
                    energy=float(energy_inside(magnitude, sample.mask[None])[0]),
                    other_hit=None if other is None
                    else bool(pointing_game(magnitude, other[None], settings.tolerance)[0]),
                    constant=bool(flat[index]),
                ))
            constant[method] += flat.tolist()
        if progress is not None:
            for _ in chunk:
                progress.advance()
    if progress is not None:
        progress.close()
    faithfulness = {m: join(found) for m, found in parts.items() if found}
    return Measured(scored, faithfulness, families, constant, unmasked)
