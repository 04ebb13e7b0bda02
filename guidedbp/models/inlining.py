"""A SavedModel signature inlined into one GraphDef, its large variables fed by reference.

TensorFlow's ``convert_variables_to_constants_v2`` inlines a concrete function's calls
(Grappler's function inlining) and writes every variable into the graph as a ``Const``:
a copy of every weight, serialised into the GraphDef, parsed again when the frozen
function is rebuilt, and copied once more when guidedbp lifts it back out to feed it
as a tensor. For VGG16 that made loading 27 s and 8 GB. :func:`inline_signature` uses
the same converter, whose bookkeeping (the read ops that become ``Identity``, the
dtypes of ``tf.cond`` branches and ``tf.while_loop`` bodies that a variable flows into)
it keeps, but hands it, for each large variable, a stand-in that holds only the
variable's shape and dtype. That variable's node is then a ``Placeholder`` fed with the
variable's own value, a tensor that shares the variable's memory. Small variables
become constants as before, and the nodes are listed as TensorFlow's frozen function
listed them, so what depends on their order (the kernels a randomization check
re-draws first, of two at the same depth) is unchanged.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["InlinedSignature", "inline_signature", "register_functions"]


@dataclass(frozen=True)
class InlinedSignature:
    """A concrete function as one GraphDef.

    Attributes:
        graph_def: The function's graph with its calls inlined (``tf.cond`` branches and
            ``tf.while_loop`` bodies stay functions of its library), cut down to the
            function's inputs and the nodes its outputs need; both keep their tensor
            names (those of ``function.inputs`` and ``function.outputs``). Small
            variables are ``Const`` nodes, large ones ``Placeholder`` nodes named in
            :attr:`weights`.
        weights: ``{placeholder node name: eager tf.Tensor}``, the large variables'
            values (no copy: each reads its variable's buffer).
    """

    graph_def: Any
    weights: Mapping[str, Any]


def inline_signature(function, lift_elements: int) -> InlinedSignature:
    """Inline ``function``'s calls; fold small variables, feed large ones by reference.

    Control flow stays functional (``If``, ``While``): lowered to Switch/Merge/Enter/Exit
    it could not be imported into a ``tf.function`` (frames) nor differentiated (no
    context). Nothing of the function runs: Grappler only rewrites its graph, and the
    variables are read.

    Args:
        function: A concrete function (a loaded SavedModel's signature).
        lift_elements: Variables with more elements than this are fed, not folded.

    Returns:
        The :class:`InlinedSignature`.
    """
    from tensorflow.python.framework import convert_to_constants

    class ConverterData(convert_to_constants._FunctionConverterDataInEager):
        # The converter reads each variable captured by the function through _eval.
        def _eval(self, tensor):
            if _is_large_variable(tensor, lift_elements):
                return _StandIn(tensor.value())
            return super()._eval(tensor)

    data = ConverterData(func=function, lower_control_flow=False, aggressive_inlining=False)
    graph_def, _ = convert_to_constants._replace_variables_by_constants(converter_data=data)
    weights = {name: tensor_data.numpy.value for name, tensor_data in data.tensor_data.items()
               if isinstance(tensor_data.numpy, _StandIn)}
    # The function's inputs that were not variables: the signature's own.
    feeds = [t.op.name for t in function.inputs if t.op.name not in data.tensor_data]
    del data  # the converter's copies of the graph
    ordered = _in_frozen_order(graph_def, feeds, [t.op.name for t in function.outputs])
    # The converter wrote each stand-in as a one-value Const of its shape: make it the
    # placeholder the value is fed to.
    for node in ordered.node:
        value = weights.get(node.name)
        if value is not None:
            node.op = "Placeholder"
            node.ClearField("attr")
            node.attr["dtype"].type = value.dtype.as_datatype_enum
            node.attr["shape"].shape.CopyFrom(value.shape.as_proto())
    kept = {node.name for node in ordered.node}
    return InlinedSignature(ordered, {name: value for name, value in weights.items()
                                      if name in kept})


def register_functions(graph_def) -> None:
    """Make ``graph_def``'s functions (loop bodies, branches) known to the eager runtime,
    for the life of the process, as TensorFlow's frozen function made them.

    A ``tf.function`` that imports the GraphDef adds them to its graph but runs them by
    name from the runtime, where the loaded SavedModel's own copies go when it does.
    Register them before changing them: a name registered twice must keep its definition.
    """
    from tensorflow.python.eager import context

    for function_def in graph_def.library.function:
        context.context().add_function_def(function_def)


def _in_frozen_order(graph_def, feeds: Sequence[str], fetches: Sequence[str]):
    """``graph_def`` cut down to ``feeds`` and what ``fetches`` need (node names), its
    nodes in the order TensorFlow's frozen function lists them.

    That function was this graph, pruned by ``lift_to_graph``: the feeds first, then,
    reversed, a depth-first walk from the fetches that reaches a node once all its
    consumers are reached, nodes without inputs (constants) moved to its end. A cycle
    (a TensorFlow 1 loop, refused later) is entered at its first node by name.

    Returns:
        A new ``GraphDef`` with the same versions and function library.
    """
    import tensorflow as tf

    by_name = {node.name: node for node in graph_def.node}
    # A NodeDef lists its data inputs, then its control inputs ("^name"), as an op does.
    inputs = {name: [source.lstrip("^").split(":")[0] for source in node.input]
              for name, node in by_name.items()}
    consumers: dict[str, set[str]] = defaultdict(set)
    reached = set(feeds)
    for fetch in fetches:
        pending = [fetch]
        while pending:
            name = pending.pop()
            if name in reached:
                continue
            reached.add(name)
            for source in inputs[name]:
                consumers[source].add(name)
                if source not in reached:
                    pending.append(source)
    walk, done = [], set()
    pending = [name for name in fetches if not consumers[name]]
    waiting = set(pending)
    while waiting:
        while pending:
            name = pending.pop()
            if name in done:
                continue
            done.add(name)
            walk.append(name)
            for source in inputs[name]:
                waiting.add(source)
                if consumers[source] <= done:
                    pending.append(source)
        waiting -= done
        if waiting:
            pending.append(min(waiting))
    walk.sort(key=lambda name: not inputs[name])  # stable: constants last
    order = [*feeds, *(name for name in reversed(walk) if name not in feeds)]
    ordered = tf.compat.v1.GraphDef()
    ordered.versions.CopyFrom(graph_def.versions)
    ordered.library.CopyFrom(graph_def.library)
    ordered.node.extend(by_name[name] for name in order)
    return ordered


def _is_large_variable(tensor, lift_elements: int) -> bool:
    import tensorflow as tf

    if not isinstance(tensor, tf.Variable):
        return False
    elements = tensor.shape.num_elements()
    return elements is not None and elements > lift_elements


class _StandIn:
    """What TensorFlow's converter is handed for a large variable's value.

    The converter reads ``shape`` (a loop's output shapes) and ``dtype`` (the dtypes it
    rewrites), and writes the value as a ``Const`` of ``shape``: ``__array__`` gives one
    zero, which a ``TensorProto`` of that shape repeats, so nothing of the size of the
    weight is made. :attr:`value` is the variable's value, fed in the Const's place.
    """

    def __init__(self, value):
        self.value = value
        self.shape = tuple(value.shape)
        self.dtype = np.dtype(value.dtype.as_numpy_dtype)

    def __array__(self, dtype=None, copy=None):
        return np.zeros((), self.dtype if dtype is None else dtype)
