"""Load whatever model a TensorFlow user has: .keras, .h5, SavedModel, keras:NAME.

:func:`load_model` reads a spec, hands it to the loader for its kind
(:mod:`~guidedbp.models.keras_files`, :mod:`~guidedbp.models.savedmodel`,
:mod:`~guidedbp.models.applications`, or the bundled demo model) and applies the
caller's preprocessing and labels. Every loader returns a :class:`LoadedModel`: a
callable the engine can trace (a ``keras.Model``, or a :class:`FrozenGraph` for
SavedModels) plus what the rest of guidedbp needs to know about it.

Expected failures raise :class:`ModelLoadError` with a one-line message.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

from guidedbp._files import regular_file
from guidedbp._text import one_line
from guidedbp.errors import ArgumentError, GuidedbpError, ModelLoadError
from guidedbp.models import labels as labels_module
from guidedbp.models.applications import WEIGHTS_CHOICES, load_application
from guidedbp.models.bundled import BUNDLED
from guidedbp.models.frozen import FrozenGraph, constant_to_placeholder
from guidedbp.models.keras_files import keras_file_format, load_keras_file
from guidedbp.models.loaded import (
    DEFAULT_FILE_PREPROCESS,
    NO_RESCALING_NOTE,
    UNCHECKED_RESCALING_NOTE,
    LoadedModel,
)
from guidedbp.models.preprocess import PREPROCESS_MODES
from guidedbp.models.presets import load_preset, not_a_preset
from guidedbp.models.savedmodel import is_saved_model, load_saved_model

__all__ = [
    "DEFAULT_FILE_PREPROCESS",
    "DEMO_DET_SPEC",
    "DEMO_SEG_SPEC",
    "DEMO_SILU_SPEC",
    "DEMO_SPEC",
    "DEMO_SPECS",
    "WEIGHTS_CHOICES",
    "FrozenGraph",
    "LoadedModel",
    "ModelLoadError",
    "check_model_path",
    "constant_to_placeholder",
    "load_model",
    "resolve",
]

#: The model spec of the bundled shapes classifier (see guidedbp.demo).
DEMO_SPEC = "demo"

#: The model spec of the bundled shapes classifier's SiLU twin: the same network, data
#: and training with SiLU in place of ReLU in its convs (``--activation silu``).
DEMO_SILU_SPEC = "demo-silu"

#: The model spec of the bundled shapes segmentation model: ``(batch, 24, 24, 7)``
#: probabilities of background and the six shapes per 4x4-pixel cell
#: (``python -m guidedbp.demo.train_seg``); explain it with a ``Region`` target.
DEMO_SEG_SPEC = "demo-seg"

#: The model spec of the bundled shapes detector: a dict of ``"boxes"`` ``(batch, 144, 4)``
#: (``x0, y0, x1, y1`` in input pixels) and ``"scores"`` ``(batch, 144, 6)`` (sigmoid
#: probabilities of the six shapes), one proposal per 8x8-pixel cell
#: (``python -m guidedbp.demo.train_det``).
DEMO_DET_SPEC = "demo-det"

#: Each bundled model's spec and the stem of its files in ``guidedbp/demo/data/``
#: (``STEM.keras`` and ``STEM_labels.txt``), from :data:`guidedbp.models.bundled.BUNDLED`.
DEMO_SPECS = {model.spec: model.stem for model in BUNDLED}


def load_model(
    spec,
    *,
    signature: str = "serving_default",
    input_key: str | None = None,
    output_key: str | None = None,
    weights: str = "imagenet",
    unsafe_deserialization: bool = False,
    custom_objects: str | None = None,
    preprocess: str | None = None,
    labels: str | os.PathLike | None = None,
    tokenizer=None,
) -> LoadedModel:
    """Load a model from a spec: a path, a SavedModel folder or ``keras:NAME``.

    Args:
        spec: ``model.keras``, ``model.h5``, a SavedModel directory, a keras-hub preset
            folder (``save_to_preset``: a two-tower CLIP or SigLIP gets its tokenizer
            there), ``keras:NAME``
            (any ``keras.applications`` model, case-insensitive), ``"demo"`` (or
            ``"demo-silu"``, ``"demo-seg"``, ``"demo-det"``), a ``keras.Model`` or a
            :class:`LoadedModel`.
        signature: SavedModel signature to explain.
        input_key: The signature input holding the image, where it has several.
        output_key: The SavedModel signature output to explain; without it, every
            output of a signature with several (the model returns a dict by name, and
            the explainer's ``output=`` picks one).
        weights: For ``keras:`` models: ``"imagenet"``, ``"none"`` or a weights file
            (any other model warns that it is ignored).
        unsafe_deserialization: Allow ``Lambda`` layers (their code runs on load) and
            SavedModel ops off the list of image-classifier ops (files, Python...).
        custom_objects: A Python file or module name whose Keras classes the
            loader may use.
        preprocess: Override the preprocessing mode.
        labels: A labels file (text, JSON list or index->name JSON object).
        tokenizer: For a two-tower model (a keras-hub ``CLIPBackbone`` or
            ``SigLIPBackbone``), the tokenizer of its text prompts, in place of the one
            its preset folder or task holds: a keras-hub tokenizer or preprocessor, a
            preset folder holding ``tokenizer.json``, or a callable ``prompts -> token
            ids``.

    Returns:
        The :class:`LoadedModel`.

    Raises:
        ModelLoadError: With a one-line reason, for anything that cannot be loaded.
            Its message names these parameters (``weights=PATH``), never CLI flags.

    Warns:
        UserWarning: ``weights`` given for a model that is not ``keras:NAME``; ``"demo"``
            while a local file or folder is named ``demo`` (the same for the other
            bundled specs).

    >>> loaded = load_model("keras:MobileNetV2", weights="none")  # doctest: +SKIP
    >>> loaded.preprocess, loaded.input_shape  # doctest: +SKIP
    ('tf', (224, 224, 3))
    """
    if preprocess is not None and preprocess not in PREPROCESS_MODES:
        raise ModelLoadError(
            f"unknown preprocessing {preprocess!r}: choose one of {', '.join(PREPROCESS_MODES)}"
        )
    if isinstance(spec, LoadedModel):
        loaded = spec
    elif callable(spec) and not isinstance(spec, (str, os.PathLike)):
        loaded = LoadedModel.from_keras(spec, "in-memory", getattr(spec, "name", "model"))
    else:
        spec = os.fspath(spec)
        if spec in DEMO_SPECS:
            if os.path.exists(spec):
                warnings.warn(
                    f"using the bundled demo model for {spec!r}, though a local "
                    f"{spec!r} exists here: name it ./{spec} to load that instead",
                    UserWarning, stacklevel=2,
                )
            loaded = _load_demo(spec)
        elif spec.lower().startswith("keras:"):
            loaded = load_application(spec, weights)
        else:
            loaded = _load_path(spec, signature, input_key, output_key,
                                unsafe_deserialization, custom_objects)
    is_application = isinstance(spec, str) and spec.lower().startswith("keras:")
    if str(weights).lower() != "imagenet" and not is_application:
        warnings.warn(
            f"weights={weights!r} applies to keras:NAME models only; ignored for "
            f"{loaded.source!r}",
            UserWarning, stacklevel=2,
        )
    if preprocess is not None:
        loaded.preprocess = preprocess
        loaded.preprocess_source = f"set by preprocess={preprocess!r}"
        # The caller chose: the hint to choose is moot.
        loaded.notes = [note for note in loaded.notes
                        if note not in (NO_RESCALING_NOTE, UNCHECKED_RESCALING_NOTE)]
    if labels is not None:
        try:
            loaded.labels = labels_module.load_labels(labels)
        except (OSError, ValueError) as error:
            raise ModelLoadError(one_line(error, limit=200)) from error
        loaded.labels_source = os.fspath(labels)
    if tokenizer is not None:
        if loaded.text is None:
            raise ModelLoadError(f"tokenizer= applies to a two-tower model (a keras-hub "
                                 f"CLIPBackbone or SigLIPBackbone); {loaded.source!r} has no "
                                 "text tower")
        try:
            loaded.text = loaded.text.with_tokenizer(tokenizer)
        except ArgumentError as error:
            raise ModelLoadError(str(error)) from None
    return loaded


def resolve(model) -> LoadedModel:
    """A :class:`LoadedModel` from anything :func:`load_model` takes (used by the engine).

    Args:
        model: A :class:`LoadedModel` (returned as is) or a :func:`load_model` spec.

    Returns:
        The :class:`LoadedModel`.
    """
    return model if isinstance(model, LoadedModel) else load_model(model)


def check_model_path(spec: str) -> None:
    """What can be known of a model spec without TensorFlow, checked at once: a path
    exists, is readable and is a SavedModel folder or a ``.keras``/``.h5`` file by its
    first bytes (the bundled specs of :data:`DEMO_SPECS` and ``keras:NAME`` pass;
    :func:`load_model` says the rest).

    Raises:
        ModelLoadError: With a one-line reason.
    """
    if spec in DEMO_SPECS or spec.lower().startswith("keras:"):
        return
    path = Path(spec)
    try:
        if not path.exists():
            raise ModelLoadError(f"model {spec!r} not found")
        # a FIFO or device would block the reads below: refuse it unopened
        regular_file(spec, "model", directory_ok=True)
        if path.is_dir():
            why = None if is_saved_model(path) else not_a_preset(path)
            if why is not None and why.startswith("no "):
                raise ModelLoadError(
                    f"{spec!r} is a directory but not a SavedModel (it has no saved_model.pb) "
                    f"nor a keras-hub preset ({why})"
                )
            if why is not None:  # config.json and metadata.json: a preset, a broken one
                raise ModelLoadError(f"{spec!r} is not a keras-hub preset: {why}")
            if not os.access(spec, os.R_OK | os.X_OK):
                raise PermissionError(13, "Permission denied")
        else:
            keras_file_format(spec)
    except ModelLoadError:
        raise
    except GuidedbpError as error:
        raise ModelLoadError(str(error)) from None
    except OSError as error:
        raise ModelLoadError(f"cannot read model {spec!r}: {error.strerror or error}") from None


def _load_path(spec: str, signature, input_key, output_key, unsafe, custom_objects):
    """A file or folder: a SavedModel folder, a keras-hub preset folder, else a Keras
    file."""
    check_model_path(spec)
    if os.path.isdir(spec) and not is_saved_model(spec):
        return load_preset(spec)
    if os.path.isdir(spec):
        return load_saved_model(spec, signature, input_key, output_key, unsafe)
    return load_keras_file(spec, unsafe, custom_objects)


def _load_demo(spec: str = DEMO_SPEC) -> LoadedModel:
    """A bundled model by its spec, a key of :data:`DEMO_SPECS`."""
    from importlib import resources

    stem = DEMO_SPECS[spec]
    data = resources.files("guidedbp.demo").joinpath("data")
    with resources.as_file(data.joinpath(f"{stem}.keras")) as path:
        if not path.is_file():
            which = "demo model" if spec == DEMO_SPEC else f"{spec!r} model"
            raise ModelLoadError(
                f"the bundled {which} is missing from this installation: run `make demo-model`"
            )
        loaded = load_keras_file(str(path))
    loaded.source, loaded.format = spec, "demo"
    loaded.labels = labels_module.load_labels(data.joinpath(f"{stem}_labels.txt"))
    loaded.labels_source = "the demo model's shape names"
    loaded.preprocess_source = "the demo model rescales raw 0-255 pixels itself"
    loaded.notes = []
    return loaded
