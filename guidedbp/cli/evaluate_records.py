"""``guidedbp evaluate``'s JSON records: the mask metrics per method and class, the
deletion and insertion games per method and image, and what no metric scored (constant
maps, masks without a pixel).

A constant map (:func:`~guidedbp.checks.metrics_arrays.constant_maps`: ``max_c |map|``
the same at every pixel, an all-zero map included) singles out no pixel: every metric
leaves it out of its scores and means, and it is counted and named per method, with a
``negligible-map`` caveat. An image whose mask has no pixel is left out of the mask
metrics and named: it is not a miss.

``measured`` below is a :class:`guidedbp.cli.evaluate_scoring.Measured`.
"""

from __future__ import annotations

import numpy as np

from guidedbp.caveats import NEGLIGIBLE_MAP, Caveat
from guidedbp.checks.faithfulness import BLUR_SIGMA

#: What a constant map is, as the table and the caveats say it.
CONSTANT = "constant (max_c |map| the same at every pixel), not scored"


def _class_name(labels, target: int) -> str:
    return labels[target] if labels and target < len(labels) else str(target)


def _mean(values: list) -> float | None:
    """The mean to 4 decimals; None (no score) for no value."""
    return round(float(np.mean(values)), 4) if values else None


def mask_rows(scored: dict, labels, masked: tuple[str, ...]) -> list[dict]:
    """Per method and class (then overall): n (the maps against a mask with a pixel),
    how many of them are constant, and the ``masked`` metrics (``pointing``, ``energy``)
    over the others (None where none is left); no row where no mask has a pixel."""
    rows = []
    for method, scores in scored.items():
        classes = sorted({s.target for s in scores})
        for key in [*classes, None] if scores else []:
            chosen = [s for s in scores if key is None or s.target == key]
            kept = [s for s in chosen if not s.constant]
            row = {"method": method,
                   "class": "overall" if key is None else _class_name(labels, key),
                   "n": len(chosen), "constant": len(chosen) - len(kept)}
            if "pointing" in masked:
                row["pointing_game"] = _mean([s.hit for s in kept])
            if "energy" in masked:
                row["energy_inside"] = _mean([s.energy for s in kept])
                if getattr(chosen[0], "energy_reach", None) is not None:
                    row["energy_within_reach"] = _mean([s.energy_reach for s in kept])
            if chosen[0].other_hit is not None and "pointing" in masked:
                row["pointing_game_other"] = _mean([s.other_hit for s in kept])
            rows.append(row)
    return rows


def not_scored(measured, samples: list, masked: bool) -> dict:
    """What no metric scored: per method the names of the images whose map is constant,
    the images whose mask has no pixel (with masks), and a ``negligible-map`` caveat
    record per method with constant maps ("12 of 20 maps constant ...")."""
    constant = {method: [sample.name for sample, flat in zip(samples, flags) if flat]
                for method, flags in measured.constant.items()}
    record: dict = {"constant_maps": constant}
    if masked:
        record["empty_masks"] = list(measured.unmasked)
    record["caveats"] = [
        Caveat(NEGLIGIBLE_MAP, f"{len(names)} of {len(samples)} maps {CONSTANT}",
               method).as_record()
        for method, names in constant.items() if names]
    return record


def faithfulness_record(measured, samples: list, labels) -> dict:
    """The games' JSON: settings, each image and its class, then per method and game the
    mean AUC, each image's AUC and each image's curve (6 decimals)."""
    results = measured.faithfulness
    first = next(iter(results.values()))
    record = {"steps": first.steps, "baseline": first.baseline}
    if first.baseline == "blur":
        record["blur_sigma"] = f"{BLUR_SIGMA:g} x the shorter side"
    record["fractions"] = [round(float(x), 6) for x in first.fractions]
    record["images"] = [{"image": sample.name, "target": int(target),
                         "class": _class_name(labels, int(target))}
                        for sample, target in zip(samples, first.classes)]
    record["methods"] = {
        method: {game: _game_record(curves, measured.constant.get(method))
                 for game, curves in result.games.items()}
        for method, result in results.items()
    }
    return record


def _game_record(curves, constant: list[bool] | None) -> dict:
    """One game's JSON: each image's AUC (None for a constant map: its pixels go in
    row-major order), their mean over the others (None where none is left), each curve as
    measured."""
    flags = constant or [False] * len(curves.aucs)
    aucs = [None if flat else round(float(value), 6) for value, flat in zip(curves.aucs, flags)]
    kept = [float(value) for value, flat in zip(curves.aucs, flags) if not flat]
    return {"mean_auc": round(float(np.mean(kept)), 6) if kept else None, "auc": aucs,
            "curves": [[round(float(value), 6) for value in curve] for curve in curves.curves]}
