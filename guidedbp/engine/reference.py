"""The literal ``grad_ys`` chain: guided backprop segment by segment.

This is the first formulation of guided backpropagation in TensorFlow, written
out as literally as it reads: compute the gradient that arrives at a ReLU's
output, threshold it at zero, and send it further down as ``grad_ys``. It uses
no gradient override at all, so it is an independent check on the engine: the
engine must agree with it on every model. It issues one ``tf.gradients`` call per
ReLU and redoes shared backward work on fan-out graphs, so it is slow by design;
use :class:`guidedbp.Explainer` for real work.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from guidedbp.engine.graph import ops as _ops
from guidedbp.engine.rules import relu as _relu
from guidedbp.errors import ArgumentError


def reference_saliency(model, images, target=None, method: str = "guided") -> np.ndarray:
    """Guided backprop (or deconvnet, or vanilla) by the literal ``grad_ys`` chain.

    Every ``Relu``/``Relu6`` op is treated as a gate (no PReLU exclusion), so
    compare with the engine on models without PReLU layers.

    Args:
        model: A ``keras.Model`` taking ``(N, H, W, C)`` and returning ``(N, classes)``.
        images: float32 ``(N, H, W, C)``.
        target: ``None`` (top-1), an int, or one int per image.
        method: ``"guided"``, ``"deconvnet"`` or ``"vanilla"``.

    Returns:
        float32 maps of the images' shape.
    """
    if method not in ("guided", "deconvnet", "vanilla"):
        raise ArgumentError(f"method={method!r} is not one of guided, deconvnet, vanilla")
    images = np.asarray(images, np.float32)
    if target is None:
        targets = np.full(len(images), -1, np.int32)
    else:
        targets = np.broadcast_to(np.asarray(target, np.int32), (len(images),)).copy()

    @tf.function(autograph=False)
    def chain(x, chosen):
        graph = tf.compat.v1.get_default_graph()
        output = model(x, training=False)
        logits, head, _ = _ops.find_logits(output)
        logits, _ = _ops.class_scores(logits, output, head)
        chosen = tf.where(chosen < 0, tf.argmax(logits, axis=-1, output_type=tf.int32), chosen)
        score = tf.reduce_sum(tf.gather(logits, chosen, batch_dims=1))

        forward_ops = graph.get_operations()
        relus = [op for op in forward_ops if op.type in _relu.RELU_OPS]
        gates = [op.outputs[0] for op in relus]
        if method == "vanilla":
            return tf.gradients(score, x, unconnected_gradients="zero")[0]
        segments = _Segments(forward_ops, relus, score)
        sent_down = {}  # ReLU op name -> the gradient it sends to its input

        def gradient_at(tensor):
            # Gradient arriving at `tensor` along paths that cross no ReLU: from the
            # score, and from each ReLU met first on the way, through its grad_ys.
            reached_relus, reaches_score = segments.downstream_of(tensor)
            ys = [op.inputs[0] for op in reached_relus]
            grad_ys = [sent_down[op.name] for op in reached_relus]
            if reaches_score:
                ys.append(score)
                grad_ys.append(tf.ones_like(score))
            if not ys:
                return tf.zeros_like(tensor)
            return tf.gradients(
                ys, tensor, grad_ys=grad_ys, stop_gradients=gates, unconnected_gradients="zero"
            )[0]

        # Creation order is a topological order; walk it backwards so that every
        # ReLU downstream of this one has already sent its gradient down.
        for op in reversed(relus):
            thresholded = _relu.threshold(gradient_at(op.outputs[0]))
            if method == "guided":
                sent_down[op.name] = _relu.relu_backward(op.type, thresholded, op.outputs[0])
            else:  # deconvnet: no forward mask
                sent_down[op.name] = thresholded
        return gradient_at(x)

    return chain(tf.constant(images), tf.constant(targets)).numpy().astype(np.float32)


class _Segments:
    """Forward-graph walks from a tensor to the first ReLUs (and the score) it feeds."""

    def __init__(self, forward_ops, relus, score):
        self._forward = {op.name for op in forward_ops} | {score.op.name}
        self._relus = {op.name for op in relus}
        self._score = score.op.name

    def downstream_of(self, tensor):
        reached, reaches_score, seen = [], False, set()
        stack = list(tensor.consumers())
        while stack:
            op = stack.pop()
            if op.name in seen or op.name not in self._forward:
                continue  # already walked, or a gradient op built earlier
            seen.add(op.name)
            if op.name in self._relus:
                reached.append(op)  # a segment ends at the next ReLU
                continue
            if op.name == self._score:
                reaches_score = True
                continue
            for output in op.outputs:
                stack.extend(output.consumers())
        return reached, reaches_score
