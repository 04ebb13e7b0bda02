"""The caveats the engine can see: in the traced model and in the maps themselves.

See :mod:`guidedbp.caveats` for what a caveat is; the explainer calls
:func:`of_images` on every :class:`~guidedbp.engine.explainer.Explanation` it returns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from guidedbp import caveats as kinds
from guidedbp.caveats import Caveat
from guidedbp.engine import methods as registry


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
    class score by less than :data:`~guidedbp.caveats.NEGLIGIBLE_EFFECT`.

    The effect is ``sum |map|`` for maps in the score's units (integrated gradients) and
    ``sum |map| * span`` for input gradients (guided, vanilla, deconvnet), ``span`` being
    the distance from black to white pixels in the model's input space (asked for once,
    when first needed): to first order, what moving every input value across the whole
    pixel range would do. Class activation maps, perturbation maps and the statistics
    over noisy copies (SquareGrad, VarGrad: squared gradients) are not measured.
    """
    per_image = []
    width = None
    for index in range(count):
        found = [kinds.empty_region(empty[index])] if empty and empty[index] else []
        for name, maps in by_method.items():
            record = registry.method(name)
            if (record.relu_rule is None or record.feature_map
                    or record.runner == registry.NOISE_STATISTIC):
                continue  # not in the score's units, nor per unit of input
            effect = float(np.abs(maps[index], dtype=np.float64).sum())
            if not record.path_integrated:
                width = span() if width is None else width
                effect *= width
            if effect < kinds.NEGLIGIBLE_EFFECT:
                found.append(kinds.negligible_map(name, effect))
        per_image.append(kinds.unique([*shared, *found]))
    return tuple(per_image)
