"""Load whatever model a TensorFlow user has: .keras, .h5, SavedModel, keras:NAME.

Every loader returns a :class:`LoadedModel`: a callable the engine can trace
(a ``keras.Model``, or a :class:`FrozenGraph` for SavedModels) plus what the
rest of guidedbp needs to know about it: input shape, preprocessing, labels.

Expected failures raise :class:`ModelLoadError` with a one-line message.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from guidedbp._text import one_line
from guidedbp.models import labels as labels_module
from guidedbp.models.preprocess import KERAS_APPLICATIONS, PREPROCESS_MODES

#: Preprocessing applied to models loaded from files unless --preprocess says otherwise:
#: raw 0-255 pixels, right for models that rescale inside (a Rescaling layer).
DEFAULT_FILE_PREPROCESS = "none"
WEIGHTS_CHOICES = ("imagenet", "none")

_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"


class ModelLoadError(Exception):
    """A model could not be loaded; the message is one line meant for the user."""


@dataclass
class LoadedModel:
    """A model ready for the engine, with what the CLI needs to feed and label it.

    Attributes:
        model: A callable ``model(images, training=False) -> (N, classes)`` that the
            engine traces: a ``keras.Model`` or a :class:`FrozenGraph`.
        source: The spec it was loaded from.
        format: ``"keras"``, ``"h5"``, ``"savedmodel"``, ``"keras-application"`` or
            ``"in-memory"``.
        input_shape: ``(H, W, C)``, ``None`` for free dimensions.
        preprocess: A :data:`~guidedbp.models.preprocess.PREPROCESS_MODES` entry.
        preprocess_source: Why that preprocessing was chosen.
        labels: Class names, or ``None``.
        labels_source: Where the names come from.
        notes: Things a user should know before trusting a map.
    """

    model: object
    source: str
    format: str
    input_shape: tuple
    preprocess: str
    preprocess_source: str
    labels: list[str] | None = None
    labels_source: str = "none (class indices only)"
    notes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return getattr(self.model, "name", None) or Path(self.source).stem

    @property
    def input_dtype(self) -> str:
        try:
            dtype = self.model.inputs[0].dtype
        except (AttributeError, IndexError, ValueError):
            return "float32"
        return getattr(dtype, "name", None) or str(dtype)

    @property
    def channels(self) -> int:
        """Image channels the model takes: 1 or 3 (3 where the model leaves it free)."""
        return self.input_shape[2] if self.input_shape[2] in (1, 3) else 3

    def __call__(self, images, training: bool = False):
        return self.model(images, training=training)


class FrozenGraph:
    """A SavedModel signature inlined into one GraphDef, variables frozen to constants.

    Calling it imports the graph into the graph being traced, so every ReLU inside
    the SavedModel's functions is an ordinary op that the engine's gradient swap
    reaches. The GraphDef is built once, at load time.
    """

    #: Constants with more elements than this are lifted out of the GraphDef.
    LIFT_ELEMENTS = 1024

    def __init__(self, graph_def, input_name: str, output_name: str, input_spec, name: str):
        self.graph_def, self._weights = _lift_constants(graph_def, self.LIFT_ELEMENTS)
        self.input_name = input_name
        self.output_name = output_name
        self.inputs = [input_spec]  # what the engine reads the image shape from
        self.name = name
        self._eager_call = None

    def __call__(self, images, training: bool = False):
        import tensorflow as tf

        del training  # a SavedModel signature is already in inference mode
        if tf.executing_eagerly():  # importing a graph needs a graph: trace one, once
            if self._eager_call is None:
                self._eager_call = tf.function(self.__call__, input_signature=self.inputs)
            return self._eager_call(tf.cast(images, self.inputs[0].dtype))
        images = tf.cast(images, self.inputs[0].dtype)
        graph = tf.compat.v1.get_default_graph()
        weights = {name: graph.capture(value) for name, value in self._weights.items()}
        (output,) = tf.graph_util.import_graph_def(
            self.graph_def,
            input_map={self.input_name: images, **weights},
            return_elements=[self.output_name],
            name="savedmodel",
        )
        return output


def _lift_constants(graph_def, min_elements: int):
    """Replace large Const nodes (the frozen weights) by placeholders fed eager tensors.

    Importing a GraphDef copies every constant into the graph being traced, and a
    ResNet50 carries 100 MB of them. Fed as eager tensors instead, the weights are
    captured by reference: tracing is faster and the graph stays small. The values
    are the same, so the maps are too.
    """
    import tensorflow as tf
    from tensorflow.core.framework import graph_pb2

    lifted = graph_pb2.GraphDef()
    lifted.CopyFrom(graph_def)
    weights = {}
    for node in lifted.node:
        if node.op != "Const":
            continue
        shape = [d.size for d in node.attr["value"].tensor.tensor_shape.dim]
        if int(np.prod(shape, dtype=np.int64)) <= min_elements:
            continue
        weights[node.name] = tf.constant(constant_to_placeholder(node))
    return lifted, weights


def constant_to_placeholder(node) -> np.ndarray:
    """Turn a GraphDef ``Const`` node into a ``Placeholder`` in place; return its value."""
    import tensorflow as tf

    value = tf.make_ndarray(node.attr["value"].tensor)
    dtype = node.attr["dtype"]
    node.op = "Placeholder"
    node.ClearField("attr")
    node.attr["dtype"].CopyFrom(dtype)
    node.attr["shape"].shape.CopyFrom(tf.TensorShape(value.shape).as_proto())
    return value


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
) -> LoadedModel:
    """Load a model from a spec: a path, a SavedModel folder or ``keras:NAME``.

    Args:
        spec: ``model.keras``, ``model.h5``, a SavedModel directory, ``keras:NAME``
            (any ``keras.applications`` model, case-insensitive), or a ``keras.Model``.
        signature: SavedModel signature to explain.
        input_key: The signature input holding the image, where it has several.
        output_key: The signature output holding the class scores, where it has several.
        weights: For ``keras:`` models: ``"imagenet"``, ``"none"`` or a weights file.
        unsafe_deserialization: Allow ``Lambda`` layers (their code runs on load).
        custom_objects: A Python file or module name whose Keras classes the
            loader may use.
        preprocess: Override the preprocessing mode.
        labels: A labels file (text, JSON list or index->name JSON object).

    Returns:
        The :class:`LoadedModel`.

    Raises:
        ModelLoadError: With a one-line reason, for anything that cannot be loaded.

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
        loaded = _from_keras_object(spec, "in-memory", getattr(spec, "name", "model"))
    else:
        spec = os.fspath(spec)
        if spec == DEMO_SPEC:
            loaded = _load_demo()
        elif spec.lower().startswith("keras:"):
            loaded = _load_application(spec, weights)
        else:
            loaded = _load_path(spec, signature, input_key, output_key,
                                unsafe_deserialization, custom_objects)
    if preprocess is not None:
        loaded.preprocess, loaded.preprocess_source = preprocess, "--preprocess"
    if labels is not None:
        try:
            loaded.labels = labels_module.load_labels(labels)
        except (OSError, ValueError) as error:
            raise ModelLoadError(_one_line(error)) from error
        loaded.labels_source = os.fspath(labels)
    return loaded


