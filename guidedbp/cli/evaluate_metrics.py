"""``guidedbp evaluate``'s metric families (faithfulness, robustness, complexity,
randomisation: :mod:`guidedbp.checks.metrics_catalog`): measured a batch of images at a
time with the explainer, recorded per method and image (the ranking prints them:
:mod:`guidedbp.cli.evaluate_table`).

Every perturbation is made in pixel space (0-255, the picture fitted to the model's
input), then mapped through the model's preprocessing, as the deletion game does; the
robustness noise is drawn in the model's input space, where the maps are taken.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from guidedbp.checks.metrics_arrays import class_scores, finite_mean
from guidedbp.checks.metrics_catalog import CATALOG, METRIC_NAMES
from guidedbp.checks.metrics_fidelity import (
    MUFIDELITY_DEFAULTS,
    confidence_change,
    mufidelity_subsets,
)
from guidedbp.checks.metrics_properties import complexity, sparseness
from guidedbp.checks.metrics_random_logit import other_classes, similarities
from guidedbp.checks.metrics_road import ROAD_FRACTIONS, road
from guidedbp.checks.metrics_robustness import (
    SENSITIVITY_DEFAULTS,
    noisy_copies,
    relative_changes,
)

__all__ = ["METRIC_NAMES", "ROAD_NOISE", "FamilyScores", "family_record"]

#: ROAD's imputation noise on 0-255 pixels: 0.01 of the range.
ROAD_NOISE = 0.01 * 255
_AVERAGES = {"average-drop": "drop", "average-increase": "increase", "average-gain": "gain"}
_SENSITIVITIES = {"max-sensitivity": np.max, "avg-sensitivity": np.mean}
_ROAD = {"road-morf": "morf", "road-lerf": "lerf"}


@dataclass
class FamilyScores:
    """Per metric, method, the values of every image measured so far (image order), and
    ROAD's curves."""

    names: tuple[str, ...]
    seed: int
    values: dict = field(default_factory=dict)
    curves: dict = field(default_factory=dict)
    images: int = 0

    def add(self, name: str, method: str, values) -> None:
        self.values.setdefault(name, {}).setdefault(method, []).extend(
            float(v) for v in np.asarray(values, np.float64))

    def measure(self, explainer, explanation, pictures: np.ndarray, inputs: np.ndarray,
                pixel_to_input: Callable[[np.ndarray], np.ndarray]) -> None:
        """Score one batch: ``pictures`` (0-255, fitted to the model's input) and their
        model ``inputs``, explained by ``explanation`` (its targets are kept throughout)."""
        first, targets = self.images, np.asarray(explanation.targets, np.int64)
        chunk = max(64, explainer.batch_size)

        def logits(pixels: np.ndarray) -> np.ndarray:
            return explainer.predict(pixel_to_input(pixels))[0]

        def probabilities(pixels: np.ndarray) -> np.ndarray:
            return explainer.predict(pixel_to_input(pixels))[1]

        maps = explanation.by_method
        asked = set(self.names)
        if "mufidelity" in asked:  # the subsets and drops serve every method
            subsets = mufidelity_subsets(logits, pictures, targets, seed=self.seed,
                                         batch_size=chunk, first_index=first,
                                         **MUFIDELITY_DEFAULTS)
            for method, method_maps in maps.items():
                self.add("mufidelity", method, subsets.correlations(method_maps))
        if asked & set(_AVERAGES):
            base = class_scores(probabilities, pictures, targets, chunk)
            for method, method_maps in maps.items():
                change = confidence_change(probabilities, pictures, method_maps, targets,
                                           base=base, batch_size=chunk)
                for name, attribute in _AVERAGES.items():
                    if name in asked:
                        self.add(name, method, getattr(change, attribute))
        for name, order in _ROAD.items():
            if name in asked:
                for method, method_maps in maps.items():
                    curves = road(probabilities, pictures, method_maps, targets, order=order,
                                  noise=ROAD_NOISE, seed=self.seed, batch_size=chunk,
                                  first_index=first)
                    self.add(name, method, curves.aucs)
                    self.curves.setdefault(name, {}).setdefault(method, []).extend(
                        curves.curves.tolist())
        if asked & set(_SENSITIVITIES):
            samples = SENSITIVITY_DEFAULTS["samples"]
            copies = noisy_copies(inputs, samples, SENSITIVITY_DEFAULTS["radius"], self.seed,
                                  first_index=first)
            noisy = explainer.explain(copies, np.repeat(targets, samples).astype(np.int32))
            for method, method_maps in maps.items():
                changes = relative_changes(method_maps, noisy.by_method[method])
                for name, reduce in _SENSITIVITIES.items():
                    if name in asked:
                        self.add(name, method, reduce(changes, axis=1))
        if "random-logit" in asked:
            classes = np.asarray(explanation.class_probabilities).shape[1]
            others = other_classes(targets, classes, self.seed, first_index=first)
            other = explainer.explain(inputs, others.astype(np.int32))
            for method, method_maps in maps.items():
                self.add("random-logit", method, similarities(method_maps,
                                                              other.by_method[method]))
        for name, function in (("sparseness", sparseness), ("complexity", complexity)):
            if name in asked:
                for method, method_maps in maps.items():
                    self.add(name, method, function(method_maps))
        self.images += len(pictures)


