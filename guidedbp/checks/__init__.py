"""Saliency smoke checks and explanation regression tests: ``guidedbp check``.

Each check is a function of a :class:`~guidedbp.checks.session.CheckSession` (the
loaded model, its images, the maps computed once) returning a
:class:`~guidedbp.checks.results.CheckResult` with a status: ``pass``, ``fail``,
``info`` or ``skip``. The checks use the engine as it is; this package knows
numpy, the engine and the baseline files, nothing about click.

Importing it does not import TensorFlow.

>>> from guidedbp.checks import CHECK_NAMES
>>> CHECK_NAMES[:4]
('loads', 'relu-coverage', 'finite', 'guided-differs')
"""

from guidedbp.checks.results import FAIL, INFO, PASS, SKIP, CheckResult
from guidedbp.checks.session import CheckSession, CheckSettings
from guidedbp.checks.suite import CHECK_NAMES, CHECKS, default_checks, run_checks

__all__ = [
    "CHECKS",
    "CHECK_NAMES",
    "FAIL",
    "INFO",
    "PASS",
    "SKIP",
    "CheckResult",
    "CheckSession",
    "CheckSettings",
    "default_checks",
    "run_checks",
]
