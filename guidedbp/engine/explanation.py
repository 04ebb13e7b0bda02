"""What an explainer returns: the maps, the classes they explain and their caveats.

Importing this module does not import TensorFlow.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from guidedbp.caveats import Caveat

__all__ = ["Explanation", "NoReluWarning"]


class NoReluWarning(UserWarning):
    """The model has no activation in the rule's scope (no ReLU-family op for
    ``guide="relu"``, no activation at all for ``"all"``), so guided backprop or
    deconvnet equals the plain gradient."""


@dataclass(frozen=True)
class Explanation:
    """Maps and the classes they explain.

    Attributes:
        by_method: method -> float32 ``(N, H, W, C)`` attributions of each image's
            target logit (``(N, H, W, 1)`` for the class activation maps and
            occlusion), in the explainer's order.
        targets: int ``(N,)`` class each map explains.
        logits: float32 ``(N,)`` the target's logit (the score that was differentiated).
        probabilities: float32 ``(N,)`` the target's probability under the model's head
            (softmax of the logits when the model ends in logits).
        class_probabilities: float32 ``(N, classes)`` every class's probability, for
            ranking (top-k).
        caveats: Per image, the :class:`~guidedbp.caveats.Caveat` items that make its
            maps less meaningful (no guided activation, a negligible map, a capped
            Score-CAM, and those the explainer was given for its model, such as random
            weights); ``()`` when none were looked for. :meth:`caveats_of` reads one
            image's.
    """

    by_method: dict
    targets: np.ndarray
    logits: np.ndarray
    probabilities: np.ndarray
    class_probabilities: np.ndarray
    caveats: tuple[tuple[Caveat, ...], ...] = ()

    def caveats_of(self, index: int) -> tuple[Caveat, ...]:
        """The caveats of image ``index`` (empty when there are none)."""
        return self.caveats[index] if self.caveats else ()

    @property
    def maps(self) -> np.ndarray:
        """The first (or only) method's maps."""
        return next(iter(self.by_method.values()))

    @property
    def methods(self) -> tuple[str, ...]:
        return tuple(self.by_method)
