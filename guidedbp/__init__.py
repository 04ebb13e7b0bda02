"""guidedbp: guided backpropagation saliency maps for TensorFlow/Keras image classifiers.

TensorFlow is imported only when an engine name is first used, so that
``import guidedbp`` and ``guidedbp --help`` stay instant. The public submodules,
:mod:`guidedbp.targets`, :mod:`guidedbp.plot` and :mod:`guidedbp.checks`, are attributes
too, each imported on first use (none imports TensorFlow).

>>> import guidedbp
>>> guidedbp.METHODS[:3]
('guided', 'vanilla', 'deconvnet')
"""

from __future__ import annotations

__version__ = "0.1.0"

from guidedbp.engine.methods.registry import METHODS  # the registry's names; no TensorFlow

_LAZY = {
    "Explainer": "guidedbp.api",
    "saliency": "guidedbp.api",
    "Explanation": "guidedbp.engine.explainer",
    "Caveat": "guidedbp.caveats",
    "NoReluWarning": "guidedbp.engine.explainer",
    "ValueOutputWarning": "guidedbp.engine.explainer",
    "Report": "guidedbp.engine",
    "reference_saliency": "guidedbp.engine.reference",
    "MethodOptions": "guidedbp.engine.options",
    "RenderOptions": "guidedbp.render.options",
    "RunOptions": "guidedbp.pipeline.options",
    "explain_files": "guidedbp.pipeline.run",
    "explain_image": "guidedbp.pipeline.one_image",
    "ImageExplanation": "guidedbp.pipeline.one_image",
    "Summary": "guidedbp.pipeline.stages",
    "load_model": "guidedbp.models.loading",
    "LoadedModel": "guidedbp.models.loading",
    "GuidedbpError": "guidedbp.errors",
    "ArgumentError": "guidedbp.errors",
    "ModelLoadError": "guidedbp.errors",
}

#: Public submodules, imported when first read as ``guidedbp.NAME``.
_SUBMODULES = ("targets", "plot", "checks")

__all__ = ["METHODS", "__version__", *_LAZY, *_SUBMODULES]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")  # sets the attribute too
    raise AttributeError(f"module 'guidedbp' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | set(_SUBMODULES))
