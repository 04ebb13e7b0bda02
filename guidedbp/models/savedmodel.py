"""SavedModel signatures inlined into a :class:`~guidedbp.models.frozen.FrozenGraph`.

One signature of a SavedModel folder is inlined into one graph
(:mod:`~guidedbp.models.inlining`: small variables become constants, large ones are fed
their restored values, never copied) and the graph cut down to the chosen output (or to
all of them, a dict by name), so the engine can trace it like a Keras model. A
SavedModel is a program: unless the caller trusts it, every op it would run (while
loading, and in the inlined signature) must be on the list of image-classifier ops in
:mod:`~guidedbp.models.safety`.
Expected failures raise :class:`~guidedbp.errors.ModelLoadError`.
"""

from __future__ import annotations

from pathlib import Path

from guidedbp._text import one_line
from guidedbp.errors import ModelLoadError
from guidedbp.models import safety
from guidedbp.models.frozen import FrozenGraph, prune_graph_def
from guidedbp.models.inlining import inline_signature, register_functions
from guidedbp.models.loaded import (
    DEFAULT_FILE_PREPROCESS,
    FILE_PREPROCESS_SOURCE,
    LoadedModel,
    check_input_size,
)
from guidedbp.models.scaling import rescales_itself

__all__ = ["is_saved_model", "load_saved_model"]


def is_saved_model(path: str | Path) -> bool:
    """Whether ``path`` is a folder holding a SavedModel (``saved_model.pb`` or ``.pbtxt``)."""
    path = Path(path)
    return (path / "saved_model.pb").is_file() or (path / "saved_model.pbtxt").is_file()


