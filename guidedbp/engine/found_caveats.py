"""The caveats the engine can see: in the traced model and in the maps themselves.

See :mod:`guidedbp.caveats` for what a caveat is; the explainer calls
:func:`of_images` on every :class:`~guidedbp.engine.explainer.Explanation` it returns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from guidedbp import caveats as kinds
from guidedbp.caveats import Caveat
from guidedbp.engine import inputs as _inputs
from guidedbp.engine.methods import registry


def of_model(methods: Sequence[str], by_rule: dict, max_channels: int | None,
             channels: int | None) -> list[Caveat]:
    """What holds for every map of the run: no guided activation for the methods whose
    rule (``by_rule``: rule -> ``(scope, counts)``, the report's) guides none, a
    Score-CAM that kept ``max_channels`` of ``channels``."""
    found = []
    for name in methods:
        rule = registry.method(name).relu_rule
        if rule in by_rule and not by_rule[rule][1]:
            found.append(kinds.no_guided_activation(name, by_rule[rule][0]))
    if "scorecam" in methods and channels and max_channels and max_channels < channels:
        found.append(kinds.scorecam_capped(max_channels, channels))
    return found


def of_images(by_method: dict, count: int, span: Callable[[], float],
              shared: Sequence[Caveat], empty: Sequence[str | None] = ()
              ) -> tuple[tuple[Caveat, ...], ...]:
    """Per image: ``shared``, an :data:`~guidedbp.caveats.EMPTY_REGION` caveat where
    ``empty[i]`` names the region target of image ``i`` that has no pixel, then a
    :data:`~guidedbp.caveats.NEGLIGIBLE_MAP` caveat for each of its maps that moves the
    class score by less than :data:`~guidedbp.caveats.NEGLIGIBLE_EFFECT` (gradient maps)
    or that is constant (every other map).

    The effect is ``sum |map|`` for maps in the score's units (integrated gradients) and
    ``sum |map| * span`` for input gradients (guided, vanilla, deconvnet), ``span`` being
    the distance from black to white pixels in the model's input space (asked for once,
    when first needed): to first order, what moving every input value across the whole
    pixel range would do. The other maps (class activation maps, perturbation and
    black-box maps, the statistics over noisy copies: SquareGrad, VarGrad) are in no
    such unit: theirs is the caveat when every pixel holds the same value(s), zero or
    not (:func:`constant_value`). A constant gradient map is left to the effect rule: a
    uniform gradient is the true answer of a model that weighs every pixel alike.
    """
    per_image = []
    width = None
    for index in range(count):
        found = [kinds.empty_region(empty[index])] if empty and empty[index] else []
        for name, maps in by_method.items():
            record = registry.method(name)
            if (record.relu_rule is None or record.feature_map
                    or record.runner == registry.NOISE_STATISTIC):
                held = constant_value(maps[index])  # not in the score's units
                if held is not False:
                    found.append(kinds.constant_map(name, held))
                continue
            effect = float(np.abs(maps[index], dtype=np.float64).sum())
            if not record.path_integrated:
                width = span() if width is None else width
                effect *= width
            if effect < kinds.NEGLIGIBLE_EFFECT:
                found.append(kinds.negligible_map(name, effect))
        per_image.append(kinds.unique([*shared, *found]))
    return tuple(per_image)


def constant_value(saliency_map: np.ndarray) -> float | None | bool:
    """The value every pixel of ``saliency_map`` (``(H, W, C)``) holds: a float when all
    its values are equal, ``None`` when each pixel holds the same channel values but these
    differ, ``False`` when the map is not constant (two pixels differ).

    >>> constant_value(np.zeros((2, 2, 1))), constant_value(np.ones((2, 2, 1)) * [1, 2])
    (0.0, None)
    >>> constant_value(np.eye(2)[..., None])
    False
    """
    values = np.asarray(saliency_map)
    first = values.reshape(-1, values.shape[-1])[0]
    if not np.all(values == first):
        return False
    return float(first[0]) if np.all(first == first[0]) else None


def non_finite(labels: Sequence[str], scores: np.ndarray, probabilities: np.ndarray | None
               ) -> list[list[Caveat]]:
    """Per image, a :data:`~guidedbp.caveats.NON_FINITE_SCORE` caveat where its target's
    score (``labels[i]``'s, ``scores[i]``) or probability (``probabilities``: ``None`` for
    targets that have none) is infinite or NaN."""
    found = []
    for index, label in enumerate(labels):
        if not np.isfinite(scores[index]):
            found.append([kinds.non_finite_score(f"{label}'s score", scores[index])])
        elif probabilities is not None and not np.isfinite(probabilities[index]):
            found.append([kinds.non_finite_score(f"{label}'s probability",
                                                 probabilities[index])])
        else:
            found.append([])
    return found


def unmatched(target, found: np.ndarray) -> list[Caveat]:
    """A :data:`~guidedbp.caveats.NO_DETECTION` caveat where the proposal a
    :class:`~guidedbp.engine.targets.box_target.Detection` matched (``found``: corners, IoU, class
    score) is no detection of its box."""
    overlap, score = float(found[4]), float(found[5])
    if overlap >= kinds.DETECTION_IOU and score >= target.threshold:
        return []
    return [kinds.no_detection(target.label, overlap, score, target.threshold)]


def unguided(methods: Sequence[str], report) -> list[Caveat]:
    """An :data:`~guidedbp.caveats.UNGUIDED_ACTIVATION` caveat for each method whose rule
    left activations in its scope with their plain gradient (``report``'s
    :meth:`~guidedbp.engine.graph.report.Report.unreached`)."""
    from guidedbp.engine.graph.report import format_counts

    found = []
    for name in methods:
        left = report.unreached(registry.method(name).relu_rule or "")
        if left:
            found.append(kinds.unguided_activation(name, format_counts(left)))
    return found


def of_explanation(explanation, count: int, shared: Sequence[Caveat],
                   span: Callable[[], float]) -> tuple[tuple[Caveat, ...], ...]:
    """Each of ``count`` images' caveats for an
    :class:`~guidedbp.engine.explanation.Explanation`: ``shared`` (the model's and the
    traced model's), an empty region's, its maps' (:func:`of_images`), then a score that
    is not finite (:func:`non_finite`)."""
    empty = ()
    if explanation.region_pixels is not None:
        label = explanation.target.label if explanation.target is not None else "region"
        empty = [label if pixels == 0 else None for pixels in explanation.region_pixels]
    found = of_images(explanation.by_method, count, span, shared, empty)
    target = explanation.target
    if explanation.detections is not None:
        found = tuple((*caveats, *unmatched(target, explanation.detections[index]))
                      for index, caveats in enumerate(found))
    labels = ([target.label] * count if target is not None
              else [f"class:{int(c)}" for c in explanation.targets])
    overflowed = non_finite(  # units, similarities, scores: no probability
        labels, explanation.logits,
        explanation.probabilities if target is None or target.kind in ("class", "region")
        else None)
    return tuple((*caveats, *extra) for caveats, extra in zip(found, overflowed))


def with_caveats(explanation, images: np.ndarray, shared: Sequence[Caveat],
                 pixel_to_input: Callable | None = None):
    """``explanation`` with each of ``images``' caveats (:func:`of_explanation`):
    ``shared``, then those of its own maps; the images' span of raw pixel values in the
    model's input space (``pixel_to_input``) tells a map's noise from its signal."""

    def span() -> float:
        black, white = _inputs.black_white(images.shape[-1], pixel_to_input)
        return float(np.max(np.abs(white.astype(np.float64) - black)))

    return replace(explanation, caveats=of_explanation(explanation, len(images), shared, span))


def plain_rules(methods: Sequence[str], report, model) -> str | None:
    """Where guided or deconvnet backprop would equal the plain gradient (no activation
    in its rule's scope, by ``report``), the warning that says so for ``model``; else
    ``None``."""
    plain = [m for m in methods if registry.method(m).relu_rule in report.by_rule
             and not report.by_rule[registry.method(m).relu_rule][1]]
    if not plain:
        return None
    name = getattr(model, "name", None) or "the model"
    what = (f"{plain[0]} backprop equals" if len(plain) == 1
            else f"{' and '.join(plain)} equal")
    scopes = {report.by_rule[registry.method(m).relu_rule][0] for m in plain}
    lacks = "no ReLU-family op" if scopes == {"relu"} else "no activation to guide"
    return f"{name} has {lacks}: {what} the plain gradient for it"
