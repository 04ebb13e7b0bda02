"""Op-level graph work shared by the engine and the reference chain.

Everything here runs while a forward pass is being traced into a ``tf.function``
graph: it reads the ops the trace created and never touches the Keras model.
"""

from __future__ import annotations

import collections

import tensorflow as tf

from guidedbp import _outputs
from guidedbp.engine.rules.relu import RELU_OPS
from guidedbp.engine.rules.table import GUIDED_GRADIENT

#: The op types an activation is found from (its nonlinear op), by the kind of activation
#: one of them alone is (``guidedbp.engine.graph.activations`` grows each into its region).
ACTIVATION_KINDS = {
    "Relu": "relu",
    "Relu6": "relu6",
    "LeakyRelu": "leaky_relu",
    "Elu": "elu",
    "Selu": "selu",
    "Sigmoid": "sigmoid",
    "Tanh": "tanh",
    "Softplus": "softplus",
    "Softsign": "softsign",
    "Erf": "gelu",
    "Erfc": "gelu",  # exact GELU, as tf.nn.gelu(approximate=False) builds it
}

#: The kinds of :data:`RELU_OPS`, those the ``relu`` scope guides.
RELU_KINDS = frozenset(("relu", "relu6"))

#: Activation ops inside control-flow functions, which keep their plain gradient there
#: (only ReLUs are guided inside functions), by the kind the report names.
PLAIN_ACTIVATION_OPS = {op: kind for op, kind in ACTIVATION_KINDS.items()
                        if op not in RELU_OPS}

def set_gradient(ops: list[tf.Operation], gradient: str | None) -> None:
    """Point ``ops`` at a registered gradient, or back at their own (``None``).

    This is the attribute ``gradient_override_map`` sets on ops it creates; it is
    read when ``tf.gradients`` builds the backward pass, so changing it between two
    ``tf.gradients`` calls gives each call its own gradient for the same forward.
    """
    from tensorflow.core.framework import attr_value_pb2

    for op in ops:
        if gradient is None:
            op._clear_attr("_gradient_op_type")
        else:
            op._set_attr("_gradient_op_type", attr_value_pb2.AttrValue(s=gradient.encode()))


# Op types whose attributes name functions that they run.
_CALLS_FUNCTIONS = frozenset(("If", "StatelessIf", "While", "StatelessWhile", "Case",
                              "StatelessCase", "PartitionedCall", "StatefulPartitionedCall"))


# Where while_v2 and cond_v2 keep, on a control-flow op they build, the graph of each
# function it runs: (attribute naming the function(s), attribute holding the graph(s)).
_BUILT_GRAPHS = (("cond", "_cond_graph"), ("body", "_body_graph"),
                 ("then_branch", "_true_graph"), ("else_branch", "_false_graph"),
                 ("branches", "_branch_graphs"))


def built_function_graphs(ops: list[tf.Operation]) -> dict:
    """``{function name: FuncGraph}`` of the ``tf.while_loop`` bodies and conditions and
    the ``tf.cond`` branches that ``ops`` run and that were built in this trace (a Keras
    layer's own control flow), nested ones too.

    Their ops are this trace's, built in graphs of their own, out of reach of the
    ``gradient_override_map`` in force; the gradient of the loop or branch is built from
    them (not from the function's definition) at each ``tf.gradients`` call. A
    SavedModel's functions, imported from a GraphDef, have no such graph: their
    definitions carry the override (:meth:`guidedbp.models.frozen.FrozenGraph.__call__`).
    """
    graphs, pending = {}, list(ops)
    while pending:
        op = pending.pop()
        if op.type not in _CALLS_FUNCTIONS:
            continue
        for attribute, cached in _BUILT_GRAPHS:
            built = getattr(op, cached, None)
            if built is None or attribute not in op.node_def.attr:
                continue
            value = op.node_def.attr[attribute]
            names = [value.func.name] if value.HasField("func") else \
                [func.name for func in value.list.func]
            built = built if isinstance(built, (list, tuple)) else [built]
            for name, function_graph in zip(names, built):
                if name not in graphs:
                    graphs[name] = function_graph
                    pending.extend(function_graph.get_operations())
    return graphs


def function_ops(ops: list[tf.Operation]) -> list:
    """The nodes (``NodeDef``) of every function that ``ops`` call (the branches of ``If``,
    the bodies of ``While``, and the functions those call), each function once: as its
    graph holds them now where it was built in this trace (:func:`built_function_graphs`),
    else as its definition lists them."""
    graph = ops[0].graph if ops else None
    built = built_function_graphs(ops)
    seen, pending, nodes = set(), [], []
    for op in ops:
        if op.type in _CALLS_FUNCTIONS:
            pending.extend(_called(op.node_def))
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in built:
            definition_nodes = [op.node_def for op in built[name].get_operations()]
        else:
            function = graph._get_function(name)
            definition = (getattr(function, "cached_definition", None)  # a tf.function's
                          or getattr(function, "definition", None))  # a tf.compat.v1 Defun's
            if definition is None:
                continue
            definition_nodes = definition.node_def
        for node in definition_nodes:
            nodes.append(node)
            pending.extend(_called(node))
    return nodes