def load_saved_model(
    spec: str,
    signature: str = "serving_default",
    input_key: str | None = None,
    output_key: str | None = None,
    unsafe_deserialization: bool = False,
) -> LoadedModel:
    """Load one signature of a SavedModel folder as a :class:`FrozenGraph`.

    Nothing of the model runs before its ops are checked: the ops that loading would
    run are read from ``saved_model.pb`` first, and the inlined signature's ops before
    it is returned; both must be on :data:`~guidedbp.models.safety.CLASSIFIER_OPS`
    (plus :data:`~guidedbp.models.safety.LOADING_OPS` while loading).

    Args:
        spec: The SavedModel folder.
        signature: The signature to explain.
        input_key: The signature input holding the image, where it has several.
        output_key: The signature output to explain. Without it, a signature with
            several outputs loads them all: the model returns a dict by output name,
            sorted (pick one with the engine's ``output=``), leaving out, with a note, those
            that are not float or need another input than the image.
        unsafe_deserialization: Run ops that are not on the list (files, Python,
            printing...): for SavedModels you trust.

    Returns:
        A :class:`~guidedbp.models.loaded.LoadedModel` of format ``"savedmodel"``, with
        a note where its first ops do not rescale the pixels or where that cannot be
        told (:mod:`~guidedbp.models.scaling`), as a Keras model without a Rescaling
        layer has.

    Raises:
        ModelLoadError: With a one-line reason: unreadable, ops off the list, no such
            signature or key, a non-float, non-image or too large input, an output
            that needs other inputs, or a TensorFlow 1 while loop.
    """
    import tensorflow as tf

    if not unsafe_deserialization:
        try:
            loading_ops = safety.loading_op_types(spec)
        except Exception as error:  # OSError, protobuf's DecodeError
            raise ModelLoadError(
                f"{spec!r} is not a readable SavedModel: {one_line(error, limit=200)}"
            ) from error
        allowed = safety.CLASSIFIER_OPS | safety.LOADING_OPS
        _refuse_unlisted(spec, "runs, when it loads,", safety.unlisted_ops(loading_ops, allowed))
    try:
        saved = tf.saved_model.load(spec)
    except Exception as error:
        raise ModelLoadError(
            f"{spec!r} is not a readable SavedModel: {one_line(error, limit=200)}"
        ) from error
    signatures = dict(saved.signatures)
    if signature not in signatures:
        names = ", ".join(sorted(signatures)) or "none"
        raise ModelLoadError(f"{spec!r} has no signature {signature!r} (it has: {names})")
    function = signatures[signature]
    input_specs = function.structured_input_signature[1]
    in_key = _pick(spec, "input", input_specs, input_key, "input_key")
    out_keys = _outputs(spec, function.structured_outputs, output_key)
    input_spec = input_specs[in_key]
    if not input_spec.dtype.is_floating:
        raise ModelLoadError(
            f"{spec!r} takes {input_spec.dtype.name} input {in_key!r}; gradients need a float input"
        )
    if input_spec.shape.rank != 4:
        raise ModelLoadError(
            f"{spec!r} input {in_key!r} has shape {input_spec.shape}, not (N, H, W, C) images"
        )
    check_input_size(spec, tuple(input_spec.shape[1:]))
    try:
        inlined = inline_signature(function, FrozenGraph.LIFT_ELEMENTS)
    except Exception as error:
        raise ModelLoadError(
            f"cannot inline {spec!r}'s graph: {one_line(error, limit=200)}"
        ) from error
    flat_inputs = tf.nest.flatten(function.structured_input_signature, expand_composites=True)
    flat_names = [s.name for s in flat_inputs]
    # The signature's own inputs come first; captured variables follow.
    inputs, outputs = function.inputs[:len(flat_inputs)], function.outputs
    inlined_graph_def = inlined.graph_def  # what runs: the ops checked below
    if not unsafe_deserialization:
        used = safety.graph_op_types(inlined_graph_def)
        _refuse_unlisted(spec, f"signature {signature!r} uses", safety.unlisted_ops(used))
    if any(node.op in _TF1_LOOP_OPS for node in inlined_graph_def.node):
        # Its gradient needs the loop's WhileContext, which a GraphDef does not carry.
        raise ModelLoadError(
            f"{spec!r} signature {signature!r} holds a TensorFlow 1 while loop (Enter, Exit, "
            "NextIteration), which cannot be differentiated once imported: export the model "
            "with TensorFlow 2 control flow (tf.while_loop inside a tf.function)"
        )
    register_functions(inlined_graph_def)
    placeholder = inputs[flat_names.index(input_spec.name)]
    # Outputs come in tf.nest's flattening order of the signature's outputs.
    output_keys = tf.nest.flatten({key: key for key in function.structured_outputs})
    tensors = {key: outputs[output_keys.index(key)] for key in out_keys}
    kept, left_out = {}, []
    for key, tensor in tensors.items():
        why = _unfed(inlined_graph_def, tensor, placeholder, in_key, flat_names, inputs)
        if why is None and output_key is None and not tensor.dtype.is_floating:
            why = f"is {tensor.dtype.name}, not float: no gradient reaches it"
        if why is None:
            kept[key] = tensor
        elif output_key is not None or len(tensors) == 1:
            raise ModelLoadError(f"{spec!r} output {key!r} {why}")
        else:
            left_out.append(f"output {key!r} left out: it {why.split(':')[0]}")
    if not kept:
        reasons = "; ".join(note.replace(" left out: it", "") for note in left_out)
        raise ModelLoadError(f"{spec!r} has no output guidedbp can explain ({reasons}): "
                             "choose the image input with input_key=KEY, or export a "
                             "signature whose only input is the image")
    graph_def = prune_graph_def(inlined_graph_def, [t.op.name for t in kept.values()])
    wrapped = _drop_saved_custom_gradients(graph_def)
    graph = FrozenGraph(
        graph_def,
        input_name=placeholder.name,
        output_name=({key: t.name for key, t in kept.items()} if len(tensors) > 1
                     else next(iter(kept.values())).name),
        input_spec=tf.TensorSpec((None, *input_spec.shape[1:]), input_spec.dtype),
        name=Path(spec).name,
        output_names=list(kept),
        output_specs=[tf.TensorSpec(None if t.shape.rank is None else (None, *t.shape[1:]),
                                    t.dtype, name=key) for key, t in kept.items()],
        weights={node.name: inlined.weights[node.name] for node in graph_def.node
                 if node.name in inlined.weights},
    )
    loaded = LoadedModel(
        model=graph,
        source=spec,
        format="savedmodel",
        input_shape=tuple(input_spec.shape[1:]),
        preprocess=DEFAULT_FILE_PREPROCESS,
        preprocess_source=FILE_PREPROCESS_SOURCE,
    )
    loaded.notes += left_out
    loaded.note_scaling(rescales_itself(graph))  # its first ops, as a Keras model's layers
    if wrapped:
        loaded.notes.append(
            f"{wrapped} custom gradient(s) saved with the model wrap ops other than "
            "TensorFlow's silu: maps use the gradient of the wrapped ops instead")
    return loaded


#: A custom gradient's name in a graph (``tf.custom_gradient`` in graph mode).
_CUSTOM_GRADIENT = b"CustomGradient-"