def resolve(model) -> LoadedModel:
    """A :class:`LoadedModel` from anything :func:`load_model` takes (used by the engine)."""
    return model if isinstance(model, LoadedModel) else load_model(model)


# -- the bundled demo model -------------------------------------------------------------

#: The model spec of the bundled shapes classifier (see guidedbp.demo).
DEMO_SPEC = "demo"


def _load_demo() -> LoadedModel:
    from importlib import resources

    data = resources.files("guidedbp.demo").joinpath("data")
    with resources.as_file(data.joinpath("shapes.keras")) as path:
        if not path.is_file():
            raise ModelLoadError(
                "the bundled demo model is missing from this installation: run `make demo-model`"
            )
        loaded = _load_keras_file(str(path), "keras", unsafe=False, objects={})
    loaded.source, loaded.format = DEMO_SPEC, "demo"
    loaded.labels = labels_module.load_labels(data.joinpath("shapes_labels.txt"))
    loaded.labels_source = "the demo model's shape names"
    loaded.preprocess_source = "the demo model rescales raw 0-255 pixels itself"
    loaded.notes = []
    return loaded


# -- keras.applications ------------------------------------------------------------------


def _load_application(spec: str, weights: str) -> LoadedModel:
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
    loaded = _from_keras_object(model, "keras-application", spec)
    loaded.preprocess = entry.preprocess
    loaded.preprocess_source = f"{entry.name}'s own preprocess_input"
    if model.output_shape[-1] == 1000:
        loaded.labels = labels_module.imagenet_labels()
        loaded.labels_source = "ImageNet-1k class names bundled with guidedbp"
    if weights_arg is None:
        loaded.notes.append(
            "random weights (--weights none): maps show the edges a random network "
            "responds to, not an explanation"
        )
    return loaded


