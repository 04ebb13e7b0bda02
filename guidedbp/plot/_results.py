"""What :mod:`guidedbp.plot` reads from a result: its picture and maps at a size, the
methods chosen, and its caption."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from guidedbp._text import layer_note
from guidedbp.errors import ArgumentError
from guidedbp.render.options import OUTPUT_SIZES


def _picture_and_maps(result, size: str, what: str = "result"):
    """The picture and the maps of ``result`` at ``size`` (``"original"`` or ``"model"``)."""
    if size not in OUTPUT_SIZES:
        raise ArgumentError(f"size={size!r} is not one of {', '.join(OUTPUT_SIZES)}")
    missing = [name for name in ("image", "fitted", "maps", "original_maps", "target",
                                 "probability", "label") if not hasattr(result, name)]
    if missing:
        raise ArgumentError(f"{what} must be what guidedbp.explain_image returns; a "
                            f"{type(result).__name__} has no {', '.join(missing)}")
    if size == "original":
        return result.image, result.original_maps()
    return result.fitted, result.maps


def _select(maps: Mapping[str, np.ndarray], methods) -> dict[str, np.ndarray]:
    if methods is None:
        return dict(maps)
    names = methods.split(",") if isinstance(methods, str) else list(methods)
    names = [str(name).strip() for name in names if str(name).strip()]
    unknown = [name for name in names if name not in maps]
    if unknown or not names:
        raise ArgumentError(f"methods={methods!r}: choose from the result's methods, "
                            f"{', '.join(maps) or 'none'}")
    return {name: maps[name] for name in dict.fromkeys(names)}


def _caption(result, methods=()) -> str:
    """The panel's caption: ``"circle (class 0) p=0.998"``, or ``"class 3 p=0.500"``; a
    target that is no class by its label and score (``"unit:0 = 0.823"``: a regressor's
    value, explained for want of a class); then the layer of the class activation maps
    among ``methods`` (``" · gradcam at conv_1"``), where the result names it."""
    note = layer_note(methods, getattr(result, "layers", None) or {})
    explained = getattr(getattr(result, "explanation", None), "target", None)
    if explained is not None and getattr(explained, "kind", "class") != "class":
        return f"{explained.label} = {float(result.explanation.logits[0]):.3g}{note}"
    target, label = int(result.target), result.label
    named_class = f"{label} (class {target})" if label else f"class {target}"
    return f"{named_class} p={float(result.probability):.3f}{note}"


