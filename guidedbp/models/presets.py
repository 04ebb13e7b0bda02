"""keras-hub preset folders: what ``save_to_preset`` writes, loaded as a model spec.

A preset folder holds ``config.json`` (the backbone's class and config),
``model.weights.h5``, ``metadata.json`` (with ``keras_hub_version``) and, where a
tokenizer or task was saved beside it, ``tokenizer.json`` or ``task.json`` and their
``assets/``. :func:`load_preset` loads the task where there is one (an image classifier
with its head), else the backbone; a two-tower backbone (CLIP, SigLIP) gets the folder's
tokenizer, so that :class:`~guidedbp.targets.Text` prompts work with no further option.
Where the folder holds an ``image_converter.json`` (keras-hub's own presets do: CLIP's
mean and deviation, SigLIP's ``-1..1``), its rescaling goes in front of the model, which
then takes raw 0-255 pixels.
"""

from __future__ import annotations

import json
import os

from guidedbp._extras import needs
from guidedbp._text import one_line
from guidedbp.errors import ArgumentError, ModelLoadError
from guidedbp.models.loaded import NO_RESCALING_NOTE, UNCHECKED_RESCALING_NOTE, LoadedModel

__all__ = ["FORMAT", "is_preset", "load_preset"]

#: The :attr:`~guidedbp.models.loaded.LoadedModel.format` of a model loaded from a preset.
FORMAT = "keras-hub-preset"


def is_preset(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a keras-hub preset folder: ``config.json`` beside a
    ``metadata.json`` that names a keras-hub version (no TensorFlow needed)."""
    metadata = os.path.join(path, "metadata.json")
    if not (os.path.isfile(os.path.join(path, "config.json")) and os.path.isfile(metadata)):
        return False
    try:
        with open(metadata, encoding="utf-8") as handle:
            return "keras_hub_version" in json.load(handle)
    except (OSError, ValueError, TypeError):
        return False


def load_preset(path: str) -> LoadedModel:
    """The model of a keras-hub preset folder (its task, else its backbone), with the
    folder's tokenizer for a two-tower model, and its image converter's rescaling first
    (:func:`_with_converter`).

    Raises:
        ModelLoadError: keras-hub missing, or a folder keras-hub cannot load, in one line.
    """
    try:
        import keras_hub
    except ImportError:
        raise ModelLoadError(f"{path!r} is a keras-hub preset: "
                             f"{needs('keras-hub presets', 'hub')}") from None
    loader = (keras_hub.models.Task if os.path.isfile(os.path.join(path, "task.json"))
              else keras_hub.models.Backbone)
    try:
        model = loader.from_preset(path)
    except Exception as error:  # keras-hub raises many types
        raise ModelLoadError(f"cannot load the keras-hub preset {path!r}: "
                             f"{one_line(error, limit=200)}") from error
    loaded = LoadedModel.from_keras(model, FORMAT, path)
    if os.path.isfile(os.path.join(path, "image_converter.json")):
        _with_converter(loaded, path)
    if loaded.text is not None and loaded.text.tokenize is None \
            and os.path.isfile(os.path.join(path, "tokenizer.json")):
        try:
            loaded.text = loaded.text.with_tokenizer(path, "the preset's tokenizer.json")
        except ArgumentError as error:
            raise ModelLoadError(str(error)) from None
    return loaded


def _with_converter(loaded: LoadedModel, path: str) -> None:
    """Put the preset's image converter's rescaling (``x * scale + offset``, per channel:
    CLIP's mean and deviation, SigLIP's ``-1..1``) in front of ``loaded``'s model, a
    ``Rescaling`` layer of a new Functional model around it: the model then takes raw 0-255
    pixels, as keras-hub's task does through its preprocessor, and the maps are of those
    pixels. The converter's resizing is not taken: guidedbp fits images itself
    (``resize``).

    Raises:
        ModelLoadError: A converter keras-hub cannot load, in one line.
    """
    import keras
    import keras_hub

    try:
        converter = keras_hub.layers.ImageConverter.from_preset(path)
    except Exception as error:  # keras-hub raises many types
        raise ModelLoadError(f"cannot load the image converter of the keras-hub preset "
                             f"{path!r}: {one_line(error, limit=200)}") from error
    scale, offset = getattr(converter, "scale", None), getattr(converter, "offset", None)
    if scale is None and offset is None:
        return  # a converter that only resizes: the model takes raw pixels already
    model = loaded.model
    images = keras.Input(tuple(model.inputs[0].shape[1:]), name="pixels")
    scaled = keras.layers.Rescaling(1.0 if scale is None else scale,
                                    0.0 if offset is None else offset,
                                    name="image_converter")(images)
    loaded.model = keras.Model(images, model(scaled), name=model.name)
    loaded.notes = [note for note in loaded.notes
                    if note not in (NO_RESCALING_NOTE, UNCHECKED_RESCALING_NOTE)]
    loaded.preprocess_source = ("the preset's image converter rescales raw 0-255 pixels "
                                "inside the model")