def _application_weights(weights: str):
    if weights is None or weights.lower() == "none":
        return None
    if weights.lower() == "imagenet":
        return "imagenet"
    if not os.path.isfile(weights):
        raise ModelLoadError(f"weights file {weights!r} not found (use imagenet, none or a path)")
    return weights


def _weights_error(name: str, weights: str, error: Exception) -> str:
    if weights.lower() != "imagenet":
        return f"cannot load weights {weights!r} into {name}: {_one_line(error)}"
    url = re.search(r"https?://\S+?\.h5", str(error))
    cache = os.path.join(_keras_cache_dir(), "models")
    # Keras says "URL fetch failure on {url}: {code} -- {reason}"; the URL is named below.
    reason = _one_line(re.sub(r"^\s*URL fetch failure on \S+: (?:None -- )?", "", str(error)))
    if url:
        filename = url.group(0).rsplit("/", 1)[1]
        where = f"put {filename} (from {url.group(0)}) in {cache}/"
    else:
        where = f"put {name}'s weights file in {cache}/"
    return (
        f"could not download ImageNet weights for {name} ({reason}): "
        f"{where}, or pass --weights PATH"
    )


def _keras_cache_dir() -> str:
    """Where ``keras.utils.get_file`` looks for downloads, as Keras itself decides it.

    Keras reads ``KERAS_HOME`` once, when it is imported, and falls back to
    ``/tmp/.keras`` where that folder is not writable.
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


# -- files and folders -----------------------------------------------------------------


def _load_path(spec, signature, input_key, output_key, unsafe, custom_objects) -> LoadedModel:
    path = Path(spec)
    if not path.exists():
        raise ModelLoadError(f"model {spec!r} not found")
    if path.is_dir():
        if not (path / "saved_model.pb").is_file() and not (path / "saved_model.pbtxt").is_file():
            raise ModelLoadError(
                f"{spec!r} is a directory but not a SavedModel (it has no saved_model.pb)"
            )
        return _load_saved_model(spec, signature, input_key, output_key)
    with open(path, "rb") as handle:
        head = handle.read(8)
    if not head:
        raise ModelLoadError(f"{spec!r} is empty, not a model file")
    if head.startswith(_HDF5_MAGIC):
        file_format = "h5"
    elif head.startswith(b"PK"):
        file_format = "keras"
    else:
        raise ModelLoadError(_unknown_file_message(spec, path.suffix.lower()))
    objects = _import_custom_objects(custom_objects)
    return _load_keras_file(spec, file_format, unsafe, objects)


def _unknown_file_message(spec: str, suffix: str) -> str:
    if suffix == ".keras":
        return (
            f"{spec!r} is corrupt or not a Keras model: a .keras file is a zip archive, "
            "this is not"
        )
    if suffix in (".h5", ".hdf5"):
        return f"{spec!r} is corrupt or not a Keras model: it is not an HDF5 file"
    return f"{spec!r} is not a model file guidedbp reads (.keras, .h5, or a SavedModel folder)"


def _load_keras_file(spec: str, file_format: str, unsafe: bool, objects: dict) -> LoadedModel:
    import keras

    if file_format == "keras" and not _zip_is_whole(spec):
        raise ModelLoadError(f"{spec!r} is truncated or corrupt: not a readable .keras archive")
    try:
        model = keras.models.load_model(
            spec, custom_objects=objects, compile=False, safe_mode=not unsafe
        )
    except Exception as error:  # Keras raises many types; we classify by message
        raise ModelLoadError(_keras_load_error(spec, error)) from error
    if not isinstance(model, keras.Model):
        raise ModelLoadError(f"{spec!r} holds a {type(model).__name__}, not a Keras model")
    loaded = _from_keras_object(model, file_format, spec)
    return loaded


def _zip_is_whole(path: str) -> bool:
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.testzip() is None
    except (zipfile.BadZipFile, OSError, EOFError):
        return False


def _keras_load_error(spec: str, error: Exception) -> str:
    text = str(error)
    if "Lambda" in text and ("safe_mode" in text or "unsafe" in text):
        return (
            f"{spec!r} contains a Lambda layer, whose code runs when the model loads; "
            "if you trust this file, pass --unsafe-deserialization"
        )
    unknown = re.search(
        r"Unknown (?:layer|object|class)[^'`\"]*['`\"]([\w.>]+)", text
    ) or re.search(r"Could not locate class '([\w.]+)'", text)
    if unknown:
        return (
            f"{spec!r} uses {unknown.group(1)!r}, which is not a known Keras class: "
            "pass --custom-objects FILE_OR_MODULE defining it"
        )
    if "No model config found" in text:
        return (
            f"{spec!r} holds weights only, no model: pass the whole model (.keras, .h5 or "
            "SavedModel), or use it as --weights for the keras:NAME model it belongs to"
        )
    if "config.json" in text and "archive" in text:
        return f"{spec!r} is a zip archive but not a .keras model (it has no config.json)"
    if isinstance(error, (OSError, EOFError)) or "truncated" in text.lower() or "signature" in text:
        return f"{spec!r} is truncated or corrupt: {_one_line(error)}"
    return f"cannot load {spec!r}: {_one_line(error)}"


def _import_custom_objects(source: str | None) -> dict:
    """Import a Python file or module; its Keras classes become loadable."""
    if not source:
        return {}
    try:
        if source.endswith(".py") or os.path.sep in source:
            if not os.path.isfile(source):
                raise ModelLoadError(f"custom objects file {source!r} not found")
            name = "guidedbp_custom_objects_" + re.sub(r"\W", "_", Path(source).stem)
            module_spec = importlib.util.spec_from_file_location(name, source)
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[name] = module
            # Like `python file.py`: the file may import modules that sit beside it.
            folder = os.path.dirname(os.path.abspath(source))
            sys.path.insert(0, folder)
            try:
                module_spec.loader.exec_module(module)
            finally:
                sys.path.remove(folder)
        else:
            module = importlib.import_module(source)
    except ModelLoadError:
        raise
    except Exception as error:
        raise ModelLoadError(
            f"cannot import custom objects {source!r}: {_one_line(error)}"
        ) from error
    import keras

    # Registered classes are found by Keras itself; plain ones by their class name.
    return {
        name: value
        for name, value in vars(module).items()
        if isinstance(value, type) and issubclass(value, (keras.layers.Layer, keras.Model))
    }


def _from_keras_object(model, file_format: str, source: str) -> LoadedModel:
    try:
        inputs = model.inputs
    except (AttributeError, ValueError):
        inputs = None
    if inputs is not None and len(inputs) != 1:
        raise ModelLoadError(
            f"{source!r} has {len(inputs)} inputs; guidedbp explains one image input"
        )
    shape = tuple(inputs[0].shape[1:]) if inputs else (None, None, None)
    if len(shape) != 3:
        raise ModelLoadError(f"{source!r} takes inputs of shape {shape}, not (H, W, C) images")
    loaded = LoadedModel(
        model=model,
        source=source,
        format=file_format,
        input_shape=shape,
        preprocess=DEFAULT_FILE_PREPROCESS,
        preprocess_source="default for model files (raw 0-255 pixels)",
    )
    if file_format != "keras-application" and not _rescales_itself(model):
        loaded.notes.append(
            "no Rescaling/Normalization layer at the input: if the model was trained on "
            "scaled pixels, pass --preprocess scale01|tf|caffe|torch"
        )
    return loaded


def _rescales_itself(model) -> bool:
    import keras

    scalers = (keras.layers.Rescaling, keras.layers.Normalization)
    for layer in model._flatten_layers(include_self=False, recursive=True):
        if isinstance(layer, scalers):
            return True
    return False


# -- SavedModels -------------------------------------------------------------------------


def _load_saved_model(spec, signature, input_key, output_key) -> LoadedModel:
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    try:
        saved = tf.saved_model.load(spec)
    except Exception as error:
        raise ModelLoadError(
            f"{spec!r} is not a readable SavedModel: {_one_line(error)}"
        ) from error
    signatures = dict(saved.signatures)
    if signature not in signatures:
        names = ", ".join(sorted(signatures)) or "none"
        raise ModelLoadError(f"{spec!r} has no signature {signature!r} (it has: {names})")
    function = signatures[signature]
    input_specs = function.structured_input_signature[1]
    in_key = _pick(spec, "input", input_specs, input_key, "--input-key")
    out_key = _pick(spec, "output", function.structured_outputs, output_key, "--output-key")
    input_spec = input_specs[in_key]
    if not input_spec.dtype.is_floating:
        raise ModelLoadError(
            f"{spec!r} takes {input_spec.dtype.name} input {in_key!r}; gradients need a float input"
        )
    if input_spec.shape.rank != 4:
        raise ModelLoadError(
            f"{spec!r} input {in_key!r} has shape {input_spec.shape}, not (N, H, W, C) images"
        )
    try:
        frozen = convert_variables_to_constants_v2(function)
    except Exception as error:
        raise ModelLoadError(f"cannot inline {spec!r}'s graph: {_one_line(error)}") from error
    flat_inputs = tf.nest.flatten(function.structured_input_signature, expand_composites=True)
    flat_names = [s.name for s in flat_inputs]
    placeholder = frozen.inputs[flat_names.index(input_spec.name)]
    # Frozen outputs come in tf.nest's flattening order of the signature's outputs.
    output_keys = tf.nest.flatten({key: key for key in function.structured_outputs})
    output = frozen.outputs[output_keys.index(out_key)]
    graph_def = _prune(frozen.graph.as_graph_def(), output.op.name)
    needed = {node.name for node in graph_def.node}
    if placeholder.op.name not in needed:
        raise ModelLoadError(
            f"{spec!r} output {out_key!r} does not depend on input {in_key!r}: "
            "choose the image input with --input-key"
        )
    others = sorted(
        name for name, tensor in zip(flat_names, frozen.inputs)
        if tensor.op.name != placeholder.op.name and tensor.op.name in needed
    )
    if others:
        raise ModelLoadError(
            f"{spec!r} output {out_key!r} also needs input(s) {', '.join(others)}, which "
            f"guidedbp cannot supply: export a signature whose only input is the image"
        )
    graph = FrozenGraph(
        graph_def,
        input_name=placeholder.name,
        output_name=output.name,
        input_spec=tf.TensorSpec((None, *input_spec.shape[1:]), input_spec.dtype),
        name=Path(spec).name,
    )
    return LoadedModel(
        model=graph,
        source=spec,
        format="savedmodel",
        input_shape=tuple(input_spec.shape[1:]),
        preprocess=DEFAULT_FILE_PREPROCESS,
        preprocess_source="default for model files (raw 0-255 pixels)",
    )


def _pick(spec: str, what: str, mapping: dict, key: str | None, flag: str) -> str:
    keys = ", ".join(sorted(mapping))
    if key is not None:
        if key not in mapping:
            raise ModelLoadError(f"{spec!r} has no {what} {key!r} (it has: {keys})")
        return key
    if len(mapping) != 1:
        raise ModelLoadError(
            f"{spec!r} has {len(mapping)} {what}s ({keys}): choose one with {flag}"
        )
    return next(iter(mapping))


def _prune(graph_def, output_name: str):
    """``graph_def`` cut down to the nodes ``output_name`` depends on, in their order.

    A signature's other outputs (an embedding beside the logits) would otherwise be
    imported too: their ReLUs would show in the report and their inputs would need
    feeding.
    """
    import tensorflow as tf

    inputs = {
        node.name: [name.lstrip("^").split(":")[0] for name in node.input]
        for node in graph_def.node
    }
    needed, pending = set(), [output_name]
    while pending:
        name = pending.pop()
        if name not in needed:
            needed.add(name)
            pending.extend(inputs.get(name, ()))
    pruned = tf.compat.v1.GraphDef()
    pruned.versions.CopyFrom(graph_def.versions)
    pruned.library.CopyFrom(graph_def.library)
    pruned.node.extend(node for node in graph_def.node if node.name in needed)
    return pruned


def _one_line(error: BaseException | str) -> str:
    return one_line(error, limit=200)
