"""The ReLU family's gradient rules: guided backpropagation's and deconvnet's.

Each rule is a gradient function registered once with TensorFlow under a name of its own
(:data:`GUIDED_GRADIENT`, :data:`DECONVNET_GRADIENT`): the traced graph's ReLU ops are
pointed at it (:func:`guidedbp.engine.graph.ops.set_gradient`, the graph's
``gradient_override_map``), and one ``tf.gradients`` call then applies it at every ReLU.
Its body is the ``grad_ys`` thresholding, :func:`threshold`, then (guided) the ReLU's own
gradient, :func:`relu_backward`.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import tensorflow as tf

from guidedbp.engine.rules.table import DECONVNET_GRADIENT, GUIDED_GRADIENT, RULES

#: ReLU-family op types whose gradient guided backprop replaces.
RELU_OPS = ("Relu", "Relu6")


_registered = False

# The ReLU rule of the tf.gradients call in progress ("plain", "guided", "deconvnet").
# ReLUs inside control-flow functions (a SavedModel's tf.cond branches and tf.while_loop
# bodies) are rebuilt from their definitions at every tf.gradients call, out of reach of
# set_gradient: they carry the guided gradient's name, which follows this rule.
_rule_in_functions: contextvars.ContextVar[str] = contextvars.ContextVar(
    "guidedbp_rule_in_functions", default="guided")


def threshold(grad: tf.Tensor) -> tf.Tensor:
    """The ``grad_ys`` thresholding: drop negative partial derivatives."""
    return tf.nn.relu(grad)  # one elementwise pass, no zeros tensor to materialise


def relu_backward(op_type: str, grad: tf.Tensor, output: tf.Tensor) -> tf.Tensor:
    """The ReLU's own gradient: pass ``grad`` where the forward unit was active."""
    if op_type == "Relu6":
        return tf.raw_ops.Relu6Grad(gradients=grad, features=output)
    return tf.raw_ops.ReluGrad(gradients=grad, features=output)


def _guided_relu(op: tf.Operation, grad: tf.Tensor) -> tf.Tensor:
    # Threshold the arriving gradient, then send it down through the op's own
    # gradient: exactly what the grad_ys formulation does, inside one pass.
    return relu_backward(op.type, threshold(grad), op.outputs[0])


def _deconvnet_relu(op: tf.Operation, grad: tf.Tensor) -> tf.Tensor:
    # Zeiler & Fergus: threshold the arriving gradient, ignore the forward mask.
    del op
    return threshold(grad)


#: Each rule's gradient of a ReLU-family op, by the name it is registered under.
RELU_MATH = {GUIDED_GRADIENT: _guided_relu, DECONVNET_GRADIENT: _deconvnet_relu}


def _guided_gradient(op: tf.Operation, grad: tf.Tensor) -> tf.Tensor:
    # Registered as the guided rule's. The ReLUs inside control-flow functions, which
    # every call rebuilds with this gradient, follow the rule of the call in progress.
    rule = RULES[_rule_in_functions.get()]
    if rule.relu_gradient is None:  # the plain rule: the ReLU's own gradient
        return relu_backward(op.type, grad, op.outputs[0])
    return RELU_MATH[rule.relu_gradient](op, grad)


def register_gradients() -> None:
    """Register the override gradients once per process (TF refuses twice)."""
    global _registered
    if not _registered:
        tf.RegisterGradient(GUIDED_GRADIENT)(_guided_gradient)
        for name, gradient in RELU_MATH.items():
            if name != GUIDED_GRADIENT:
                tf.RegisterGradient(name)(gradient)
        _registered = True


@contextlib.contextmanager
def rule_in_functions(rule: str) -> Iterator[None]:
    """Within: ReLUs inside control-flow functions follow ``rule`` (see set_gradient)."""
    token = _rule_in_functions.set(rule)
    try:
        yield
    finally:
        _rule_in_functions.reset(token)
