"""Whether a model rescales raw 0-255 pixels itself, read off its layers or its graph.

Models loaded from files are fed raw pixels unless the caller chooses a preprocessing
(:data:`~guidedbp.models.loaded.DEFAULT_FILE_PREPROCESS`): right for a model that
rescales inside, wrong for one trained on scaled pixels that does not. A Keras model
says so by a ``Rescaling`` or ``Normalization`` layer. A SavedModel has no layers: its
graph (:class:`~guidedbp.models.frozen.FrozenGraph`) says so by its first ops after the
image input. A multiplication, division, subtraction or addition by values that do not
depend on the image (``x / 255``, ``(x - mean) / std``) rescales; a convolution or a
matrix product straight on the pixels does not. Ops that only move or resize pixels
(casts, reshapes, slices, channel flips, resizing, pooling) are looked through.

>>> rescales_itself(object()) is None  # neither a Keras model nor a graph
True
"""

from __future__ import annotations

__all__ = ["graph_rescales", "rescales_itself"]

#: Ops that pass pixels on without changing their scale: looked through.
PASS_THROUGH = frozenset((
    "Identity", "Cast", "Reshape", "ExpandDims", "Squeeze", "Transpose", "StridedSlice",
    "Slice", "ReverseV2", "GatherV2", "ResizeBilinear", "ResizeNearestNeighbor",
    "ResizeBicubic", "ResizeArea", "ScaleAndTranslate", "Pad", "PadV2", "MirrorPad",
    "MaxPool", "AvgPool", "CheckNumerics", "EnsureShape", "ConcatV2",
))
#: Ops that rescale when their other operand does not depend on the image.
SCALING = frozenset(("Mul", "RealDiv", "Div", "DivNoNan", "Sub", "AddV2", "Add"))
#: Ops that weigh the pixels as they come: the model computes on their raw scale.
WEIGHING = frozenset((
    "Conv2D", "Conv3D", "DepthwiseConv2dNative", "MatMul", "BatchMatMul", "BatchMatMulV2",
    "BatchMatMulV3", "Einsum", "Conv2DBackpropInput",
))
# Ops whose outputs describe a tensor rather than carry its values: not a data path.
_METADATA = frozenset(("Shape", "ShapeN", "Size", "Rank"))


def rescales_itself(model) -> bool | None:
    """Whether ``model`` rescales its input: ``True``, ``False``, or ``None`` where it
    cannot be told (a callable that is neither a Keras model nor a graph, or a graph
    whose first ops are none of those this module knows).

    A Keras model rescales when it has a ``Rescaling`` or ``Normalization`` layer, nested
    models searched; a graph (anything with ``graph_def`` and ``input_name``, such as a
    :class:`~guidedbp.models.frozen.FrozenGraph`) as :func:`graph_rescales` reads it.
    """
    graph_def = getattr(model, "graph_def", None)
    input_name = getattr(model, "input_name", None)
    if graph_def is not None and isinstance(input_name, str):
        return graph_rescales(graph_def, input_name)
    flatten = getattr(model, "_flatten_layers", None)
    if flatten is None:
        return None
    import keras

    scalers = (keras.layers.Rescaling, keras.layers.Normalization)
    return any(isinstance(layer, scalers)
               for layer in flatten(include_self=False, recursive=True))


def graph_rescales(graph_def, input_name: str) -> bool | None:
    """Whether the graph's first ops after its input rescale the pixels.

    Args:
        graph_def: A ``GraphDef``.
        input_name: The image tensor's name in it (``"images:0"``) or its node's.

    Returns:
        ``False`` when a weighing op (:data:`WEIGHING`) reads the pixels (through
        :data:`PASS_THROUGH` ops only); else ``True`` when every first op is a
        :data:`SCALING` op whose other operand does not depend on the image; else
        ``None``: a first op this check does not know (a function call, a loop...),
        or no op reads the input.
    """
    source = input_name.split(":")[0]
    consumers: dict[str, list] = {}
    for node in graph_def.node:
        for name in node.input:
            if not name.startswith("^"):
                consumers.setdefault(name.split(":")[0], []).append(node)
    dependent = _descendants(source, consumers)
    first, pending, seen = [], [source], set()
    while pending:
        name = pending.pop()
        for node in consumers.get(name, ()):
            if node.name in seen or node.op in _METADATA:
                continue
            seen.add(node.name)
            if node.op in PASS_THROUGH:
                pending.append(node.name)
            else:
                first.append(node)
    if not first:
        return None
    if any(node.op in WEIGHING for node in first):
        return False
    if all(node.op in SCALING and _one_image_operand(node, dependent) for node in first):
        return True
    return None


def _descendants(source: str, consumers: dict) -> set[str]:
    """``source`` and the names of every node that reads it, directly or not."""
    names, pending = set(), [source]
    while pending:
        name = pending.pop()
        if name not in names:
            names.add(name)
            pending.extend(node.name for node in consumers.get(name, ()))
    return names


def _one_image_operand(node, dependent: set[str]) -> bool:
    """Whether exactly one of ``node``'s data inputs depends on the image."""
    operands = [name.split(":")[0] for name in node.input if not name.startswith("^")]
    return sum(name in dependent for name in operands) == 1