def _number(value: float, digits: int = 6) -> float | None:
    """A JSON number: rounded, None where not finite."""
    return round(float(value), digits) if np.isfinite(value) else None


def family_record(scores: FamilyScores, constant: dict | None = None) -> dict:
    """The metric families' JSON: settings, then per metric (in :data:`METRIC_NAMES`
    order) its family, direction, reference and per method the mean and each image's
    value (6 decimals; null where not finite, and where ``constant[method]`` says the
    image's map is constant: the mean is then over the others, null where none is left).

    A constant map (:func:`~guidedbp.checks.metrics_arrays.constant_maps`) gets no value
    from any family: it has no ranking of pixels for the faithfulness metrics, its
    sensitivity ratio is 0/0 (or trivially 0: a zero map stays zero under noise, the best
    value there is), its sparseness and complexity are conventions, and its similarity
    to another class's map is that of two flat maps."""
    constant = constant or {}
    record: dict = {"seed": scores.seed, "images": scores.images, "settings": {}}
    asked = set(scores.names)
    if "mufidelity" in asked:
        record["settings"]["mufidelity"] = {**MUFIDELITY_DEFAULTS, "score": "logit",
                                            "correlation": "pearson"}
    if asked & set(_AVERAGES):
        record["settings"]["average"] = {"score": "probability", "unit": "percent",
                                         "mask": "|mean_c map|, min-max per image"}
    if asked & set(_ROAD):
        record["settings"]["road"] = {"fractions": list(ROAD_FRACTIONS),
                                      "noise": round(ROAD_NOISE, 6), "score": "probability",
                                      "imputation": "noisy linear (8 neighbours)"}
    if asked & set(_SENSITIVITIES):
        record["settings"]["sensitivity"] = {**SENSITIVITY_DEFAULTS, "norm": "frobenius",
                                             "noise": "uniform, radius x the image's range"}
    if "random-logit" in asked:
        record["settings"]["random_logit"] = {"similarity": "spearman of max_c |map|"}
    record["metrics"] = {}
    for name in (name for name in METRIC_NAMES if name in asked):
        info = CATALOG[name]
        entry = {"family": info.family, "direction": info.direction,
                 "definition": info.summary, "reference": info.reference, "methods": {}}
        for method, values in scores.values.get(name, {}).items():
            flags = constant.get(method) or [False] * len(values)
            values = [float("nan") if flat else value for value, flat in zip(values, flags)]
            entry["methods"][method] = {"mean": _number(finite_mean(values)),
                                        "values": [_number(value) for value in values]}
            if name in scores.curves:
                entry["methods"][method]["curves"] = [
                    [_number(value) for value in curve] for curve in scores.curves[name][method]]
        record["metrics"][name] = entry
    return record
