"""Cascading model-parameter randomization on a copy of the model.

Adebayo et al. (2018), "Sanity Checks for Saliency Maps": re-draw the weights of the
top layer, then of the top two, and so on, and watch the saliency map. A map that
stays the same while the network it explains is destroyed does not explain that
network. (Their finding for guided backprop: its maps change little under this test.)

The user's model is never touched: Keras models are cloned (``clone_model``, then
the original's weights copied in) and the clone's variables re-drawn, one layer
more at each step; SavedModels (:class:`~guidedbp.models.frozen.FrozenGraph`) get a
new graph per step (:meth:`~guidedbp.models.frozen.FrozenGraph.with_weights`); a
frozen graph is never changed.

A step re-draws one weighted layer: a layer with a kernel (dense, convolution).
Each of its trainable tensors (Keras: kernel and bias; SavedModels: the kernel) takes
normal values with the mean and standard deviation of the original tensor (seeded),
so the network keeps its scale and stays finite.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from guidedbp.errors import GuidedbpError


class CannotCopy(ValueError, GuidedbpError):
    """The model cannot be copied for randomization; the message says why."""


def cascade(model, steps: int, seed: int = 0) -> Iterator[tuple[str, object]]:
    """Randomized copies of ``model``: top weighted layer first, one more each step.

    Args:
        model: A ``keras.Model`` or a :class:`~guidedbp.models.frozen.FrozenGraph`.
        steps: At most this many steps (fewer when the model has fewer weighted layers).
        seed: Seeds the random weights.

    Yields:
        ``(layer_name, randomized_model)`` per step. For Keras models the same clone
        is yielded each time, re-drawn one layer further; for frozen graphs a new
        graph object is yielded at each step.

    Raises:
        CannotCopy: For a model that cannot be copied or has no weights to re-draw.
    """
    from guidedbp.models.frozen import FrozenGraph

    if isinstance(model, FrozenGraph):
        return _frozen_cascade(model, steps, seed)
    return _keras_cascade(model, steps, seed)


def weighted_layers(model) -> list:
    """Layers with a kernel of their own (a trainable variable of rank >= 2: dense,
    convolution, embedding), in the model's (topological) order, nested models and
    layers inside custom layers included. Normalization layers and PReLU are not
    steps of the cascade (as in a SavedModel, where only kernels are found)."""
    return [layer for layer in model._flatten_layers(include_self=False, recursive=True)
            if any(len(v.shape) >= 2 for v in own_weights(layer))]


def own_weights(layer) -> list:
    """The layer's trainable variables that none of its sub-layers owns."""
    inner = {id(v) for sub in layer._flatten_layers(include_self=False, recursive=True)
             for v in sub.weights}
    return [v for v in layer.weights if getattr(v, "trainable", True) and id(v) not in inner]


