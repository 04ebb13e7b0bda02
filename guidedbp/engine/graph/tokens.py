"""Vision transformers' token layers as class activation map feature maps.

A token layer's ``(N, T, C)`` output is read as a ``(N, side, side, C)`` grid
(:func:`token_grid`): its class and register tokens dropped, its patch tokens laid out
row by row. :func:`_mixes_tokens` and :func:`_enters_normalization` are what
:func:`guidedbp.engine.graph.layers.default_feature_map` reads a transformer's graph by.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import tensorflow as tf

#: The most class and register tokens a token layer may hold before its patch tokens.
MAX_EXTRA_TOKENS = 8


@dataclass(frozen=True)
class TokenGrid:
    """How a token layer's ``(N, T, C)`` output lays out as a ``(N, side, side, C)``
    feature map: ``extra`` class and register tokens first (dropped), then
    ``side * side`` patch tokens, row by row, as keras-hub's ViT and most ViTs order them.
    """

    extra: int
    side: int

    def apply(self, tokens: tf.Tensor) -> tf.Tensor:
        """``(N, T, C)`` tokens (or their gradient) as the ``(N, side, side, C)`` grid."""
        patches = tokens[:, self.extra:]
        shape = tf.shape(patches)
        grid = tf.reshape(patches, tf.stack([shape[0], self.side, self.side, shape[2]]))
        grid.set_shape([tokens.shape[0], self.side, self.side, tokens.shape[2]])
        return grid


def token_grid(tokens: int | None) -> TokenGrid | None:
    """The grid of a layer of ``tokens`` tokens: ``side = isqrt(tokens)``, the largest
    square ``side * side <= tokens``, and the ``extra = tokens - side * side`` tokens
    before it; None when ``extra`` exceeds :data:`MAX_EXTRA_TOKENS`, ``side`` is below
    2, or the count is unknown. So images must be split into square grids of patches.

    >>> token_grid(17), token_grid(197), token_grid(201), token_grid(196)
    (TokenGrid(extra=1, side=4), TokenGrid(extra=1, side=14), TokenGrid(extra=5, side=14), \
TokenGrid(extra=0, side=14))
    >>> token_grid(35) is None, token_grid(3) is None, token_grid(None) is None
    (True, True, True)
    """
    if tokens is None:
        return None
    side = math.isqrt(tokens)
    extra = tokens - side * side
    if side < 2 or extra > MAX_EXTRA_TOKENS:
        return None
    return TokenGrid(extra, side)


def as_grid(feature_map: tf.Tensor) -> tf.Tensor:
    """A ``(N, h, w, k)`` feature map as it is; a token layer's ``(N, T, C)`` output as
    its ``(N, side, side, C)`` grid (:func:`token_grid`, checked when the layer was
    chosen)."""
    if feature_map.shape.rank != 3:
        return feature_map
    return token_grid(feature_map.shape[1]).apply(feature_map)


def _is_tokens(tensor: tf.Tensor) -> bool:
    return tensor.shape.rank == 3 and tensor.dtype.is_floating


def _no_grid(name: str, tensor: tf.Tensor) -> str:
    return (f"layer {name!r} outputs shape {tensor.shape}: {tensor.shape[1]} tokens are not "
            f"up to {MAX_EXTRA_TOKENS} class or register tokens followed by a square grid "
            "of patch tokens")


#: Products of two tensors: of two that depend on the images, attention.
_PRODUCTS = {"Einsum", "MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3"}
_REDUCTIONS = {"Mean", "Sum", "Max", "Min", "Prod"}


def _mixes_tokens(op: tf.Operation, source: tf.Tensor, depends: set[str]) -> bool:
    """Whether ``op`` lets every token of its input ``source`` reach its output:
    attention (a product of two tensors that depend on the images), a reduction over
    the token axis of ``(N, T, C)`` tokens (global pooling), or their flattening
    (a reshape to ``(N, T * C)``; a dense layer's reshape to ``(N * T, C)`` is not)."""
    if op.type in _PRODUCTS:
        return all(operand.op.name in depends for operand in op.inputs[:2])
    if source.shape.rank != 3:
        return False
    if op.type in _REDUCTIONS:
        axes = tf.get_static_value(op.inputs[1])
        return axes is not None and 1 in {int(axis) % 3 for axis in axes.flat}
    output = op.outputs[0].shape
    return (op.type == "Reshape" and output.rank == 2 and output[-1] is not None
            and source.shape[-1] is not None and output[-1] != source.shape[-1])


def _enters_normalization(tokens: tf.Tensor) -> bool:
    """Whether ``tokens`` are the input of a layer normalization's moments: their mean
    over the channel axis (a ``Mean`` op) and a ``SquaredDifference`` from it read them,
    directly or through one ``Cast``, as Keras' LayerNormalization traces on TensorFlow."""
    readers = list(tokens.consumers())
    readers += [op for cast in readers if cast.type == "Cast"
                for op in cast.outputs[0].consumers()]
    means_channels = any(
        op.type == "Mean" and _reduces_only_last_axis(op.inputs[1], tokens.shape.rank)
        for op in readers
    )
    return means_channels and any(op.type == "SquaredDifference" for op in readers)


def _reduces_only_last_axis(axes: tf.Tensor, rank: int) -> bool:
    values = tf.get_static_value(axes)
    if values is None:
        return False
    return {int(axis) % rank for axis in values.flat} == {rank - 1}
