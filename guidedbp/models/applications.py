"""``keras:NAME`` models: ``keras.applications`` built with ImageNet, random or file weights.

Each application comes with its own preprocessing and, for 1000-class heads, the
ImageNet class names. When the ImageNet weights cannot be downloaded, the message says
which file to put in which folder (Keras' own cache, as Keras decides it).
"""

from __future__ import annotations

import os
import re
import tempfile

from guidedbp._text import one_line
from guidedbp.errors import ModelLoadError
from guidedbp.models import labels as labels_module
from guidedbp.models.loaded import RANDOM_WEIGHTS_NOTE, LoadedModel
from guidedbp.models.preprocess import KERAS_APPLICATIONS

__all__ = ["WEIGHTS_CHOICES", "keras_cache_dir", "load_application"]

#: The named ``weights`` values; anything else is a weights file path.
WEIGHTS_CHOICES = ("imagenet", "none")


def load_application(spec: str, weights: str = "imagenet") -> LoadedModel:
    """Build ``keras:NAME`` (any ``keras.applications`` model, case-insensitive).

    Args:
        spec: ``"keras:NAME"``.
        weights: ``"imagenet"``, ``"none"`` (random weights) or a weights file path.

    Returns:
        A :class:`~guidedbp.models.loaded.LoadedModel` of format ``"keras-application"``
        with the application's preprocessing and, for 1000 classes, ImageNet labels.

    Raises:
        ModelLoadError: For an unknown name (with suggestions), a missing weights file,
            or weights that cannot be downloaded or loaded.
    """
    key = spec.split(":", 1)[1].strip().lower()
    entry = KERAS_APPLICATIONS.get(key)
    if entry is None:
        close = [e.name for k, e in KERAS_APPLICATIONS.items() if k.startswith(key[:4])] or [
            "ResNet50", "MobileNetV2", "EfficientNetB0"
        ]
        raise ModelLoadError(
            f"unknown Keras application {spec!r}: try "
            + ", ".join(f"keras:{name}" for name in close[:6])
        )
    weights_arg = _application_weights(weights)
    import keras

    constructor = getattr(keras.applications, entry.name)
    try:
        model = constructor(weights=weights_arg)
    except Exception as error:  # Keras raises bare Exception for a failed download
        raise ModelLoadError(_weights_error(entry.name, weights, error)) from error
    loaded = LoadedModel.from_keras(model, "keras-application", spec)
    loaded.preprocess = entry.preprocess
    loaded.preprocess_source = f"{entry.name}'s own preprocess_input"
    if model.output_shape[-1] == 1000:
        loaded.labels = labels_module.imagenet_labels()
        loaded.labels_source = "ImageNet-1k class names bundled with guidedbp"
    if weights_arg is None:
        loaded.notes.append(RANDOM_WEIGHTS_NOTE)
    return loaded


def _application_weights(weights: str | None) -> str | None:
    """What the Keras constructor takes: ``"imagenet"``, ``None`` or an existing path."""
    if weights is None or weights.lower() == "none":
        return None
    if weights.lower() == "imagenet":
        return "imagenet"
    if not os.path.isfile(weights):
        raise ModelLoadError(
            f"weights file {weights!r} not found (use {', '.join(WEIGHTS_CHOICES)} or a path)"
        )
    return weights


def _weights_error(name: str, weights: str, error: Exception) -> str:
    if weights.lower() != "imagenet":
        return f"cannot load weights {weights!r} into {name}: {one_line(error, limit=200)}"
    url = re.search(r"https?://\S+?\.h5", str(error))
    cache = os.path.join(keras_cache_dir(), "models")
    # Keras says "URL fetch failure on {url}: {code} -- {reason}"; the URL is named below.
    reason = one_line(re.sub(r"^\s*URL fetch failure on \S+: (?:None -- )?", "", str(error)),
                      limit=200)
    if url:
        filename = url.group(0).rsplit("/", 1)[1]
        where = f"put {filename} (from {url.group(0)}) in {cache}/"
    else:
        where = f"put {name}'s weights file in {cache}/"
    return (
        f"could not download ImageNet weights for {name} ({reason}): "
        f"{where}, or pass weights=PATH"
    )


def keras_cache_dir() -> str:
    """Where ``keras.utils.get_file`` looks for downloads, as Keras itself decides it.

    Keras reads ``KERAS_HOME`` once, when it is imported, and falls back to
    ``/tmp/.keras`` where that folder is not writable.

    Returns:
        The Keras home folder (downloads go to its ``models/`` and ``datasets/``).
    """
    try:
        from keras.src.backend.config import keras_home
    except ImportError:  # a Keras without that private module: its documented default
        home = os.environ.get("KERAS_HOME", os.path.join(os.path.expanduser("~"), ".keras"))
    else:
        home = keras_home()
    home = os.path.expanduser(home)
    if not os.access(home, os.W_OK):
        home = os.path.join("/tmp" if os.path.isdir("/tmp") else tempfile.gettempdir(), ".keras")
    return home
