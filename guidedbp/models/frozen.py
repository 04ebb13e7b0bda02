"""A frozen graph: one GraphDef whose large weights are fed as tensors.

:class:`FrozenGraph` is what a SavedModel signature becomes once inlined (see
:mod:`guidedbp.models.savedmodel` and :mod:`guidedbp.models.inlining`): a callable the
engine traces like a Keras model. Its weights can be read (:attr:`FrozenGraph.weights`)
and replaced in a new graph (:meth:`FrozenGraph.with_weights`); a graph is never
changed once built.
"""

from __future__ import annotations

import types
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

__all__ = ["FrozenGraph", "constant_to_placeholder", "prune_graph_def"]


class FrozenGraph:
    """A SavedModel signature inlined into one GraphDef, its weights fed as tensors.

    Calling it imports the graph into the graph being traced, so every ReLU inside
    the SavedModel's functions is an ordinary op that the engine's gradient swap
    reaches; those of ``tf.cond`` branches and ``tf.while_loop`` bodies, which stay
    functions, get the ``gradient_override_map`` in force written into their
    definitions. The GraphDef is built once, at load time; its small constants stay in
    it, and its large weights are ``Placeholder`` nodes fed from :attr:`weights`: those
    given (a SavedModel's large variables, never copied into the GraphDef) and any
    constant with more than :attr:`LIFT_ELEMENTS` elements, lifted out of it.

    Attributes:
        graph_def: The ``GraphDef``; weights are ``Placeholder`` nodes in it.
            Treat it as read-only: graphs made by :meth:`with_weights` share it.
        input_name: The image tensor's name in ``graph_def`` (``"x:0"``).
        output_name: The output tensor's name in ``graph_def``; or, for a graph that
            returns several outputs, ``{output name: tensor name}``: calling it then
            returns a dict of tensors by output name, in that order.
        output_names: The outputs' names (the signature's output keys), or ``None``
            where they are not known.
        inputs: ``[tf.TensorSpec]`` of the image input (batch dimension free).
        outputs: ``[tf.TensorSpec]`` of each output, in order (empty where not known),
            as a Keras model's ``outputs`` give their shapes.
        name: A display name.
    """

    #: Constants (and a SavedModel's variables) with more elements than this are fed
    #: as weights rather than held in the GraphDef.
    LIFT_ELEMENTS = 1024

    def __init__(self, graph_def, input_name: str, output_name: str | Mapping[str, str],
                 input_spec, name: str, output_names: Sequence[str] | None = None,
                 output_specs: Sequence = (), weights: Mapping | None = None):
        """``weights``: the weights already out of ``graph_def`` (a SavedModel's large
        variables), ``{its Placeholder node's name: eager tf.Tensor}``; constants over
        :attr:`LIFT_ELEMENTS` elements are lifted out here and join them."""
        graph_def, lifted = _lift_constants(graph_def, self.LIFT_ELEMENTS)
        weights = {**(weights or {}), **lifted}
        if isinstance(output_name, Mapping):
            output_name, output_names = dict(output_name), list(output_name)
        self._set(graph_def, weights, input_name, output_name, input_spec, name,
                  None if output_names is None else list(output_names), list(output_specs))

    def _set(self, graph_def, weights: dict, input_name, output_name, input_spec, name,
             output_names, output_specs: list) -> None:
        self.graph_def = graph_def
        self._weights = weights
        self.input_name = input_name
        self.output_name = output_name
        self.output_names = output_names  # what the engine's output= names them by
        self.inputs = [input_spec]  # what the engine reads the image shape from
        self.outputs = output_specs
        self.name = name
        self._eager_call = None

    def _derived(self, graph_def, weights: dict) -> FrozenGraph:
        """A new graph with this one's input, outputs and name: nothing mutable shared
        but ``graph_def``, which no graph changes."""
        graph = object.__new__(type(self))
        graph._set(graph_def, weights, self.input_name, self.output_name, self.inputs[0],
                   self.name, self.output_names, self.outputs)
        return graph

    @property
    def function_op_types(self) -> set[str]:
        """The op types inside the graph's functions (``tf.cond`` branches,
        ``tf.while_loop`` bodies): ops that run there, each run of a loop again."""
        return {node.op for function in self.graph_def.library.function
                for node in function.node_def}

    @property
    def weights(self) -> Mapping:
        """The lifted constants, read-only: ``{node name: eager tf.Tensor}``."""
        return types.MappingProxyType(self._weights)

    def with_weights(self, replacements: Mapping[str, np.ndarray]) -> FrozenGraph:
        """A new graph where some weights have other values; this one is unchanged.

        Args:
            replacements: ``{name: value}`` for names in :attr:`weights`; each value
                takes the shape of the weight it replaces and is cast to its dtype.

        Returns:
            A :class:`FrozenGraph` sharing this one's ``graph_def``.

        Raises:
            KeyError: For a name that is not a weight (see :meth:`with_lifted`).
            ValueError: For a value whose shape differs from the weight's.
        """
        import tensorflow as tf

        weights = dict(self._weights)
        for name, value in replacements.items():
            if name not in weights:
                raise KeyError(f"{name!r} is not a weight of this graph; lift it first")
            old = weights[name]
            value = tf.constant(value, dtype=old.dtype)
            if value.shape != old.shape:
                raise ValueError(
                    f"weight {name!r} has shape {tuple(old.shape)}, got {tuple(value.shape)}"
                )
            weights[name] = value
        return self._derived(self.graph_def, weights)

    def with_lifted(self, names: Iterable[str]) -> FrozenGraph:
        """A new graph, computing the same, where the named constants are weights too.

        Small constants stay inside the GraphDef; lift the ones you want to read or
        replace through :attr:`weights` and :meth:`with_weights`.

        Args:
            names: ``Const`` node names (names that already are weights are skipped).

        Returns:
            A :class:`FrozenGraph` with its own copy of the GraphDef.

        Raises:
            KeyError: For a name that is neither a weight nor a ``Const`` node.
        """
        import tensorflow as tf
        from tensorflow.core.framework import graph_pb2

        wanted = set(names) - set(self._weights)
        graph_def = graph_pb2.GraphDef()
        graph_def.CopyFrom(self.graph_def)
        weights = dict(self._weights)
        for node in graph_def.node:
            if node.name in wanted and node.op == "Const":
                weights[node.name] = tf.constant(constant_to_placeholder(node))
                wanted.discard(node.name)
        if wanted:
            raise KeyError(f"not constants of this graph: {', '.join(sorted(wanted))}")
        return self._derived(graph_def, weights)

    def __call__(self, images, training: bool = False):
        import tensorflow as tf

        del training  # a SavedModel signature is already in inference mode
        if tf.executing_eagerly():  # importing a graph needs a graph: trace one, once
            if self._eager_call is None:
                self._eager_call = tf.function(self.__call__, input_signature=self.inputs)
            return self._eager_call(tf.cast(images, self.inputs[0].dtype))
        images = tf.cast(images, self.inputs[0].dtype)
        graph = tf.compat.v1.get_default_graph()
        weights = {name: graph.capture(value) for name, value in self._weights.items()}
        several = isinstance(self.output_name, dict)
        wanted = list(self.output_name.values()) if several else [self.output_name]
        outputs = tf.graph_util.import_graph_def(
            _with_gradient_overrides(self.graph_def, graph._gradient_override_map),
            input_map={self.input_name: images, **weights},
            return_elements=wanted,
            name="savedmodel",
        )
        return dict(zip(self.output_name, outputs)) if several else outputs[0]


