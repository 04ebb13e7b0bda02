"""Mixed precision: the model's passes in bfloat16 (or float16), float32 where it matters.

``precision="mixed"`` traces a copy of the caller's Keras model whose layers are rebuilt
from their configs under Keras' ``mixed_bfloat16`` (or ``mixed_float16``) policy, with
the caller's weights: variables stay float32, each layer computes in the low precision.
The caller's model is never touched. Float32 stays where it matters:

- the output layers (logits and head): scores and probabilities are float32, as Keras'
  mixed-precision guide asks of a model's last layer;
- the layers that read or write at least half the input's resolution (the stem: the
  first convolutions and the max pooling after them). The maps are at the input's
  resolution, and there rounding to 8 bits of mantissa moves max-pooling switches to
  a neighbouring pixel (near ties become ties): on ResNet50 (random weights) guided
  maps correlate 0.9998 with float32's with ``conv1`` and ``pool1`` in float32, 0.98 to
  0.99 with ``pool1`` in bfloat16. The deeper layers' errors are smoothed over their
  receptive fields;
- the input gradient: the images are float32, so is their gradient (through the cast
  the first low-precision layer makes), and so are the maps; SmoothGrad and integrated
  gradients sum those maps in float64 (:mod:`guidedbp.engine.methods.averaging`).

Each batch normalization that follows a convolution is folded into it: the copy's
convolution computes with ``kernel * scale`` and ``bias * scale + shift``, where
``scale = gamma / sqrt(moving_variance + epsilon)`` and
``shift = beta - moving_mean * scale``, the inference-mode transform Keras applies, and
the normalization becomes an identity. Keras computes batch normalization in float32 and
casts around it (two casts a layer, forward and backward); folded, ResNet50 runs 1.1x
faster in bfloat16. In float32 the folded model equals the model to rounding.

The guided rules apply to the copy's ops as to the model's own: the same ``Relu`` and
activation ops, in bfloat16. Mixed precision is offered only where the hardware runs
it fast (:func:`fast_dtype`): elsewhere it would be slower than float32, not faster.
float16 (GPUs of compute capability 7.x) runs without loss scaling: the score's
gradient starts at 1, so nothing overflows, and the gradients that fall below float16's
range (6e-8) are the map's smallest values.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from guidedbp.errors import ArgumentError

#: The low-precision dtypes, by what the hardware offers.
BFLOAT16, FLOAT16 = "bfloat16", "float16"
#: ``/proc/cpuinfo`` flags of CPUs with bfloat16 dot products (AVX512-BF16, Intel AMX).
CPU_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
#: GPU compute capabilities with fast float16 (tensor cores, Volta) and bfloat16 (Ampere).
GPU_FLOAT16, GPU_BFLOAT16 = (7, 0), (8, 0)
#: Layers reading or writing at least this share of the input's height and width run
#: in float32.
STEM_RESOLUTION = 0.5


def cpu_flags() -> frozenset[str] | None:
    """The CPU's feature flags (Linux' ``/proc/cpuinfo``), or ``None`` where not known."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return None


