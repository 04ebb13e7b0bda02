"""The engine room: TensorFlow gradients, nothing about files or images on disk.

The names other rooms use are public here; TensorFlow is imported only when one of
them that needs it is first read, so importing the package stays instant.

>>> from guidedbp.engine import format_counts
>>> format_counts({"sigmoid": 16, "silu": 49})
'silu 49, sigmoid 16'
"""

from __future__ import annotations

_LAZY = {
    "as_images": "guidedbp.engine.inputs",
    "RELU_OPS": "guidedbp.engine.rules.relu",
    "format_counts": "guidedbp.engine.graph.report",
    "Report": "guidedbp.engine.graph.report",
    "layer_choices": "guidedbp.engine.graph.layers",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'guidedbp.engine' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
