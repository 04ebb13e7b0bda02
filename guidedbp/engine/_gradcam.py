"""Class activation maps: the feature map, found at the op level in a traced forward
graph, and a table of gradient weightings (Grad-CAM, Grad-CAM++, LayerCAM), each one
function, as pytorch-grad-cam's ``get_cam_weights``.

Working on ops rather than Keras layers means the same code serves Keras models,
nested sub-models and SavedModels (whose frozen graphs keep the layers' name
scopes), without ever rebuilding or modifying the caller's model.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import tensorflow as tf

from guidedbp._text import did_you_mean, some_of
from guidedbp.errors import ArgumentError


def layer_path(model, name: str) -> list[str] | None:
    """Names of the Keras models enclosing layer ``name``, then its own; None if absent."""
    layers = getattr(model, "layers", None)
    if layers is None:
        return None
    for layer in layers:
        if layer.name == name:
            return [name]
        inner = layer_path(layer, name) if hasattr(layer, "layers") else None
        if inner:
            return [layer.name, *inner]
    return None


def feature_map_by_name(forward_ops: list[tf.Operation], path: list[str],
                        model=None) -> tf.Tensor:
    """The output of the layer whose name scope matches ``path``.

    Keras opens a name scope per layer call; TensorFlow may suffix it (``conv``
    becomes ``conv_1``). The layer's output is the output of the last op created
    in its scope.

    Raises:
        ValueError: No scope matches, or the layer's output is not ``(N, h, w, k)``;
            the message lists the layers that have one (:func:`feature_layers`).
    """
    best = None
    for op in forward_ops:
        scopes = op.name.split("/")[:-1]
        match = _match_scopes(scopes, path)
        if match is not None and op.outputs and op.outputs[0].dtype.is_floating:
            if best is None or match <= best[0]:
                best = (match, op)
    name = "/".join(path)
    if best is None:
        layers = feature_layers(model, forward_ops)
        hint = did_you_mean(name, layers)
        raise ArgumentError(f"no layer named {name!r} in the model's graph"
                            + (f" ({hint})" if hint else "") + _listed(layers))
    tensor = best[1].outputs[0]
    if tensor.shape.rank != 4:
        raise ArgumentError(
            f"layer {name!r} outputs shape {tensor.shape}; a class activation map needs a "
            "(batch, height, width, channels) feature map"
            + _listed(feature_layers(model, forward_ops))
        )
    return tensor


def _listed(layers: list[str]) -> str:
    if not layers:
        return "; the model has no layer with a 4-D output"
    return f"; layers with a 4-D output: {some_of(layers, limit=10, last=True)}"


def feature_layers(model, forward_ops: list[tf.Operation]) -> list[str]:
    """The names a class activation map's layer may take, in forward order: the Keras
    layers with a 4-D output (inside nested models too), else (a SavedModel) the name
    scopes of the graph's 4-D outputs that depend on the images."""
    names: list[str] = []

    def walk(owner) -> None:
        for layer in getattr(owner, "layers", None) or []:
            if hasattr(layer, "layers"):
                walk(layer)
            elif type(layer).__name__ != "InputLayer" and _rank(layer) == 4:
                names.append(layer.name)

    walk(model)
    if names:
        return list(dict.fromkeys(names))
    images = [op for op in forward_ops if op.type == "Placeholder" and op.outputs
              and op.outputs[0].shape.rank == 4]
    depends = _depends_on(images[0].outputs[0]) if images else set()
    for op in forward_ops:
        output = op.outputs[0] if op.outputs else None
        scopes = op.name.split("/")[:-1]
        if (op.name in depends and op is not images[0] and scopes and output is not None
                and output.shape.rank == 4 and output.dtype.is_floating):
            names.append(scopes[-1])
    return list(dict.fromkeys(names))


def _rank(layer) -> int | None:
    try:
        return len(layer.output.shape)
    except (AttributeError, ValueError, TypeError):  # a layer never called, or called twice
        return None


def _match_scopes(scopes: list[str], path: list[str]) -> int | None:
    """Match ``path`` as an ordered subsequence of ``scopes``; lower score is closer.

    Each name matches the scope ``name_1`` (what a single call traces to) best,
    then ``name``, then ``name_K``. Returns None for no match.
    """
    score, position = 0, 0
    for name in path:
        pattern = re.compile(re.escape(name) + r"(_(\d+))?$")
        for index in range(position, len(scopes)):
            found = pattern.match(scopes[index])
            if found:
                suffix = found.group(2)
                closeness = 0 if suffix == "1" else 1 if suffix is None else 2 + int(suffix)
                score = score * 1000 + closeness
                position = index + 1
                break
        else:
            return None
    return score


