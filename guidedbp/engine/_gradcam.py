"""Grad-CAM's feature map, found at the op level in a traced forward graph.

Working on ops rather than Keras layers means the same code serves Keras models,
nested sub-models and SavedModels (whose frozen graphs keep the layers' name
scopes), without ever rebuilding or modifying the caller's model.
"""

from __future__ import annotations

import re

import tensorflow as tf

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


def feature_map_by_name(forward_ops: list[tf.Operation], path: list[str]) -> tf.Tensor:
    """The output of the layer whose name scope matches ``path``.

    Keras opens a name scope per layer call; TensorFlow may suffix it (``conv``
    becomes ``conv_1``). The layer's output is the output of the last op created
    in its scope.

    Raises:
        ValueError: No scope matches, or the layer's output is not ``(N, h, w, k)``.
    """
    best = None
    for op in forward_ops:
        scopes = op.name.split("/")[:-1]
        match = _match_scopes(scopes, path)
        if match is not None and op.outputs and op.outputs[0].dtype.is_floating:
            if best is None or match <= best[0]:
                best = (match, op)
    if best is None:
        raise ArgumentError(f"no layer named {'/'.join(path)!r} in the model's graph")
    tensor = best[1].outputs[0]
    if tensor.shape.rank != 4:
        raise ArgumentError(
            f"layer {'/'.join(path)!r} outputs shape {tensor.shape}; Grad-CAM needs a "
            "(batch, height, width, channels) feature map"
        )
    return tensor


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
    raise ArgumentError("the model has no 4-D feature map before its logits: Grad-CAM needs one")


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


def grad_cam(feature_map: tf.Tensor, gradient: tf.Tensor, size, upsample: str) -> tf.Tensor:
    """Selvaraju et al. (2017): ReLU of the gradient-weighted channel sum, upsampled.

    Args:
        feature_map: ``(N, h, w, k)`` layer output.
        gradient: The plain gradient of the class logit with respect to it.
        size: ``(H, W)`` of the input.
        upsample: ``"bilinear"`` or ``"nearest"``.

    Returns:
        float32 ``(N, H, W, 1)``.
    """
    feature_map = tf.cast(feature_map, tf.float32)
    weights = tf.reduce_mean(tf.cast(gradient, tf.float32), axis=(1, 2), keepdims=True)
    cam = tf.nn.relu(tf.reduce_sum(weights * feature_map, axis=-1, keepdims=True))
    return tf.image.resize(cam, size, method=upsample)