def _with_gradient_overrides(graph_def, override: Mapping[str, str]):
    """``graph_def`` with the ``gradient_override_map`` in force set on the nodes of its
    functions (``tf.cond`` branches, ``tf.while_loop`` bodies) too.

    Importing sets the map on the graph's own nodes only; function bodies are rebuilt
    from their definitions when ``tf.gradients`` runs, and take the gradient named in
    those. Without this, a ReLU inside a loop body would keep its plain gradient.
    """
    if not override or not graph_def.library.function:
        return graph_def
    from tensorflow.core.framework import graph_pb2

    marked = graph_pb2.GraphDef()
    marked.CopyFrom(graph_def)
    for function in marked.library.function:
        for node in function.node_def:
            if node.op in override:
                node.attr["_gradient_op_type"].s = override[node.op].encode()
    return marked


def _lift_constants(graph_def, min_elements: int):
    """Replace large Const nodes (weights frozen in) by placeholders fed eager tensors.

    Importing a GraphDef copies every constant into the graph being traced, and a
    ResNet50 carries 100 MB of them. Fed as eager tensors instead, the weights are
    captured by reference: tracing is faster and the graph stays small. The values
    are the same, so the maps are too.
    """
    import tensorflow as tf
    from tensorflow.core.framework import graph_pb2

    lifted = graph_pb2.GraphDef()
    lifted.CopyFrom(graph_def)
    weights = {}
    for node in lifted.node:
        if node.op != "Const":
            continue
        shape = [d.size for d in node.attr["value"].tensor.tensor_shape.dim]
        if int(np.prod(shape, dtype=np.int64)) <= min_elements:
            continue
        weights[node.name] = tf.constant(constant_to_placeholder(node))
    return lifted, weights


def constant_to_placeholder(node) -> np.ndarray:
    """Turn a GraphDef ``Const`` node into a ``Placeholder`` in place.

    Args:
        node: A ``NodeDef`` whose ``op`` is ``"Const"``.

    Returns:
        The constant's value.
    """
    import tensorflow as tf

    value = tf.make_ndarray(node.attr["value"].tensor)
    dtype = node.attr["dtype"]
    node.op = "Placeholder"
    node.ClearField("attr")
    node.attr["dtype"].CopyFrom(dtype)
    node.attr["shape"].shape.CopyFrom(tf.TensorShape(value.shape).as_proto())
    return value


def prune_graph_def(graph_def, output_name: str | Iterable[str]):
    """``graph_def`` cut down to the nodes ``output_name`` depends on, in their order.

    A signature's other outputs (an embedding beside the logits) would otherwise be
    imported too: their ReLUs would show in the report and their inputs would need
    feeding.

    Args:
        graph_def: A ``GraphDef``; it is not changed.
        output_name: The name of the node (not tensor) to keep with its inputs, or
            several such names.

    Returns:
        A new ``GraphDef`` with the same versions and function library.
    """
    import tensorflow as tf

    inputs = {
        node.name: [name.lstrip("^").split(":")[0] for name in node.input]
        for node in graph_def.node
    }
    needed = set()
    pending = [output_name] if isinstance(output_name, str) else list(output_name)
    while pending:
        name = pending.pop()
        if name not in needed:
            needed.add(name)
            pending.extend(inputs.get(name, ()))
    pruned = tf.compat.v1.GraphDef()
    pruned.versions.CopyFrom(graph_def.versions)
    pruned.library.CopyFrom(graph_def.library)
    pruned.node.extend(node for node in graph_def.node if node.name in needed)
    return pruned
