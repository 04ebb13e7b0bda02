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
import math
import os
import re

from guidedbp._extras import needs
from guidedbp._text import one_line
from guidedbp.errors import ArgumentError, ModelLoadError
from guidedbp.models.loaded import (
    MAX_INPUT_ELEMENTS,
    NO_RESCALING_NOTE,
    UNCHECKED_RESCALING_NOTE,
    LoadedModel,
)

__all__ = ["FORMAT", "MAX_LAYER_WEIGHTS", "MAX_VOCABULARY", "check_sizes", "is_preset",
           "load_preset", "not_a_preset"]

#: The :attr:`~guidedbp.models.loaded.LoadedModel.format` of a model loaded from a preset.
FORMAT = "keras-hub-preset"
#: The largest vocabulary a preset's config may ask for: four times keras-hub's largest
#: (Gemma's 262,144 tokens).
MAX_VOCABULARY = 2**20
#: The most weights one layer of a preset's config may have (4 GiB as float32): more than
#: any image or text tower keras-hub ships (a 262,144-token vocabulary of width 2,304).
MAX_LAYER_WEIGHTS = 2**30
#: The counts of a preset's config that size a layer beside its ``*_dim`` widths.
_COUNTS = ("vocabulary_size", "max_sequence_length", "num_classes")
#: A width of a block's MLP (``intermediate_dim``, ``mlp_dim``): no table has it.
_MLP = re.compile(r"intermediate|mlp|ffn|feedforward")


def is_preset(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a keras-hub preset folder: ``config.json`` beside a
    ``metadata.json`` that names a keras-hub version (no TensorFlow needed)."""
    return not_a_preset(path) is None


def not_a_preset(path: str | os.PathLike) -> str | None:
    """Why the folder ``path`` is no keras-hub preset (one line, naming the file at
    fault), or ``None`` for a preset: ``config.json`` beside a ``metadata.json`` that
    names a keras-hub version."""
    missing = [name for name in ("config.json", "metadata.json")
               if not os.path.isfile(os.path.join(path, name))]
    if missing:
        return f"no {' and no '.join(missing)}"
    metadata = os.path.join(path, "metadata.json")
    try:
        with open(metadata, encoding="utf-8") as handle:
            found = json.load(handle)
    except OSError as error:
        return f"its metadata.json cannot be read ({error.strerror or error})"
    except ValueError as error:  # not UTF-8, or not JSON
        return f"its metadata.json is malformed: {one_line(error, limit=120)}"
    if not isinstance(found, dict) or "keras_hub_version" not in found:
        return "its metadata.json names no keras_hub_version"
    return None


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
    check_sizes(path)  # before keras-hub builds (and allocates) what the configs ask for
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


def check_sizes(path: str) -> None:
    """Refuse, before anything is built, a preset whose ``config.json`` (or ``task.json``)
    asks for more than any image model needs, which keras-hub would allocate before
    failing: an image input of more than
    :data:`~guidedbp.models.loaded.MAX_INPUT_ELEMENTS` values (``image_shape``,
    ``image_size``, as a model file's declared input), a vocabulary of more than
    :data:`MAX_VOCABULARY` tokens, or a layer of more than :data:`MAX_LAYER_WEIGHTS`
    weights: a table (a config's ``vocabulary_size``, ``max_sequence_length``,
    ``num_classes`` or image patches by one of its ``*_dim`` widths) or a dense layer
    (its two largest widths).

    Raises:
        ModelLoadError: One line naming the file, the field and the bound.
    """
    for name in ("config.json", "task.json"):
        file = os.path.join(path, name)
        if not os.path.isfile(file):
            continue
        try:
            with open(file, encoding="utf-8") as handle:
                config = json.load(handle)
        except (OSError, ValueError) as error:
            raise ModelLoadError(f"cannot load the keras-hub preset {path!r}: its {name} "
                                 f"cannot be read: {one_line(error, limit=120)}") from None
        for found in _configs(config):
            reason = _too_large(found, name)
            if reason is not None:
                raise ModelLoadError(f"cannot load the keras-hub preset {path!r}: its "
                                     f"{reason}; refused before building it")


def _configs(value):
    """Every dict in a JSON value, nested ones too (a backbone's encoders' configs)."""
    if isinstance(value, dict):
        yield value
        for item in value.values():
            yield from _configs(item)
    elif isinstance(value, list):
        for item in value:
            yield from _configs(item)


def _size(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _too_large(config: dict, where: str) -> str | None:
    """What ``config`` (one dict of a preset's config) asks for beyond the bounds of
    :func:`check_sizes`, or ``None``."""
    shape = config.get("image_shape")
    side = config.get("image_size")
    if _size(side) is not None:
        shape = (side, side, 3)
    elif isinstance(side, list) and len(side) == 2:
        shape = (*side, 3)
    if not (isinstance(shape, list | tuple) and all(_size(v) or v is None for v in shape)):
        shape = None
    elif math.prod(side or 1 for side in shape) > MAX_INPUT_ELEMENTS:
        return (f"{where} asks for an image input of shape {tuple(shape)} "
                f"({math.prod(side or 1 for side in shape):,} values), more than guidedbp "
                f"traces ({MAX_INPUT_ELEMENTS:,}, e.g. 4729x4729x3)")
    vocabulary = _size(config.get("vocabulary_size"))
    if vocabulary is not None and vocabulary > MAX_VOCABULARY:
        return (f"{where} asks for a vocabulary of {vocabulary:,} tokens, more than guidedbp "
                f"builds ({MAX_VOCABULARY:,})")
    counts = [(_size(config.get(key)), key) for key in _COUNTS]
    patch = _size(config.get("patch_size"))
    if shape is not None and patch and all(_size(v) for v in shape[:2]):
        counts.append(((shape[0] // patch) * (shape[1] // patch), "image patches"))
    widths = [(_size(value), key) for key, value in config.items() if key.endswith("_dim")]
    # A table (tokens, positions, patches or classes by a width), and a dense layer (the
    # two widest widths, an MLP's among them).
    tables = [(count, width) for count in counts for width in widths
              if count[0] and width[0] and not _MLP.search(width[1])]
    widest = sorted((width for width in widths if width[0]), reverse=True)[:2]
    for (first, one), (second, other) in [*tables, *([widest] if len(widest) == 2 else [])]:
        if first * second > MAX_LAYER_WEIGHTS:
            return (f"{where} asks for a layer of {one} {first:,} by {other} {second:,} "
                    f"({first * second:,} weights), more than guidedbp builds "
                    f"({MAX_LAYER_WEIGHTS:,})")
    return None


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
