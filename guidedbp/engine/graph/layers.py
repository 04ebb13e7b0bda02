"""The layers class activation maps read: the feature map, found at the op level in a
traced forward graph (by name, or the last one before the logits), and the layers a
model offers (:func:`layer_choices`). The maps' maths are
:mod:`guidedbp.engine.methods.cams`.

Working on ops rather than Keras layers means the same code serves Keras models,
nested sub-models and SavedModels (whose frozen graphs keep the layers' name
scopes), without ever rebuilding or modifying the caller's model.

Vision transformers have no ``(N, h, w, k)`` feature map: their blocks output
``(N, T, C)`` tokens. A token layer is read as a grid (:func:`token_grid`): its class
and register tokens dropped, its patch tokens laid out row by row. The gradient is
taken with respect to the token tensor the forward pass uses (a reshaped copy off to
the side would get none); the feature map and its gradient are laid out as the grid
only for the weighting (:func:`guidedbp.engine.methods.cams.class_activation_map`,
:meth:`TokenGrid.apply`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import tensorflow as tf

from guidedbp._text import did_you_mean, some_of
from guidedbp.engine.graph import ops as _ops
from guidedbp.engine.graph import scopes as _scopes
from guidedbp.engine.graph.tokens import (
    _enters_normalization,
    _is_tokens,
    _mixes_tokens,
    _no_grid,
    token_grid,
)
from guidedbp.errors import ArgumentError

#: The path of the first layer of a name (:func:`guidedbp.engine.graph.scopes.layer_path`).
layer_path = _scopes.layer_path


def feature_map_by_name(forward_ops: list[tf.Operation], path: list[str],
                        model=None) -> tf.Tensor:
    """The output of the layer at ``path`` (:func:`_layer_output`): a ``(N, h, w, k)``
    feature map, or a token layer's ``(N, T, C)`` tokens (a transformer block's), read
    as a grid (:func:`token_grid`).

    Raises:
        ArgumentError: No scope matches, or the layer's output is neither
            ``(N, h, w, k)`` nor tokens with a grid; the message lists the layers that
            are (:func:`feature_layers`).
    """
    op = _layer_output(forward_ops, path, _scopes.layer_scopes(model, forward_ops))
    name = "/".join(path)
    if op is None:
        layers = feature_layers(model, forward_ops)
        hint = did_you_mean(name, layers.names)
        raise ArgumentError(f"no layer named {name!r} in the model's graph"
                            + (f" ({hint})" if hint else "") + _listed(layers))
    tensor = op.outputs[0]
    if _is_tokens(tensor) and token_grid(tensor.shape[1]) is None:
        raise ArgumentError(_no_grid(name, tensor) + _listed(feature_layers(model, forward_ops)))
    if tensor.shape.rank != 4 and not _is_tokens(tensor):
        raise ArgumentError(
            f"layer {name!r} outputs shape {tensor.shape}; a class activation map needs a "
            "(batch, height, width, channels) feature map or (batch, tokens, channels) tokens"
            + _listed(feature_layers(model, forward_ops))
        )
    return tensor


def _layer_output(forward_ops: list[tf.Operation], path: list[str],
                  scopes: dict) -> tf.Operation | None:
    """The last float op created in the call of the layer at ``path``, or None.

    A Keras layer's path is found in the scope its call opened (``scopes``,
    :func:`guidedbp.engine.graph.scopes.layer_scopes`). Any other path (a SavedModel's
    layers, a path of the graph's own scopes) matches the names of a SavedModel's layers
    exactly (:func:`~guidedbp.engine.graph.scopes.exported_names`), else the graph's name
    scopes (:func:`_match_scopes`), which TensorFlow may have suffixed (``conv`` becomes
    ``conv_1``).
    """
    prefix = scopes.get(tuple(path))
    if prefix is None and not scopes:  # a SavedModel: its layers' names first, exactly
        named = _scopes.exported_names(forward_ops)
        found = [op for op in forward_ops if op.outputs and op.outputs[0].dtype.is_floating
                 and _is_subsequence(path, named.get(tuple(op.name.split("/")[:-1]), ()))]
        if found:
            return found[-1]
    best = None
    for op in forward_ops:
        if not (op.outputs and op.outputs[0].dtype.is_floating):
            continue
        op_scopes = op.name.split("/")[:-1]
        if prefix is not None:
            if tuple(op_scopes[:len(prefix)]) == prefix:
                best = (0, op)
            continue
        match = _match_scopes(op_scopes, path)
        if match is not None and (best is None or match <= best[0]):
            best = (match, op)
    return None if best is None else best[1]


def _is_subsequence(path: list[str], names: tuple[str, ...]) -> bool:
    """Whether ``path`` is ``names``, or a part of it in order (``["block", "conv"]`` of
    ``("model", "block", "x", "conv")``)."""
    rest = iter(names)
    return bool(names) and all(name in rest for name in path)


def layer_name(model, forward_ops: list[tf.Operation], tensor: tf.Tensor) -> str:
    """The name ``layer=`` takes for the layer whose output is ``tensor``: the Keras
    layer's own name (``"conv5_block3_out"``; inside nested models too), or the path of
    the models enclosing it (``"branch_b/conv"``) where a layer before it has that
    name; for a graph without Keras layers (a SavedModel), its name scope
    (``"conv2d"`` for the scope ``"conv2d_1"`` that exporting it made unique:
    :func:`~guidedbp.engine.graph.scopes.exported_names`), with the enclosing scopes where that
    is ambiguous. Each name is
    checked to lead back to ``tensor`` as ``layer=`` reads it; where none does, the
    tensor's whole name scope in the traced graph."""
    scopes = _scopes.layer_scopes(model, forward_ops)
    op_scopes = tensor.op.name.split("/")[:-1]
    candidates = []
    path = _scopes.owner(scopes, op_scopes)
    if path:
        candidates += [path[-1], "/".join(path)]
    elif op_scopes:  # no Keras layers (a SavedModel): its layers' names, where they show
        named = _scopes.exported_names(forward_ops).get(tuple(op_scopes), ())
        candidates += ["/".join(named[-depth:]) for depth in range(1, len(named) + 1)]
    candidates += ["/".join(op_scopes[-depth:]) for depth in range(1, len(op_scopes) + 1)]
    for name in candidates:
        found = _layer_output(forward_ops, layer_path(model, name) or name.split("/"), scopes)
        if found is not None and found.outputs[0].name == tensor.name:
            return name
    return "/".join(op_scopes)


@dataclass(frozen=True)
class FeatureLayers:
    """The names a class activation map's layer may take, each list in forward order.

    Attributes:
        maps: Layers with a 4-D ``(N, h, w, k)`` output.
        tokens: Token layers: ``(N, T, C)`` outputs whose tokens make a grid
            (:func:`token_grid`), a vision transformer's blocks.
    """

    maps: list[str]
    tokens: list[str]

    @property
    def names(self) -> list[str]:
        return [*self.maps, *self.tokens]


def _listed(layers: FeatureLayers) -> str:
    if not layers.names:
        return "; the model has no layer with a 4-D output or tokens"
    listed = (f"; layers with a 4-D output: {some_of(layers.maps, limit=10, last=True)}"
              if layers.maps else "; no layer with a 4-D output")
    if layers.tokens:
        listed += f"; token layers: {some_of(layers.tokens, limit=10, last=True)}"
    return listed


def feature_layers(model, forward_ops: list[tf.Operation]) -> FeatureLayers:
    """The names a class activation map's layer may take: the Keras layers with a 4-D
    output or a token layer's (inside nested models too), else (a SavedModel) the name
    scopes of the graph's such outputs that depend on the images."""
    maps: list[str] = []
    tokens: list[str] = []

    def sort(name: str, shape) -> None:
        if shape is not None and len(shape) == 4:
            maps.append(name)
        elif shape is not None and len(shape) == 3 and token_grid(shape[1]) is not None:
            tokens.append(name)

    def walk(owner) -> None:
        for layer in getattr(owner, "layers", None) or []:
            if hasattr(layer, "layers"):
                walk(layer)
            elif type(layer).__name__ != "InputLayer":
                sort(layer.name, _shape(layer))

    walk(model)
    if not maps and not tokens:
        images = [op for op in forward_ops if op.type == "Placeholder" and op.outputs
                  and op.outputs[0].shape.rank == 4]
        depends = _depends_on(images[0].outputs[0]) if images else set()
        named = _scopes.exported_names(forward_ops)
        for op in forward_ops:
            output = op.outputs[0] if op.outputs else None
            scopes = op.name.split("/")[:-1]
            # Inlining a call leaves Func/CALL/input (and output) Identity ops: no layers.
            inlined = scopes[-1:] in (["input"], ["output"]) and "Func" in scopes
            if (op.name in depends and op is not images[0] and scopes and not inlined
                    and output is not None and output.dtype.is_floating
                    and output.shape.rank is not None):
                sort(named[tuple(scopes)][-1], output.shape.as_list())
    return FeatureLayers(list(dict.fromkeys(maps)), list(dict.fromkeys(tokens)))


def layer_choices(model, image_shape: tuple) -> FeatureLayers:
    """The names a class activation map's layer may take in ``model`` fed ``(H, W, C)``
    images (``None`` for a free size): Keras' layers, else (a SavedModel) the name
    scopes of a traced forward pass (:func:`feature_layers`).

    >>> import keras
    >>> model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 4, 4),
    ...                           keras.layers.Reshape((4, 4)), keras.layers.Flatten()])
    >>> layer_choices(model, (8, 8, 3)).maps, layer_choices(model, (8, 8, 3)).tokens
    (['conv2d'], ['reshape'])
    """
    found = feature_layers(model, [])
    if found.names:
        return found
    traced = tf.function(lambda images: model(images, training=False), autograph=False)
    spec = tf.TensorSpec((None, *image_shape), tf.float32)
    return feature_layers(model, traced.get_concrete_function(spec).graph.get_operations())


def _shape(layer) -> tuple | None:
    try:
        return tuple(layer.output.shape)
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
    """The last 4-D tensor before the network pools or flattens to the logits, or a
    vision transformer's last token layer whose every token reaches the logits. Where
    the logits are a map themselves (segmentation), the last 4-D tensor before the
    layer that makes them.

    Walks back from the logits along ops that depend on the images, breadth
    first, and returns the first float tensor it meets that is either

    - ``(N, h, w, k)``: the output of the last layer with a 4-D output, inside nested
      models too; or
    - ``(N, T, C)`` tokens entering a layer normalization (:func:`_enters_normalization`:
      a transformer block's input, or the final LayerNormalization's) met past an op
      that mixes tokens (:func:`_mixes_tokens`: attention, or pooling over the tokens).

    Past normalized tokens, 4-D tensors (attention's heads) are no feature map. A ViT
    that pools its tokens thus gets its last block's output. One whose head reads
    the class token alone gets its last block's input (the block before's output), as
    pytorch-grad-cam advises (``model.blocks[-1].norm1``): after the last attention each
    token goes its own way, so the class logit's gradient is zero at every patch token
    of the last block's output. A model with no tokens and no attention products (every
    CNN) gets its last 4-D map, as ever.

    Raises:
        ArgumentError: The model has neither (an MLP), or the tokens make no grid
            (:func:`token_grid`).
    """
    depends = _depends_on(images)
    # A dense output (segmentation: (N, H', W', C)) is 4-D itself: the feature map is the
    # last one before the layer that makes it.
    head_scope = logits.op.name.rsplit("/", 1)[0] + "/" if logits.shape.rank == 4 else None
    # Each tensor comes with whether its tokens mix on the way to the logits, and
    # whether that way passes normalized tokens (past them, 4-D tensors are attention's).
    queue, seen = [(logits, False, False)], set()
    while queue:
        step = queue.pop(0)
        if (step[0].name, *step[1:]) in seen:
            continue
        seen.add((step[0].name, *step[1:]))
        tensor, mixed, transformer = step
        if (tensor.shape.rank == 4 and tensor.dtype.is_floating and tensor is not images
                and not transformer
                and not (head_scope and tensor.op.name.startswith(head_scope))):
            return tensor
        if _is_tokens(tensor) and _enters_normalization(tensor):
            if mixed and token_grid(tensor.shape[1]) is None:
                raise ArgumentError(_no_grid(tensor.op.name.rsplit("/", 1)[0], tensor)
                                    + "; name a layer with layer=")
            if mixed:
                return tensor
            transformer = True
        for source in tensor.op.inputs:
            if source.op.name in depends:
                queue.append((source, mixed or _mixes_tokens(tensor.op, source, depends),
                              transformer))
    raise ArgumentError("the model has no 4-D feature map before its logits, nor tokens "
                        "entering a layer normalization: class activation maps (Grad-CAM "
                        "and its kin) need one")


def _depends_on(images: tf.Tensor) -> set[str]:
    """Names of the ops whose outputs depend on ``images``."""
    return _ops.descendants(images.op)
