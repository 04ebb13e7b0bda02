"""The metric families beside the games and the mask metrics: each metric's name, family,
direction and reference, declared once (the CLI's ``--metric`` names, its tables and its
JSON read them here).

>>> CATALOG["sparseness"].direction
'higher is better'
>>> [m.name for m in CATALOG.values() if m.family == "robustness"]
['max-sensitivity', 'avg-sensitivity']
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CATALOG", "HIGHER", "LOWER", "METRIC_NAMES", "MetricInfo"]

HIGHER = "higher is better"
LOWER = "lower is better"


@dataclass(frozen=True)
class MetricInfo:
    """One metric.

    Attributes:
        name: Its ``--metric`` name.
        family: ``faithfulness``, ``robustness``, ``complexity`` or ``randomisation``.
        direction: :data:`HIGHER` or :data:`LOWER`.
        summary: What one image's value is, in a line.
        reference: The paper that defines it.
    """

    name: str
    family: str
    direction: str
    summary: str
    reference: str


_METRICS = (
    MetricInfo("mufidelity", "faithfulness", HIGHER,
               "Pearson correlation of the map's sum over random 9x9-grid subsets with the "
               "logit's drop when they are set to 0 (200 subsets)",
               "Bhatt, Weller and Moura 2020 (IJCAI)"),
    MetricInfo("average-drop", "faithfulness", LOWER,
               "100 * max(0, Y - O) / Y: Y the class probability, O that of the image times "
               "its map normalised to [0, 1]", "Chattopadhay et al. 2018 (WACV, Grad-CAM++)"),
    MetricInfo("average-increase", "faithfulness", HIGHER,
               "100 where O > Y, else 0 (its mean: the share of images, in percent)",
               "Chattopadhay et al. 2018 (WACV, Grad-CAM++)"),
    MetricInfo("average-gain", "faithfulness", HIGHER, "100 * max(0, O - Y) / (1 - Y)",
               "Zhang et al. 2024 (CVIU, Opti-CAM)"),
    MetricInfo("road-morf", "faithfulness", LOWER,
               "mean class probability after removing the top 10..90% of the pixels, "
               "imputed by noisy linear imputation", "Rong et al. 2022 (ICML, ROAD)"),
    MetricInfo("road-lerf", "faithfulness", HIGHER,
               "the same, removing the bottom 10..90% of the pixels",
               "Rong et al. 2022 (ICML, ROAD)"),
    MetricInfo("max-sensitivity", "robustness", LOWER,
               "largest ||map(x + noise) - map(x)|| / ||map(x)|| over 10 uniform noises of "
               "radius 0.1 x the image's range", "Yeh et al. 2019 (NeurIPS)"),
    MetricInfo("avg-sensitivity", "robustness", LOWER, "the same ratio, averaged",
               "Yeh et al. 2019 (NeurIPS)"),
    MetricInfo("sparseness", "complexity", HIGHER,
               "Gini index of the per-pixel magnitudes max_c |map|",
               "Chalasani et al. 2020 (ICML)"),
    MetricInfo("complexity", "complexity", LOWER,
               "entropy of the per-pixel magnitudes normalised to sum 1",
               "Bhatt, Weller and Moura 2020 (IJCAI)"),
    MetricInfo("random-logit", "randomisation", LOWER,
               "Spearman correlation of the map's magnitudes with those of the map of a "
               "random other class", "Sixt, Granz and Landgraf 2020 (ICML)"),
)

#: Name -> :class:`MetricInfo`, in the order the tables list them.
CATALOG = {metric.name: metric for metric in _METRICS}
#: The names, in that order.
METRIC_NAMES = tuple(CATALOG)
