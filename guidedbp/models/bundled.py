"""The models that ship inside guidedbp, by spec: one list that the loader, the command
line's help and the documentation read (no TensorFlow, no numpy).

>>> [model.spec for model in BUNDLED]
['demo', 'demo-silu', 'demo-seg', 'demo-det']
>>> model_help()[:46]
'MODEL is a .keras or .h5 file, a SavedModel fo'
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BUNDLED", "BundledModel", "model_help"]


@dataclass(frozen=True)
class BundledModel:
    """One bundled model: its spec, the stem of its files in ``guidedbp/demo/data/``
    (``STEM.keras`` and ``STEM_labels.txt``) and what it is, in a few words."""

    spec: str
    stem: str
    what: str


#: Every bundled model, the default one first (see ``guidedbp/demo/data/SOURCES.md``).
BUNDLED = (
    BundledModel("demo", "shapes", "the shapes classifier"),
    BundledModel("demo-silu", "shapes_silu", "the same with SiLU activations"),
    BundledModel("demo-seg", "shapes_seg", "a shapes segmentation model, explained by region"),
    BundledModel("demo-det", "shapes_det", "a shapes detector, explained by detection"),
)


def model_help() -> str:
    """What a MODEL argument may be, in one paragraph (``guidedbp --help``), the bundled
    models listed from :data:`BUNDLED`."""
    bundled = "; ".join(f"{model.spec}: {model.what}" for model in BUNDLED)
    return ("MODEL is a .keras or .h5 file, a SavedModel folder, a keras-hub preset folder "
            "(save_to_preset; a CLIP or SigLIP one also explains text:PROMPT targets), "
            "keras:NAME for a keras.applications model (keras:ResNet50, keras:MobileNetV2, "
            f"...), or a model bundled with guidedbp ({bundled}).")