def gpu_capability() -> tuple[int, int] | None:
    """The compute capability of the GPU TensorFlow places ops on (its first), or
    ``None`` without a GPU."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return None
    details = tf.config.experimental.get_device_details(gpus[0])
    capability = details.get("compute_capability")
    return tuple(capability) if capability else (0, 0)


def fast_dtype() -> str:
    """The low-precision dtype this machine runs fast: on a GPU (where TensorFlow puts
    the ops when it sees one) bfloat16 from compute capability 8.0, float16 from 7.0; on
    a CPU bfloat16, with AVX512-BF16 or AMX and oneDNN.

    Raises:
        ArgumentError: The hardware has no fast path for either.
    """
    capability = gpu_capability()
    if capability is not None:
        if capability >= GPU_BFLOAT16:
            return BFLOAT16
        if capability >= GPU_FLOAT16:
            return FLOAT16
        raise ArgumentError(
            f"precision='mixed' needs a GPU of compute capability 7.0 or more, and this "
            f"one has {capability[0]}.{capability[1]}: use precision='float32'")
    flags = cpu_flags()
    if flags is None:
        raise ArgumentError(
            "precision='mixed' needs bfloat16 instructions (AVX512-BF16 or AMX), and this "
            "CPU's cannot be read (no /proc/cpuinfo): use precision='float32'")
    if not flags & CPU_BF16_FLAGS:
        raise ArgumentError(
            "precision='mixed' needs a CPU with bfloat16 instructions (AVX512-BF16 or AMX) "
            "or a GPU, and this machine has neither: bfloat16 would be slower than "
            "float32 here; use precision='float32'")
    if os.environ.get("TF_ENABLE_ONEDNN_OPTS", "").strip() in ("0", "false", "False"):
        raise ArgumentError(
            "precision='mixed' runs bfloat16 on CPUs through oneDNN, which "
            "TF_ENABLE_ONEDNN_OPTS=0 turns off: use precision='float32'")
    return BFLOAT16


def low_precision_model(model, dtype: str) -> LowPrecisionCopy:
    """A copy of the Keras ``model`` computing in ``dtype`` (see the module's notes),
    reading ``model``'s weights at every call; ``model`` is not changed.

    Raises:
        ArgumentError: ``model`` is not a Functional or Sequential Keras model, or a
            layer cannot be rebuilt from its config.
    """
    _check_rebuildable(model)
    name = getattr(model, "name", None) or "the model"
    image_shape = tuple(model.inputs[0].shape[1:]) if len(model.inputs) == 1 else ()
    probe = None
    if len(image_shape) == 3:  # free sides: shares measured on a 224x224 probe
        probe = (1, *(side or 224 for side in image_shape[:2]), image_shape[2])
    try:
        folds: list[Fold] = []
        copy = _rebuilt(model, f"mixed_{dtype}", True, probe, probe[1:3] if probe else None,
                        folds)
        refreshed = LowPrecisionCopy(copy, model, folds)
        refreshed.refresh()  # eagerly, once: the copy holds the weights from the start
    except Exception as error:  # a layer whose config does not rebuild it, ...
        message = " ".join(str(error).split())[:200]
        raise ArgumentError(
            f"precision='mixed' could not rebuild {name} in {dtype} "
            f"({type(error).__name__}: {message}): use precision='float32'") from error
    return refreshed


@dataclass(frozen=True)
class Fold:
    """A batch normalization folded into the convolution before it.

    Attributes:
        copy: The copy's convolution (with a bias), computing both.
        convolution: The model's convolution.
        normalization: The model's ``BatchNormalization`` after it.
    """

    copy: object
    convolution: object
    normalization: object

    def weights(self) -> tuple:
        """The folded ``(kernel, bias)`` from the model's current weights (ops, when
        tracing)."""
        import tensorflow as tf

        norm = self.normalization
        scale = tf.math.rsqrt(norm.moving_variance.value + norm.epsilon)
        if norm.scale:
            scale = scale * norm.gamma.value
        shift = -norm.moving_mean.value * scale
        if norm.center:
            shift = shift + norm.beta.value
        kernel = self.convolution.kernel.value
        if self.convolution.use_bias:
            shift = shift + self.convolution.bias.value * scale
        # a depthwise kernel (h, w, in, multiplier) writes channel in * multiplier + m
        return kernel * tf.reshape(scale, kernel.shape[-2:] if _is_depthwise(
            self.convolution) else (-1,)), shift

    def sources(self) -> list:
        """The model's variables the fold reads."""
        return [*self.convolution.weights, *self.normalization.weights]


