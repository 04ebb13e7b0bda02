"""The receptive field of a convolutional Keras model: which input pixels an output
pixel can depend on, read from its layers' settings (no TensorFlow computation).

A model qualifies when every layer between its image input and its output is one of
:data:`SPATIAL_LAYERS` (convolution, pooling, upsampling) or acts on each pixel alone
(:data:`POINTWISE_LAYERS`: activations, rescaling, merges such as ``Add``...). Branches
are followed: an output pixel depends on the union of what each branch sees.

Each layer maps an inclusive range ``[lo, hi]`` of its output positions along one axis
to the range of its input positions they read: a convolution or pooling of kernel ``k``,
stride ``s`` and dilation ``d`` to ``[lo*s - p, hi*s - p + (k-1)*d]`` (``p`` the
padding TensorFlow adds before the first pixel); a nearest-neighbour upsampling by ``f``
to ``[lo // f, hi // f]`` (it never widens a range); a bilinear one to the two source
pixels around each end. Image borders are ignored, as if the input went on forever, so
the range is the same everywhere but for where upsampling's rounding falls; the
receptive field is the widest one. This is the classic recurrence ``r += (k-1)*d*j``,
``j *= s`` (Araujo et al., 2019, "Computing Receptive Fields of Convolutional Neural
Networks", Distill) made exact for upsampling.

>>> import keras
>>> from keras import layers
>>> inputs = keras.Input((32, 32, 3))
>>> x = layers.Conv2D(4, 3)(inputs)          # 3
>>> x = layers.MaxPooling2D()(x)             # 3 + (2-1)*1 = 4, jump 2
>>> x = layers.Conv2D(4, 3)(x)               # 4 + (3-1)*2 = 8
>>> receptive_field(keras.Model(inputs, x))
8
"""

from __future__ import annotations

import math

#: Layers that move pixels, by Keras class name.
SPATIAL_LAYERS = ("Conv2D", "DepthwiseConv2D", "SeparableConv2D", "MaxPooling2D",
                  "AveragePooling2D", "UpSampling2D")

#: Layers that compute each output pixel from the same pixel of their inputs alone.
POINTWISE_LAYERS = (
    "InputLayer", "Rescaling", "Normalization", "Activation", "ReLU", "LeakyReLU", "PReLU",
    "ELU", "Softmax", "Dropout", "SpatialDropout2D", "GaussianNoise", "GaussianDropout",
    "BatchNormalization", "Add", "Subtract", "Multiply", "Average", "Maximum", "Minimum",
    "Concatenate", "Identity",
)


def receptive_field(model) -> int:
    """The side, in input pixels, of the largest square an output pixel depends on.

    Args:
        model: A functional or sequential ``keras.Model`` with one image input
            ``(batch, H, W, C)`` whose outputs are built of :data:`SPATIAL_LAYERS` and
            :data:`POINTWISE_LAYERS` only.

    Returns:
        The receptive field's side (the larger of the two axes', where they differ).

    Raises:
        ValueError: For a model with several inputs, or a layer whose output pixels
            see more than a window of its input (``GlobalAveragePooling2D``,
            ``Flatten``, ``Dense``...) or that guidedbp does not know.
    """
    period = _period(model)
    return max(hi - lo + 1 for axis in (0, 1) for position in range(period)
               for lo, hi in [input_window(model, position, axis)])


def reach(model) -> int:
    """How far, in input pixels, an output pixel's window reaches beyond the input
    pixels under that output pixel: the half-width of the square dilation of a mask
    that holds everything an output region drawn from the mask can depend on.

    An output of ``H' x W'`` pixels for an ``H x W`` image puts each output pixel over a
    block of ``H/H' x W/W'`` input pixels. A region given as an input mask and resized
    to the output (by nearest neighbour, or any rule that picks an output pixel for a
    mask pixel in its block) takes output pixels whose block meets the mask; the mask
    dilated by ``reach(model)`` (Chebyshev distance) holds their windows. For an output
    at the input's resolution with a window centred on its pixel, it is
    ``(receptive_field(model) - 1) // 2``; an output cell's window at a coarser
    resolution is not centred on every pixel of its block, so it is a little more.

    Raises:
        ValueError: As :func:`receptive_field`; for an output whose size does not divide
            the input's.

    >>> import keras
    >>> inputs = keras.Input((32, 32, 3))
    >>> model = keras.Model(inputs, keras.layers.Conv2D(1, 5, padding="same")(inputs))
    >>> reach(model), receptive_field(model)
    (2, 5)
    """
    image = _image_input(model)
    period = _period(model)
    widest = 0
    for axis in (0, 1):
        sizes = {output.shape[1 + axis] for output in model.outputs}
        size = image.shape[1 + axis]
        if None in sizes or size is None or len(sizes) != 1 or size % next(iter(sizes)):
            raise ValueError(f"model {model.name!r} has outputs of size {sorted(sizes)} "
                             f"along axis {axis}, expected one that divides the input's {size}")
        block = size // next(iter(sizes))
        for position in range(period):
            lo, hi = input_window(model, position, axis)
            first, last = position * block, (position + 1) * block - 1
            widest = max(widest, last - lo, hi - first)
    return widest


