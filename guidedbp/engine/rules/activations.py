"""The generalised rule's gradients: guided backpropagation and deconvnet at any
elementwise activation (:mod:`guidedbp.engine.graph.activations` finds the activations and
points their ops at these).

With ``g`` the gradient arriving at an activation's output ``y = f(x)``:

- :data:`GUIDED_ACTIVATION` on ``y``'s op sends ``f'(x) * max(g, 0)`` to ``x``: it
  thresholds ``g``, then runs the op's own gradient (the one it was created with,
  kept in the op's :data:`ORIGINAL_ATTR`);
- :data:`DECONVNET_ACTIVATION` on ``y``'s op sends ``max(g, 0)`` to its input on the path
  to ``x`` (the *spine*, :data:`SPINE_ATTR`) and nothing to its other inputs, and
  :data:`SPINE` on each further op of the spine passes what arrives on unchanged.
"""

from __future__ import annotations

import tensorflow as tf

from guidedbp.engine.rules.relu import threshold
from guidedbp.engine.rules.table import DECONVNET_ACTIVATION, GUIDED_ACTIVATION, SPINE

#: Attributes set on the ops pointed at these gradients: the output index of ``y``, the
#: input index of the spine, and the gradient the op had before.
OUTPUT_ATTR = "_guidedbp_output"
SPINE_ATTR = "_guidedbp_spine"
ORIGINAL_ATTR = "_guidedbp_original"

_registered = False


def _original_gradient(op: tf.Operation):
    from tensorflow.python.framework import ops as framework_ops

    name = op.node_def.attr[ORIGINAL_ATTR].s.decode() if ORIGINAL_ATTR in op.node_def.attr \
        else ""
    return framework_ops._gradient_registry.lookup(name or op.type)


def _guided_activation_gradient(op: tf.Operation, *grads):
    # f'(x) * max(g, 0): threshold what arrives at y, then the region's own gradient.
    slot = op.node_def.attr[OUTPUT_ATTR].i
    grads = list(grads)
    if grads[slot] is not None:
        grads[slot] = threshold(grads[slot])
    return _original_gradient(op)(op, *grads)


def _deconvnet_activation_gradient(op: tf.Operation, *grads):
    # max(g, 0) to x: down the spine only, ignoring f'.
    slot = op.node_def.attr[OUTPUT_ATTR].i
    spine = op.node_def.attr[SPINE_ATTR].i
    result = [None] * len(op.inputs)
    if grads[slot] is not None:
        result[spine] = threshold(grads[slot])
    return result


def _spine_gradient(op: tf.Operation, *grads):
    result = [None] * len(op.inputs)
    result[op.node_def.attr[SPINE_ATTR].i] = grads[0]
    return result


def register_gradients() -> None:
    """Register the rules' gradients once per process (TF refuses twice)."""
    global _registered
    if not _registered:
        tf.RegisterGradient(GUIDED_ACTIVATION)(_guided_activation_gradient)
        tf.RegisterGradient(DECONVNET_ACTIVATION)(_deconvnet_activation_gradient)
        tf.RegisterGradient(SPINE)(_spine_gradient)
        _registered = True