class LowPrecisionCopy:
    """A low-precision copy of a Keras model that computes with the model's current
    weights: each call first assigns them to the copy's variables (in a traced function,
    ops of its graph: 100 MB of ResNet50 weights take about 5 ms on a CPU), so a model
    trained after the explainer was made (a Keras callback's) is explained as it is now.
    Every other attribute is the copy's (``inputs``, ``layers``, ``output_names``...).

    Attributes:
        copy: The rebuilt ``keras.Model``.
        folds: The batch normalizations folded into convolutions.
    """

    def __init__(self, copy, model, folds: list[Fold] = ()):
        self.copy = copy
        self.folds = list(folds)
        folded = {id(weight) for fold in self.folds for weight in fold.copy.weights}
        read = {id(weight) for fold in self.folds for weight in fold.sources()}
        mine = [weight for weight in copy.weights if id(weight) not in folded]
        theirs = [weight for weight in model.weights if id(weight) not in read]
        by_path = {_path(weight): weight for weight in theirs}
        if len(by_path) == len(theirs) == len(mine) and all(_path(w) in by_path for w in mine):
            self._pairs = [(weight, by_path[_path(weight)]) for weight in mine]
        else:  # paths not unique: the layers' order, which the copy keeps
            self._pairs = list(zip(mine, theirs))
        mismatched = [_path(a) for a, b in self._pairs if tuple(a.shape) != tuple(b.shape)]
        if len(mine) != len(theirs) or mismatched:
            raise ValueError(f"the copy's weights do not match the model's: {mismatched[:3]}")

    def refresh(self) -> None:
        """Assign the model's weights to the copy's variables (as ops, when tracing)."""
        for mine, theirs in self._pairs:
            mine.assign(theirs.value)
        for fold in self.folds:
            kernel, bias = fold.weights()
            fold.copy.kernel.assign(kernel)
            fold.copy.bias.assign(bias)

    def __call__(self, images, training: bool = False):
        if training:  # folded batch normalizations hold the inference transform only
            raise ValueError("a low-precision copy computes in inference mode only")
        self.refresh()
        return self.copy(images, training=False)

    def __getattr__(self, name: str):
        if name == "copy":  # not set yet (a copy of this object being made)
            raise AttributeError(name)
        return getattr(self.copy, name)


def _path(weight) -> str:
    return getattr(weight, "path", None) or weight.name


def _check_rebuildable(model) -> None:
    import keras

    name = getattr(model, "name", None) or "the model"
    if not isinstance(model, keras.Model):
        raise ArgumentError(
            f"precision='mixed' rebuilds a Keras model's layers in low precision, and "
            f"{name} is a {type(model).__name__}, not a keras.Model (a SavedModel loads as "
            "a frozen TensorFlow graph, which cannot be converted): use precision='float32'")
    if not _is_graph_model(model):
        raise ArgumentError(
            f"precision='mixed' rebuilds Functional and Sequential Keras models layer by "
            f"layer, and {name} is a subclassed {type(model).__name__}: use "
            "precision='float32'")


def _is_graph_model(layer) -> bool:
    """Whether ``layer`` is a Functional or Sequential model (cloned layer by layer)."""
    import keras
    from keras.src.models.functional import Functional

    return isinstance(layer, (Functional, keras.Sequential))


def _rebuilt(model, policy: str, outputs: bool, probe: tuple | None,
             reference: tuple | None, folds: list[Fold]):
    """``model`` cloned with each layer rebuilt from its config: in ``policy``, or in
    float32 where the module's notes say, with batch normalizations folded into the
    convolutions before them (each appended to ``folds``). ``outputs``: ``model``'s
    output layers are the explained model's; ``probe``: the shape of an input of
    ``model`` when the explained model reads images of ``reference`` ``(H, W)``
    (``None``: not known)."""
    import keras

    output_layers = ({id(tensor._keras_history.operation) for tensor in model.outputs}
                     if outputs else set())
    shares = _shares(model, probe, reference)
    foldable = _foldable(model)  # id(convolution) -> its normalization
    normalizations = {id(norm) for norm in foldable.values()}

    def rebuild(layer):
        if _is_graph_model(layer):  # a nested model: its own layers rebuilt
            return _rebuilt(layer, policy, id(layer) in output_layers,
                            _nested_probe(layer, reference), reference, folds)
        config = layer.get_config()
        if id(layer) not in output_layers and shares.get(id(layer), 1.0) < STEM_RESOLUTION:
            config = {**config, "dtype": policy}
        if id(layer) in normalizations:
            # a Lambda: the normalization's call passes a mask, Identity takes none
            return keras.layers.Lambda(_unchanged, name=config["name"], dtype=config["dtype"])
        if id(layer) in foldable:
            copy = type(layer).from_config({**config, "use_bias": True})
            folds.append(Fold(copy, layer, foldable[id(layer)]))
            return copy
        return type(layer).from_config(config)

    return keras.models.clone_model(model, clone_function=rebuild)