def default_feature_map(logits: tf.Tensor, images: tf.Tensor) -> tf.Tensor:
    """The last 4-D tensor before the network pools or flattens to the logits.

    Walks back from the logits along ops that depend on the images, breadth
    first, and returns the first ``(N, h, w, k)`` float tensor it meets: the
    output of the last layer with a 4-D output, inside nested models too.

    Raises:
        ValueError: The model has no 4-D feature map (an MLP).
    """
    depends = _depends_on(images)
    queue, seen = [logits], set()
    while queue:
        tensor = queue.pop(0)
        if tensor.name in seen:
            continue
        seen.add(tensor.name)
        if tensor.shape.rank == 4 and tensor.dtype.is_floating and tensor is not images:
            return tensor
        for source in tensor.op.inputs:
            if source.op.name in depends:
                queue.append(source)
    raise ArgumentError("the model has no 4-D feature map before its logits: class activation "
                        "maps (Grad-CAM and its kin) need one")


def _depends_on(images: tf.Tensor) -> set[str]:
    """Names of the ops whose outputs depend on ``images``."""
    names, stack = set(), [images.op]
    while stack:
        op = stack.pop()
        if op.name in names:
            continue
        names.add(op.name)
        for output in op.outputs:
            stack.extend(output.consumers())
    return names


def gradcam_weights(feature_map: tf.Tensor, gradient: tf.Tensor) -> tf.Tensor:
    """Grad-CAM (Selvaraju et al., 2017): ``w_k`` the mean of ``g_k`` over positions."""
    del feature_map  # Grad-CAM's weights read the gradient alone
    return tf.reduce_mean(gradient, axis=(1, 2), keepdims=True)


def gradcam_plus_plus_weights(feature_map: tf.Tensor, gradient: tf.Tensor) -> tf.Tensor:
    """Grad-CAM++ (Chattopadhyay et al., 2018): ``w_k = sum_ab alpha * relu(g_k)`` with
    ``alpha = g^2 / (2 g^2 + sum_ab(A_k) g^3)``, as pytorch-grad-cam and tf-keras-vis
    compute it.

    Where ``g`` is not zero that is ``1 / (2 + sum_ab(A_k) g)``, which is what is
    computed (no ``g^2`` or ``g^3`` to underflow in float32); ``alpha`` is 0 where that
    denominator is 0 (pytorch-grad-cam adds 1e-6 to it instead, tf-keras-vis divides by
    it). The paper differentiates ``exp(score)``: that factor cancels in ``alpha`` and
    only scales the map, so both implementations drop it, and so does this one.
    tf-keras-vis (like the authors' code) also divides ``alpha`` by its sum over
    positions, which rescales each channel's weight; pytorch-grad-cam does not, nor does
    this.
    """
    total = tf.reduce_sum(feature_map, axis=(1, 2), keepdims=True)
    alpha = tf.math.divide_no_nan(1.0, 2.0 + total * gradient)
    return tf.reduce_sum(alpha * tf.nn.relu(gradient), axis=(1, 2), keepdims=True)


def layercam_weights(feature_map: tf.Tensor, gradient: tf.Tensor) -> tf.Tensor:
    """LayerCAM (Jiang et al., 2021): ``relu(g_k)`` position by position, so the map is
    meaningful at any layer, early ones too."""
    del feature_map  # LayerCAM's weights read the gradient alone
    return tf.nn.relu(gradient)


#: A weighting: ``(feature map A, plain gradient g)``, both float32 ``(N, h, w, k)`` ->
#: weights broadcastable to ``A`` (``(N, 1, 1, k)`` per channel, or ``(N, h, w, k)`` per
#: position). :func:`class_activation_map` multiplies them into ``A``.
Weighting = Callable[[tf.Tensor, tf.Tensor], tf.Tensor]

#: The gradient weightings :func:`class_activation_map` knows, by the name a registry
#: record's ``combine`` asks for (``parts.cam("gradcam++")``). A new class activation
#: map is one function here, one entry in this table and one registry record.
WEIGHTINGS: dict[str, Weighting] = {
    "gradcam": gradcam_weights,
    "gradcam++": gradcam_plus_plus_weights,
    "layercam": layercam_weights,
}


def class_activation_map(feature_map: tf.Tensor, gradient: tf.Tensor, weighting: str, size,
                         upsample: str) -> tf.Tensor:
    """The ReLU of the feature map's weighted channel sum, upsampled to the input:
    ``relu(sum_k w_k A_k)`` with ``A`` the ``(h, w, k)`` feature map and ``w`` the
    weights :data:`WEIGHTINGS` computes from ``A`` and the plain gradient of the class
    logit with respect to it.

    Args:
        feature_map: ``(N, h, w, k)`` layer output.
        gradient: The plain gradient of the class logit with respect to it.
        weighting: A name of :data:`WEIGHTINGS`.
        size: ``(H, W)`` of the input.
        upsample: ``"bilinear"`` or ``"nearest"``.

    Returns:
        float32 ``(N, H, W, 1)``.

    Raises:
        ArgumentError: For an unknown ``weighting``.
    """
    if weighting not in WEIGHTINGS:
        raise ArgumentError(f"weighting={weighting!r} is not one of {', '.join(WEIGHTINGS)}")
    feature_map = tf.cast(feature_map, tf.float32)
    gradient = tf.cast(gradient, tf.float32)
    weighted = WEIGHTINGS[weighting](feature_map, gradient) * feature_map
    cam = tf.nn.relu(tf.reduce_sum(weighted, axis=-1, keepdims=True))
    return tf.image.resize(cam, size, method=upsample)