def _drop_saved_custom_gradients(graph_def) -> int:
    """Let the ``IdentityN`` ops of saved custom gradients take their own gradient.

    ``tf.custom_gradient`` (TensorFlow's ``silu``/``swish`` uses one) ends in an
    ``IdentityN`` over the ops it wraps, named to a gradient function. Loading the
    SavedModel registers that function against the loader's own graph, where a graph
    imported elsewhere cannot use it (every gradient, even the plain one, would fail).
    Without the name, ``IdentityN`` passes each gradient to its input, so the gradient
    flows through the wrapped ops: the derivative of what the model computes, which for
    ``silu`` is what its custom gradient computes too.

    Args:
        graph_def: Changed in place (its nodes and its functions' nodes).

    Returns:
        How many wrapped something other than ``silu`` (``x * sigmoid(b * x)``), whose
        custom gradient may have differed from the derivative.
    """
    by_name = {node.name: node for node in graph_def.node}
    others = 0
    nodes = [*graph_def.node, *(n for f in graph_def.library.function for n in f.node_def)]
    for node in nodes:
        attr = node.attr.get("_gradient_op_type")
        if node.op == "IdentityN" and attr is not None and attr.s.startswith(_CUSTOM_GRADIENT):
            del node.attr["_gradient_op_type"]
            others += not _is_silu(node, by_name)
    return others


def _is_silu(identity, by_name: dict) -> bool:
    """Whether ``identity``'s first input is ``x * sigmoid(...)`` with ``x`` its second."""
    def producer(name: str):
        return by_name.get(name.lstrip("^").split(":")[0])

    if len(identity.input) < 2:
        return False
    product = producer(identity.input[0])
    x = identity.input[1].split(":")[0]
    if product is None or product.op != "Mul":
        return False
    operands = [producer(name) for name in product.input]
    return (any(op is not None and op.name == x for op in operands)
            and any(op is not None and op.op == "Sigmoid" for op in operands))


# TensorFlow 1 (control flow v1) loop ops; its tf.cond (Switch, Merge) is explained as is.
_TF1_LOOP_OPS = frozenset(("Enter", "Exit", "LoopCond", "NextIteration"))


def _refuse_unlisted(spec: str, what: str, ops: list[str]) -> None:
    """Refuse ``spec`` when ``ops`` (op types off the list) is not empty."""
    if ops:
        raise ModelLoadError(
            f"{spec!r} {what} TensorFlow ops that are not on guidedbp's list of "
            f"image-classifier ops ({', '.join(ops)}): such ops could read or write files "
            "or run code; if you trust this SavedModel, pass unsafe_deserialization=True"
        )


def _unfed(graph_def, output, placeholder, in_key: str, names: list[str], inputs: list
           ) -> str | None:
    """Why ``output`` cannot be computed from the image ``placeholder`` (the signature's
    input ``in_key``) alone, or ``None``.

    ``names`` and ``inputs``: the signature's flat input names and their placeholders.
    """
    needed = {node.name for node in prune_graph_def(graph_def, output.op.name).node}
    if placeholder.op.name not in needed:
        return f"does not depend on input {in_key!r}: choose the image input with input_key=KEY"
    others = sorted(
        name for name, tensor in zip(names, inputs)
        if tensor.op.name != placeholder.op.name and tensor.op.name in needed
    )
    if others:
        return (f"also needs input(s) {', '.join(others)}, which guidedbp cannot supply: "
                "export a signature whose only input is the image")
    return None


def _outputs(spec: str, mapping: dict, key: str | None) -> list[str]:
    """The signature's outputs to load: ``key`` alone (checked) where given, else all,
    sorted by name (a signature's outputs are a map: their order is not kept)."""
    if key is not None:
        return [_pick(spec, "output", mapping, key, "output_key")]
    return sorted(mapping)


def _pick(spec: str, what: str, mapping: dict, key: str | None, parameter: str) -> str:
    """The signature's only ``what`` (input or output), or ``key``, checked."""
    keys = ", ".join(sorted(mapping))
    if key is not None:
        if key not in mapping:
            raise ModelLoadError(f"{spec!r} has no {what} {key!r} (it has: {keys})")
        return key
    if len(mapping) != 1:
        raise ModelLoadError(
            f"{spec!r} has {len(mapping)} {what}s ({keys}): choose one with {parameter}=KEY"
        )
    return next(iter(mapping))