def _unchanged(tensor, mask=None):
    """A folded batch normalization: its input, unchanged."""
    return tensor


def _is_depthwise(layer) -> bool:
    import keras

    return isinstance(layer, keras.layers.DepthwiseConv2D)


def _foldable(model) -> dict:
    """``model``'s convolutions whose output only a batch normalization reads, in the
    inference transform on their channels (``id(convolution)`` -> normalization).

    Only the plain Keras layers fold (``Conv2D``, ``DepthwiseConv2D``, channels last,
    no activation, called once; ``BatchNormalization`` on the last axis, called once):
    subclasses may compute something else."""
    import keras

    consumers: dict[int, int] = {}  # id(tensor) -> how many layer calls read it
    for layer in model.layers:
        for node in getattr(layer, "_inbound_nodes", []):
            for tensor in node.input_tensors:
                consumers[id(tensor)] = consumers.get(id(tensor), 0) + 1
    for tensor in model.outputs:
        consumers[id(tensor)] = consumers.get(id(tensor), 0) + 1
    folds = {}
    for norm in model.layers:
        if (type(norm) is not keras.layers.BatchNormalization
                or len(getattr(norm, "_inbound_nodes", [])) != 1
                or norm.axis not in (-1, len(norm.input.shape) - 1)
                or getattr(norm, "renorm", False)):
            continue
        history = getattr(norm.input, "_keras_history", None)
        conv = history.operation if history is not None else None
        if (type(conv) not in (keras.layers.Conv2D, keras.layers.DepthwiseConv2D)
                or len(conv._inbound_nodes) != 1 or conv.data_format != "channels_last"
                or conv.get_config().get("activation") != "linear"
                or consumers.get(id(conv.output)) != 1):
            continue
        folds[id(conv)] = norm
    return folds


def _nested_probe(model, reference: tuple | None) -> tuple | None:
    """A probe for a nested model's image input: its declared sides, free ones the
    explained model's (a backbone reads the images, maybe rescaled); ``None`` for an
    input that is not an image (a head: its layers keep float32)."""
    shape = tuple(model.inputs[0].shape) if len(model.inputs) == 1 else ()
    if reference is None or len(shape) != 4 or shape[3] is None:
        return None
    return (1, *(side or whole for side, whole in zip(shape[1:3], reference)), shape[3])


def _shares(model, probe: tuple | None, reference: tuple | None) -> dict[int, float]:
    """Each layer of ``model`` (by ``id``) -> the largest share of ``reference``'s height
    and width its 4-D inputs and output have (0.0 without any), on an input of shape
    ``probe``. Layers whose shapes cannot be read (a layer called twice, a nested model,
    a probe that fails) are left out: they keep float32."""
    import keras
    import tensorflow as tf

    if probe is None or len(model.inputs) != 1:
        return {}
    read = []
    for layer in model.layers:
        if isinstance(layer, keras.layers.InputLayer) or _is_graph_model(layer):
            continue
        try:
            read.append((layer, [*tf.nest.flatten(layer.input), layer.output]))
        except (AttributeError, ValueError):  # called more than once: no one shape
            continue
    try:
        tensors = [tensor for _, group in read for tensor in group]
        specs = iter(keras.Model(model.inputs, tensors).compute_output_spec(
            keras.KerasTensor(probe, dtype=model.inputs[0].dtype)))
    except Exception:  # shapes that a probe cannot follow: every layer keeps float32
        return {}
    shares = {}
    for layer, group in read:
        shapes = [tuple(next(specs).shape) for _ in group]
        shares[id(layer)] = max((min(shape[1] / reference[0], shape[2] / reference[1])
                                 for shape in shapes if len(shape) == 4
                                 and None not in shape[1:3]), default=0.0)
    return shares
