"""What an explainer returns: the maps, the classes they explain and their caveats.

Importing this module does not import TensorFlow.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from guidedbp.caveats import Caveat

__all__ = ["Explanation", "NoReluWarning", "ValueOutputWarning", "explanations_of"]


class NoReluWarning(UserWarning):
    """The model has no activation in the rule's scope (no ReLU-family op for
    ``guide="relu"``, no activation at all for ``"all"``), so guided backprop or
    deconvnet equals the plain gradient."""


class ValueOutputWarning(UserWarning):
    """The output read is one unit that no sigmoid or softmax head makes a probability:
    a value (a regression, or a binary classifier's raw logit), not a class, so a target
    of ``None`` explains that value, ``Unit(0)``, rather than a class of it."""


@dataclass(frozen=True)
class Explanation:
    """Maps and the target they explain.

    Attributes:
        by_method: method -> float32 ``(N, H, W, C)`` attributions of each image's
            target score (``(N, H, W, 1)`` for the class activation maps and
            occlusion), in the explainer's order.
        targets: int ``(N,)`` class each map explains (a :class:`~.targets.Unit`'s flat
            index, a :class:`~.targets.Region`'s class; -1 for similarities and score
            functions).
        logits: float32 ``(N,)`` the target's score (the score that was differentiated:
            a class's logit, a unit's value, a region's summed logits, a similarity).
        probabilities: float32 ``(N,)`` the target class's probability under the
            model's head (softmax of the logits when the model ends in logits; a
            region's mean probability of its class); NaN for units, similarities and
            score functions.
        class_probabilities: float32 ``(N, classes)`` every class's probability, for
            ranking (top-k).
        caveats: Per image, the :class:`~guidedbp.caveats.Caveat` items that make its
            maps less meaningful (no guided activation, a negligible map, a capped
            Score-CAM, and those the explainer was given for its model, such as random
            weights); ``()`` when none were looked for. :meth:`caveats_of` reads one
            image's.
        region_pixels: For a :class:`~.targets.Region` target, int64 ``(N,)``: how many
            cells of the output's ``(H', W')`` grid its region holds; else ``None``.
        region_masks: For a :class:`~.targets.Region` target, bool ``(N, H', W')``: the
            region each score summed over, at the output's resolution (the model's own
            argmax region, or the given mask resized to it); else ``None``.
        detections: For a :class:`~.targets.Detection` target, float32 ``(N, 6)``: the
            proposal each image's box matched on the clean image: its corners ``(x0, y0,
            x1, y1)`` in input pixels, its IoU with the box and its class score; else
            ``None``.
    """

    by_method: dict
    targets: np.ndarray
    logits: np.ndarray
    probabilities: np.ndarray
    class_probabilities: np.ndarray
    caveats: tuple[tuple[Caveat, ...], ...] = ()
    target: object = None
    region_pixels: np.ndarray | None = None
    region_masks: np.ndarray | None = None
    detections: np.ndarray | None = None

    def caveats_of(self, index: int) -> tuple[Caveat, ...]:
        """The caveats of image ``index`` (empty when there are none)."""
        return self.caveats[index] if self.caveats else ()

    @property
    def scores(self) -> np.ndarray:
        """float32 ``(N,)`` the score each map explains (:attr:`logits`)."""
        return self.logits

    @property
    def maps(self) -> np.ndarray:
        """The first (or only) method's maps."""
        return next(iter(self.by_method.values()))

    @property
    def methods(self) -> tuple[str, ...]:
        return tuple(self.by_method)


def explanations_of(methods: tuple[str, ...], traced, maps: dict) -> list[Explanation]:
    """One :class:`Explanation` per target column of a traced pass ``traced`` (a
    :class:`~guidedbp.engine.passes.runners.Pass`), with ``maps`` (method -> ``(N, K,
    ...)``) in the order of ``methods``."""
    columns = traced.columns
    return [
        Explanation({m: maps[m][:, column] for m in methods if m in maps},
                    traced.targets[:, column], traced.logits[:, column],
                    traced.probabilities[:, column], traced.class_probabilities,
                    target=columns.targets[column] if columns.targets else None,
                    region_pixels=(columns.data[column].sum(axis=(1, 2)).astype(np.int64)
                                   if columns.specs[column].kind == "region" else None),
                    region_masks=(columns.data[column] != 0
                                  if columns.specs[column].kind == "region" else None),
                    detections=(columns.data[column][:, 4:]
                                if columns.specs[column].kind == "detection" else None))
        for column in range(traced.targets.shape[1])
    ]
