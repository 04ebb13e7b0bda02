"""guidedbp: guided backpropagation saliency maps for TensorFlow/Keras image classifiers.

TensorFlow is imported only when an engine name is first used, so that
``import guidedbp`` and ``guidedbp --help`` stay instant.

>>> import guidedbp
>>> guidedbp.METHODS[:3]
('guided', 'vanilla', 'deconvnet')
"""

from __future__ import annotations

__version__ = "0.1.0"

#: Attribution methods, in the order the CLI lists them.
METHODS = ("guided", "vanilla", "deconvnet", "gradcam", "guided-gradcam", "integrated-gradients")

_LAZY = {
    "Explainer": "guidedbp.engine.explainer",
    "Explanation": "guidedbp.engine.explainer",
    "NoReluWarning": "guidedbp.engine.explainer",
    "saliency": "guidedbp.engine.explainer",
    "Report": "guidedbp.engine._graph",
    "reference_saliency": "guidedbp.engine.reference",
    "load_model": "guidedbp.models.loading",
    "LoadedModel": "guidedbp.models.loading",
    "ModelLoadError": "guidedbp.models.loading",
}

__all__ = ["METHODS", "__version__", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'guidedbp' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