def input_window(model, position: int, axis: int = 0) -> tuple[int, int]:
    """The inclusive range of input rows (``axis=0``) or columns (``axis=1``) that
    output row or column ``position`` depends on, borders ignored (it may reach below 0
    or past the image).

    Raises:
        ValueError: As :func:`receptive_field`; for an axis other than 0 or 1.
    """
    if axis not in (0, 1):
        raise ValueError(f"axis={axis!r} must be 0 (rows) or 1 (columns)")
    image = _image_input(model)
    seen: dict = {}
    windows = [_window(output, position, position, axis, image, seen)
               for output in model.outputs]
    return min(lo for lo, _ in windows), max(hi for _, hi in windows)


def _image_input(model):
    inputs = list(model.inputs)
    if len(inputs) != 1:
        raise ValueError(f"model {model.name!r} has {len(inputs)} inputs; "
                         "receptive_field takes a model of one image input")
    if len(inputs[0].shape) != 4:
        raise ValueError(f"model {model.name!r} takes input of shape {inputs[0].shape}, "
                         "expected (batch, height, width, channels)")
    return inputs[0]


def _window(tensor, lo: int, hi: int, axis: int, image, seen: dict) -> tuple[int, int]:
    """``[lo, hi]`` at ``tensor``, followed back to the model's input ``image``; ``seen``
    holds the answers so far (branches meet again: a ResNet would take exponential time)."""
    if tensor is image:
        return lo, hi
    key = (id(tensor), lo, hi)
    if key in seen:
        return seen[key]
    history = tensor._keras_history  # Keras 3: (operation, node_index, tensor_index)
    layer = history.operation
    node = layer._inbound_nodes[history.node_index]
    inputs = [t for t in node.input_tensors if hasattr(t, "_keras_history")]
    name = type(layer).__name__
    if name in SPATIAL_LAYERS:
        if len(inputs) != 1:
            raise ValueError(f"layer {layer.name!r} ({name}) has {len(inputs)} inputs")
        lo, hi = _through(layer, name, lo, hi, axis, inputs[0].shape[1 + axis])
    elif name not in POINTWISE_LAYERS or not _pointwise(layer, name):
        raise ValueError(
            f"layer {layer.name!r} ({name}) is neither a convolution, pooling or "
            "upsampling nor a per-pixel layer: the receptive field is known for those only"
        )
    windows = [_window(t, lo, hi, axis, image, seen) for t in inputs]
    if not windows:
        raise ValueError(f"layer {layer.name!r} ({name}) does not depend on the image")
    seen[key] = min(w[0] for w in windows), max(w[1] for w in windows)
    return seen[key]


def _pointwise(layer, name: str) -> bool:
    """Whether a layer of :data:`POINTWISE_LAYERS` acts along channels only."""
    axis = getattr(layer, "axis", -1)
    if name in ("Softmax", "Concatenate"):
        return axis in (-1, 3)
    if name in ("BatchNormalization", "Normalization"):
        axes = axis if isinstance(axis, (list, tuple)) else [axis]
        return all(a in (-1, 3) for a in axes)
    return True


def _through(layer, name: str, lo: int, hi: int, axis: int, size: int | None):
    """``[lo, hi]`` at the layer's output mapped to its input, along ``axis``."""
    if name == "UpSampling2D":
        factor = layer.size[axis]
        if layer.interpolation == "nearest":
            return lo // factor, hi // factor
        if layer.interpolation == "bilinear":
            # Half-pixel centres: output p samples source (p + 0.5) / f - 0.5.
            return (math.floor((lo + 0.5) / factor - 0.5),
                    math.floor((hi + 0.5) / factor - 0.5) + 1)
        raise ValueError(f"layer {layer.name!r} upsamples by {layer.interpolation!r}: "
                         "only nearest and bilinear are known")
    if name.endswith("Pooling2D"):
        kernel, stride, dilation = layer.pool_size[axis], layer.strides[axis], 1
    else:
        kernel, stride = layer.kernel_size[axis], layer.strides[axis]
        dilation = layer.dilation_rate[axis]
    reach = (kernel - 1) * dilation
    before = 0
    if layer.padding == "same" and size is not None:
        # TensorFlow pads (total // 2) before, the rest after.
        total = max((math.ceil(size / stride) - 1) * stride + reach + 1 - size, 0)
        before = total // 2
    elif layer.padding == "same":
        before = reach // 2  # stride 1: the same for every size
    return lo * stride - before, hi * stride - before + reach


def _period(model) -> int:
    """A period of the windows' widths along the output: the product of upsampling factors."""
    period = 1
    for layer in model.layers:
        if type(layer).__name__ == "UpSampling2D":
            period *= max(layer.size)
    return period