def built_function_relus(ops: list[tf.Operation]) -> list[tf.Operation]:
    """The ReLU-family ops inside the functions built in this trace
    (:func:`built_function_graphs`), but those of signed compositions (PReLU's parts,
    :func:`signed_compositions`), which keep their plain gradient."""
    relus = []
    for function_graph in built_function_graphs(ops).values():
        inside = relu_ops(function_graph.get_operations())
        signed = {op.name for op in signed_compositions(inside)}
        relus.extend(op for op in inside if op.name not in signed)
    return relus


def _called(node_def) -> list[str]:
    """The function names a node's attributes hold (``then_branch``, ``body``, ``f``...)."""
    names = []
    for value in node_def.attr.values():
        if value.HasField("func"):
            names.append(value.func.name)
        names.extend(func.name for func in value.list.func)
    return names


def find_logits(output: tf.Tensor) -> tuple[tf.Tensor, str | None, tf.Operation | None]:
    """Walk back from a model output to the pre-activation logits.

    Returns the logits tensor, the name of the head that was bypassed
    (``"softmax"``, ``"sigmoid"``, ``"log_softmax"``) or ``None``, and the head op.
    """
    return _outputs.behind_head(output)


def class_scores(logits: tf.Tensor, output: tf.Tensor, head: str | None):
    """The float32 score of every class, and every class's probability.

    A model with one logit ``z`` is a binary classifier: class 1 scores ``z`` and
    class 0 scores ``-z``, so both classes can be explained. Probabilities come from
    the model's own head where it has one, else from a softmax (a sigmoid for one
    logit) of the logits.

    Args:
        logits: ``(N, K)`` pre-activation logits (:func:`find_logits`).
        output: ``(N, K)`` the model's output.
        head: The bypassed head's name, or ``None``.

    Returns:
        ``(scores, probabilities)``, both float32 ``(N, max(K, 2))``.
    """
    logits = tf.cast(logits, tf.float32)
    output = tf.cast(output, tf.float32)
    if head in ("softmax", "sigmoid"):
        probabilities = output
    elif head == "log_softmax":
        probabilities = tf.exp(output)
    elif logits.shape[-1] == 1:
        probabilities = tf.sigmoid(logits)
    else:
        probabilities = tf.nn.softmax(logits)
    if logits.shape[-1] == 1:
        logits = tf.concat([-logits, logits], axis=-1)
        probabilities = tf.concat([1.0 - probabilities, probabilities], axis=-1)
    return logits, probabilities


def descendants(op: tf.Operation) -> set[str]:
    """Names of ``op`` and of every op that reads its outputs, directly or not."""
    return _reached(op, lambda current: [consumer for output in current.outputs
                                         for consumer in output.consumers()])


def ancestors(op: tf.Operation) -> set[str]:
    """Names of ``op`` and of every op it reads (inputs and control inputs), directly
    or not."""
    return _reached(op, lambda current: [*(tensor.op for tensor in current.inputs),
                                         *current.control_inputs])


def _reached(op: tf.Operation, neighbours) -> set[str]:
    """Names of ``op`` and of every op reached from it through ``neighbours(op)``."""
    names, stack = set(), [op]
    while stack:
        current = stack.pop()
        if current.name in names:
            continue
        names.add(current.name)
        stack.extend(neighbours(current))
    return names


def relu_ops(ops: list[tf.Operation]) -> list[tf.Operation]:
    """Every ReLU-family op among ``ops``, in creation (topological) order."""
    return [op for op in ops if op.type in RELU_OPS]


def signed_compositions(relus: list[tf.Operation]) -> list[tf.Operation]:
    """ReLUs that build a signed activation rather than gate a signal.

    Keras' ``PReLU`` (and ``ReLU`` with both ``negative_slope`` and ``max_value``)
    compute ``relu(x) - a * relu(-x)``. Those ReLUs are parts of a leaky
    activation whose gradient must stay plain, so they are left alone: both the
    ``relu(-x)`` and the ``relu(x)`` that shares its ``x``.
    """
    negative_parts = [op for op in relus if op.inputs[0].op.type == "Neg"]
    sources = {op.inputs[0].op.inputs[0].name for op in negative_parts}
    positive_parts = [op for op in relus if op.inputs[0].name in sources]
    return negative_parts + positive_parts


def function_census(function_nodes: list
                    ) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    """The activations inside the functions the forward ops call (``function_nodes``,
    :func:`function_ops`), by kind: the ReLUs guided, the other activations (left plain:
    only ReLUs are guided inside functions), and the ReLUs the guided gradient did not
    reach (a nested ``tf.function``'s, whose gradient TensorFlow builds once and keeps)."""
    guided, unreached = collections.Counter(), collections.Counter()
    for node in function_nodes:
        if node.op in RELU_OPS:
            marked = node.attr["_gradient_op_type"].s == GUIDED_GRADIENT.encode() \
                if "_gradient_op_type" in node.attr else False
            (guided if marked else unreached)[ACTIVATION_KINDS[node.op]] += 1
    plain = collections.Counter(PLAIN_ACTIVATION_OPS[node.op] for node in function_nodes
                                if node.op in PLAIN_ACTIVATION_OPS)
    return dict(guided), dict(plain), dict(unreached)
