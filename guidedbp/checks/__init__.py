"""Saliency smoke checks and explanation regression tests: ``guidedbp check``.

Each check is a function of a :class:`~guidedbp.checks.session.CheckSession` (the
loaded model, its images, the maps computed once) returning a
:class:`~guidedbp.checks.results.CheckResult` with a status: ``pass``, ``fail``,
``info`` or ``skip``. The checks use the engine as it is; this package knows
numpy, the engine and the baseline files, nothing about click.

The metric families of ``guidedbp evaluate`` are here too, as numpy functions of maps
and of a model's scores (:mod:`~guidedbp.checks.metrics_catalog` names each metric and
its direction): faithfulness (:func:`mufidelity`, :func:`confidence_change` with
:func:`average_drop`, :func:`average_increase`, :func:`average_gain`, :func:`road`),
robustness (:func:`sensitivity`), complexity (:func:`sparseness`, :func:`complexity`)
and randomisation (:func:`random_logit`).

Importing it does not import TensorFlow.

>>> from guidedbp.checks import CHECK_NAMES
>>> CHECK_NAMES[:4]
('loads', 'relu-coverage', 'finite', 'guided-differs')
"""

from guidedbp.checks.metrics_catalog import CATALOG, HIGHER, LOWER, METRIC_NAMES, MetricInfo
from guidedbp.checks.metrics_fidelity import (
    ConfidenceChange,
    MuFidelitySubsets,
    average_drop,
    average_gain,
    average_increase,
    confidence_change,
    kept_by_map,
    mufidelity,
    mufidelity_subsets,
)
from guidedbp.checks.metrics_properties import complexity, sparseness
from guidedbp.checks.metrics_random_logit import other_classes, random_logit
from guidedbp.checks.metrics_road import RoadCurves, impute_linear, road
from guidedbp.checks.metrics_robustness import Sensitivity, noisy_copies, sensitivity
from guidedbp.checks.results import FAIL, INFO, PASS, SKIP, CheckResult
from guidedbp.checks.session import CheckSession, CheckSettings
from guidedbp.checks.suite import CHECK_NAMES, CHECKS, default_checks, run_checks

__all__ = [
    "CATALOG",
    "CHECKS",
    "CHECK_NAMES",
    "FAIL",
    "HIGHER",
    "INFO",
    "LOWER",
    "METRIC_NAMES",
    "PASS",
    "SKIP",
    "CheckResult",
    "CheckSession",
    "CheckSettings",
    "ConfidenceChange",
    "MetricInfo",
    "MuFidelitySubsets",
    "RoadCurves",
    "Sensitivity",
    "average_drop",
    "average_gain",
    "average_increase",
    "complexity",
    "confidence_change",
    "default_checks",
    "impute_linear",
    "kept_by_map",
    "mufidelity",
    "mufidelity_subsets",
    "noisy_copies",
    "other_classes",
    "random_logit",
    "road",
    "run_checks",
    "sensitivity",
    "sparseness",
]
