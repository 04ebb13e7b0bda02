"""What made a run's maps: the ``made_by`` every manifest record of the run carries.

Built once per run, on the driver (:func:`made_by`), and shipped in the
:class:`~guidedbp.pipeline.stages.Plan` to every stage, Ray workers included. Its parts
(:mod:`guidedbp.io.made_by`):

- ``weights``: the model's content digest (:func:`model_digest`),
  not its path: the same file copied elsewhere, or saved again, is the same model.
- ``maths``: :data:`guidedbp.engine.methods.registry.MATHS_VERSION`.
- ``options``: a digest of what changes a map: the methods, the options of their groups
  (``method(name).options``, with ``precision``, the guide and SmoothGrad's noise, seed and
  copies, which apply to every method), the preprocessing, ``size`` and ``resize``, and the
  SavedModel signature and keys or custom objects file the model was loaded with. Not the
  batch size (a map's last bits at most), nor the options of methods the run does not
  use. Classes, targets, the model output and mask contents are compared apart
  (:mod:`guidedbp.pipeline.resume`).
- ``render``: a digest of what changes a picture: the renders, colormap, clip, alpha,
  output size, panel tile, the figure format and its dpi, and the class names (captions).
- ``drawing``: :data:`guidedbp.render.DRAWING_VERSION`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os

import numpy as np

from guidedbp.engine.methods.registry import MATHS_VERSION, method
from guidedbp.errors import ModelLoadError
from guidedbp.models.digest import DIGEST_LENGTH, file_digest, folder_digest, keras_digest
from guidedbp.models.loading import DEMO_SPECS
from guidedbp.models.presets import FORMAT as PRESET_FORMAT
from guidedbp.pipeline.options import RunOptions
from guidedbp.render import DRAWING_VERSION

#: The method option groups every method reads: SmoothGrad wraps any method, and the
#: guide applies wherever guided gradients are taken.
_EVERY_METHOD = ("guided", "smoothgrad")
#: Model loading options that choose which function of a model is explained, with the
#: values that choose nothing (so that naming the default changes no fingerprint).
_LOADING = {"signature": "serving_default", "input_key": None, "output_key": None,
            "custom_objects": None, "tokenizer": None}


def made_by(loaded, options: RunOptions, load: dict | None = None,
            model: str | None = None) -> dict:
    """The ``made_by`` field of the records of a run of ``options`` on ``loaded``.

    Args:
        loaded: The run's :class:`~guidedbp.models.loaded.LoadedModel`.
        options: The run's :class:`~guidedbp.pipeline.options.RunOptions`.
        load: The keyword arguments ``loaded`` was loaded with.
        model: The model as the run names it; ``None``: ``loaded``'s source.

    Raises:
        ModelLoadError: The model's file or folder cannot be read.
    """
    labels = None if loaded.labels is None else list(loaded.labels)
    if model is None:
        model = loaded.source if loaded.format != "in-memory" else f"in-memory {loaded.source}"
    try:
        weights = model_digest(loaded)
    except OSError as error:  # loaded a moment ago: moved or made unreadable since
        raise ModelLoadError(f"cannot read model {loaded.source!r} again to fingerprint it: "
                             f"{error.strerror or error}") from None
    return {"model": model, "weights": weights, "maths": MATHS_VERSION,
            "options": digest(map_options(options, loaded.preprocess, load)),
            "render": digest(render_options(options, labels)), "drawing": DRAWING_VERSION}


def model_digest(loaded) -> str | None:
    """The content digest of a :class:`~guidedbp.models.loaded.LoadedModel`
    (:mod:`guidedbp.models.digest`): its file, its SavedModel folder, the bundled demo
    model's file, or its weights and architecture in memory.

    Returns:
        ``DIGEST_LENGTH`` hex digits, or ``None`` for a model whose content cannot be
        read (a callable with no weights): a resumed run recomputes its maps.

    Raises:
        OSError: The model's file or folder cannot be read.
    """
    if loaded.format in ("keras", "h5"):
        return file_digest(loaded.source)
    if loaded.format == "savedmodel":
        return folder_digest(loaded.source)
    if loaded.format == PRESET_FORMAT:  # its tokenizer's files too
        return folder_digest(loaded.source, skip=("metadata.json",))
    if loaded.format == "demo":
        from importlib import resources

        data = resources.files("guidedbp.demo").joinpath("data")
        with resources.as_file(data.joinpath(f"{DEMO_SPECS[loaded.source]}.keras")) as path:
            return file_digest(str(path))
    if loaded.text is not None:  # both towers: the text's makes the prompts' embeddings
        return keras_digest(loaded.text.backbone)
    return keras_digest(loaded.model)


def map_options(options: RunOptions, preprocess: str, load: dict | None = None) -> dict:
    """Every option of ``options`` that changes a map of its methods, by name."""
    chosen = options.method
    groups = set(_EVERY_METHOD).union(*(method(name).options for name in options.methods))
    values = {"methods": list(options.methods), "precision": chosen.precision,
              "preprocess": preprocess, "size": options.inputs.size,
              "resize": options.inputs.resize}
    for group in sorted(groups):
        values[group] = dataclasses.asdict(getattr(chosen, group))
    loading = {name: (load or {}).get(name, default) for name, default in _LOADING.items()}
    custom = loading["custom_objects"]
    if isinstance(custom, (str, os.PathLike)) and os.path.isfile(custom):
        loading["custom_objects"] = file_digest(custom)  # its code, not its path
    tokenizer = loading["tokenizer"]
    if isinstance(tokenizer, (str, os.PathLike)) and os.path.isdir(tokenizer):
        loading["tokenizer"] = folder_digest(tokenizer)  # its vocabulary, not its path
    elif tokenizer is not None and not isinstance(tokenizer, (str, os.PathLike)):
        loading["tokenizer"] = type(tokenizer).__name__  # an object: its kind, at least
    values["loading"] = {name: value for name, value in loading.items()
                         if value != _LOADING[name]}
    return values


def render_options(options: RunOptions, labels: list | None) -> dict:
    """Every option of ``options`` that changes a picture of a map, and the class names
    its captions show."""
    figure = options.output.figure
    return {**dataclasses.asdict(options.render), "figure": figure,
            "dpi": options.output.dpi if figure else None, "labels": labels}


def digest(values: dict) -> str:
    """A short digest of ``values`` as canonical JSON: ``3.0`` and ``3`` are one number, a
    tuple is a list, an array is its dtype, shape and bytes."""
    text = json.dumps(_canonical(values), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:DIGEST_LENGTH]


def _canonical(value):
    if isinstance(value, dict):
        return {str(key): _canonical(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(item) for item in value]
    if isinstance(value, np.ndarray):
        array = np.ascontiguousarray(value)
        return {"dtype": array.dtype.str, "shape": list(array.shape),
                "sha256": hashlib.sha256(array.reshape(-1).view(np.uint8)).hexdigest()}
    if isinstance(value, np.generic):
        return _canonical(value.item())
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return value