def _redraw(value: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    values = np.asarray(value)
    std = float(np.std(values)) if values.size else 0.0
    mean = float(np.mean(values)) if values.size else 0.0
    return rng.normal(mean, std, size=values.shape).astype(values.dtype)


# -- Keras -------------------------------------------------------------------------------


def copy_keras_model(model):
    """A clone of ``model`` with the same weights, sharing no variable with it."""
    import keras

    try:
        clone = keras.models.clone_model(model)
        clone.set_weights(model.get_weights())
    except Exception as error:  # Keras raises many types for models it cannot clone
        text = " ".join(str(error).split())[:200]
        raise CannotCopy(f"keras.models.clone_model cannot copy this model: {text}") from error
    if {id(v) for v in clone.weights} & {id(v) for v in model.weights}:
        # A layer the clone reuses instead of copying: re-drawing it would change the model.
        raise CannotCopy("keras.models.clone_model shares weights with the model")
    return clone


def _keras_cascade(model, steps: int, seed: int):
    clone = copy_keras_model(model)
    layers = weighted_layers(clone)
    if not layers:
        raise CannotCopy("the model has no layer with a kernel to re-draw")
    rng = np.random.default_rng(seed)

    def steps_iterator():
        for layer in list(reversed(layers))[:steps]:
            for variable in own_weights(layer):
                variable.assign(_redraw(variable.numpy(), rng))
            yield layer.name, clone

    return steps_iterator()


# -- SavedModels (FrozenGraph) -----------------------------------------------------------


def _frozen_cascade(graph, steps: int, seed: int):
    kernels = frozen_kernels(graph)
    if not kernels:
        raise CannotCopy("the SavedModel's graph has no kernel (float tensor of rank >= 2)")
    chosen = kernels[:steps]
    # Small kernels are constants inside the GraphDef: make every chosen one a weight.
    lifted = graph.with_lifted(name for name, _ in chosen)
    originals = {name: lifted.weights[name].numpy() for name, _ in chosen}
    rng = np.random.default_rng(seed)

    def steps_iterator():
        redrawn = {}
        for name, label in chosen:
            redrawn[name] = _redraw(originals[name], rng)
            yield label, lifted.with_weights(redrawn)

    return steps_iterator()


def frozen_kernels(graph) -> list[tuple[str, str]]:
    """The frozen graph's kernels (float constants of rank >= 2, lifted or not), the
    one nearest the output first, as ``(node name, label)``; the label is the name
    scope of the op that applies the kernel (``model/conv5``)."""
    import tensorflow as tf

    nodes = list(graph.graph_def.node)
    lifted = graph.weights
    kernels = []
    for node in nodes:
        if node.name in lifted:
            value = lifted[node.name]
            if value.dtype.is_floating and value.shape.rank >= 2:
                kernels.append(node.name)
        elif node.op == "Const":
            dtype = tf.dtypes.as_dtype(node.attr["dtype"].type)
            rank = len(node.attr["value"].tensor.tensor_shape.dim)
            if dtype.is_floating and rank >= 2:
                kernels.append(node.name)
    use = _first_use(nodes, graph.input_name.split(":")[0])
    order = {node.name: index for index, node in enumerate(nodes)}
    used = [name for name in kernels if use.get(name) is not None]
    used.sort(key=lambda name: (use[name][0], order[name]), reverse=True)
    return [(name, _scope_label(use[name][1])) for name in used]


def _scope_label(op_name: str) -> str:
    parts = [p for p in op_name.split("/")[:-1] if p != "StatefulPartitionedCall"]
    return "/".join(parts) or op_name


def _first_use(nodes, input_name: str) -> dict[str, tuple[int, str] | None]:
    """For every node that does not depend on the image: the first op (fewest steps
    from the image input, by longest path) that combines it with image-dependent
    data, as ``(depth, op name)``; ``None`` where it never meets the image."""
    inputs = {node.name: [i.lstrip("^").split(":")[0] for i in node.input if not i.startswith("^")]
              for node in nodes}
    consumers: dict[str, list[str]] = {node.name: [] for node in nodes}
    for name, sources in inputs.items():
        for source in sources:
            consumers.setdefault(source, []).append(name)
    # Longest path from the input over a topological order (Kahn's algorithm).
    pending = {name: len(sources) for name, sources in inputs.items()}
    ready = [name for name, count in pending.items() if count == 0]
    depth: dict[str, int | None] = {}
    while ready:
        name = ready.pop()
        reached = [depth[s] for s in inputs[name] if depth.get(s) is not None]
        depth[name] = 0 if name == input_name else (max(reached) + 1 if reached else None)
        for consumer in consumers.get(name, ()):
            pending[consumer] -= 1
            if pending[consumer] == 0:
                ready.append(consumer)
    use: dict[str, tuple[int, str] | None] = {}
    for node in nodes:
        if depth.get(node.name) is not None:
            continue
        # Follow constant-only ops (Identity, Cast) to the ops that meet the image.
        seen, frontier, met = set(), [node.name], []
        while frontier:
            current = frontier.pop()
            for consumer in consumers.get(current, ()):
                if consumer in seen:
                    continue
                seen.add(consumer)
                if depth.get(consumer) is not None:
                    met.append((depth[consumer], consumer))
                else:
                    frontier.append(consumer)
        use[node.name] = min(met) if met else None
    return use

