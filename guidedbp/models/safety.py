"""Which TensorFlow ops a SavedModel may run before the caller says they trust it.

A SavedModel is a program: its graphs may hold ``WriteFile``, ``ReadFile``, ``PyFunc``
or ``PrintV2`` ops that act on the machine when they run. guidedbp runs a SavedModel's
ops at two moments: when ``tf.saved_model.load`` recreates and initializes its resources
(their functions run then), and when it explains images with the frozen signature. At
both moments every op type must be on :data:`CLASSIFIER_OPS` (plus, while loading,
:data:`LOADING_OPS`), unless the caller passes ``unsafe_deserialization=True``.

How :data:`CLASSIFIER_OPS` was built: every ``keras.applications`` model of Keras 3.15
(TensorFlow 2.21) with ``weights=None`` and a small input size -- ConvNeXtTiny,
DenseNet121, EfficientNetB0, EfficientNetV2B0, EfficientNetV2S, InceptionResNetV2,
InceptionV3, MobileNet, MobileNetV2, MobileNetV3Small, MobileNetV3Large, NASNetMobile,
ResNet50, ResNet50V2, ResNet101, VGG16, VGG19, Xception -- was saved with
``model.export`` and with ``tf.saved_model.save``, and tf_keras (Keras 2) models
(ConvNeXtTiny, EfficientNetB0, InceptionV3, MobileNetV2, RegNetX002, ResNet50 and a
small CNN with Rescaling, BatchNormalization, ReLU6, pooling, Dropout and softmax) with
``model.save(dir)``; each was loaded through :func:`guidedbp.load_model` and the op
types of its frozen GraphDef and function library collected (41 ops). Added by hand:
side-effect-free element-wise, array, reduction and neural-network ops a classifier
may use (activations, resizing, padding, matrix products, batch normalization, LRN),
and control flow: ``tf.cond``, ``tf.switch_case`` and ``tf.while_loop`` as functional
ops (``If``, ``Case``, ``While`` and their ``Stateless`` forms), whose branch and body
functions are checked like the rest, and as TensorFlow 1's ``Switch``, ``Merge``,
``Enter``, ``Exit``, ``NextIteration`` and ``LoopCond``, whose bodies are ordinary
nodes of the same graph. They only route tensors (a TensorFlow 1 loop is refused all the
same, as one that cannot be differentiated: see :mod:`~guidedbp.models.savedmodel`).
Left out on
purpose, whatever a model needs: anything that touches files (``ReadFile``,
``WriteFile``, ``MatchingFiles``, ``Save*``, ``Restore*``, ``ImmutableConst``, readers),
the network or other processes (``Send``, ``Recv``, collectives), Python (``PyFunc``,
``EagerPyFunc``, ``PyFuncStateless``), logging (``Print``, ``PrintV2``, ``*Summary*``),
datasets, iterators and queues. A test checks that each name is a registered op.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

__all__ = [
    "CLASSIFIER_OPS",
    "LOADING_OPS",
    "graph_op_types",
    "loading_op_types",
    "unlisted_ops",
]

#: Op types an image classifier's forward pass uses and that act on nothing but their
#: inputs: allowed in a frozen SavedModel signature without ``unsafe_deserialization``.
CLASSIFIER_OPS = frozenset((
    "Abs",
    "Add",
    "AddN",
    "AddV2",
    "All",
    "Any",
    "ArgMax",
    "ArgMin",
    "AvgPool",
    "BatchMatMul",
    "BatchMatMulV2",
    "BatchMatMulV3",
    "BatchToSpaceND",
    "BiasAdd",
    "BiasAddV1",
    "BroadcastArgs",
    "BroadcastTo",
    "Case",
    "Cast",
    "Ceil",
    "ClipByValue",
    "Concat",
    "ConcatV2",
    "Const",
    "Conv2D",
    "Conv2DBackpropInput",
    "Cos",
    "DepthToSpace",
    "DepthwiseConv2dNative",
    "Div",
    "DivNoNan",
    "Einsum",
    "Elu",
    "EnsureShape",
    "Enter",
    "Equal",
    "Erf",
    "Erfc",
    "Exit",
    "Exp",
    "ExpandDims",
    "Expm1",
    "Fill",
    "Floor",
    "FloorDiv",
    "FloorMod",
    "FusedBatchNorm",
    "FusedBatchNormV2",
    "FusedBatchNormV3",
    "Gather",
    "GatherNd",
    "GatherV2",
    "Greater",
    "GreaterEqual",
    "Identity",
    "IdentityN",
    "If",
    "LRN",
    "LeakyRelu",
    "Less",
    "LessEqual",
    "Log",
    "Log1p",
    "LogSoftmax",
    "LogicalAnd",
    "LogicalNot",
    "LogicalOr",
    "LoopCond",
    "MatMul",
    "Max",
    "MaxPool",
    "MaxPoolV2",
    "Maximum",
    "Mean",
    "Merge",
    "Min",
    "Minimum",
    "MirrorPad",
    "Mul",
    "MulNoNan",
    "Neg",
    "NextIteration",
    "NoOp",
    "NotEqual",
    "OneHot",
    "OnesLike",
    "Pack",
    "Pad",
    "PadV2",
    "PartitionedCall",
    "Placeholder",
    "PlaceholderWithDefault",
    "Pow",
    "Prod",
    "Range",
    "Rank",
    "RealDiv",
    "Reciprocal",
    "Relu",
    "Relu6",
    "Reshape",
    "ResizeArea",
    "ResizeBicubic",
    "ResizeBilinear",
    "ResizeNearestNeighbor",
    "ReverseV2",
    "Round",
    "Rsqrt",
    "ScaleAndTranslate",
    "Select",
    "SelectV2",
    "Selu",
    "Shape",
    "ShapeN",
    "Sigmoid",
    "Sign",
    "Sin",
    "Size",
    "Slice",
    "Softmax",
    "Softplus",
    "Softsign",
    "SpaceToBatchND",
    "SpaceToDepth",
    "Split",
    "SplitV",
    "Sqrt",
    "Square",
    "SquaredDifference",
    "Squeeze",
    "StatefulPartitionedCall",
    "StatelessCase",
    "StatelessIf",
    "StatelessWhile",
    "StopGradient",
    "StridedSlice",
    "Sub",
    "Sum",
    "Switch",
    "Tanh",
    "Tile",
    "TopKV2",
    "Transpose",
    "Unpack",
    "While",
    "ZerosLike",
))

#: Op types that only create, read and assign the model's own variables in memory:
#: allowed, besides :data:`CLASSIFIER_OPS`, in the functions that run while a
#: SavedModel loads (resource initializers, custom restore functions).
LOADING_OPS = frozenset((
    "AssignAddVariableOp",
    "AssignSubVariableOp",
    "AssignVariableOp",
    "DestroyResourceOp",
    "DisableCopyOnRead",
    "ReadVariableOp",
    "VarHandleOp",
    "VarIsInitializedOp",
))


def graph_op_types(graph_def) -> set[str]:
    """Every op type in ``graph_def``: its nodes and every function of its library
    (nested functions, control-flow branches and loop bodies live there)."""
    ops = {node.op for node in graph_def.node}
    for function in graph_def.library.function:
        ops.update(node.op for node in function.node_def)
    return ops


def loading_op_types(folder: str | Path) -> set[str]:
    """The op types ``tf.saved_model.load`` would run when it loads ``folder``.

    Read from ``saved_model.pb`` (or ``.pbtxt``) without running anything. A TensorFlow 2
    SavedModel runs, while loading, the functions of its resources (create, initialize)
    and of its custom saveable objects (restore), with every function they call; a
    TensorFlow 1 one (no object graph) runs its restore op (whose ``RestoreV2``,
    ``Assign`` and ``VariableV2`` read the model's own variables and are not counted)
    and its init ops, or else its local variables' and tables' initializers, with every
    node they depend on and every function those call.

    Args:
        folder: A SavedModel folder.

    Returns:
        The op types (every meta graph of the file counted).

    Raises:
        OSError: When the file cannot be read.
        google.protobuf.message.DecodeError: When it is not a SavedModel.
    """
    from google.protobuf import text_format
    from tensorflow.core.protobuf import saved_model_pb2

    folder = Path(folder)
    saved = saved_model_pb2.SavedModel()
    binary = folder / "saved_model.pb"
    if binary.is_file():
        saved.ParseFromString(binary.read_bytes())
    else:
        text_format.Parse((folder / "saved_model.pbtxt").read_text(), saved)
    ops: set[str] = set()
    for meta_graph in saved.meta_graphs:
        library = {f.signature.name: f for f in meta_graph.graph_def.library.function}
        nodes = meta_graph.object_graph_def.nodes
        if not nodes:  # TensorFlow 1: the loader runs its restore and init ops
            ops |= _tf1_loading_op_types(meta_graph, library)
            continue
        roots = []
        for node in nodes:
            if node.WhichOneof("kind") == "resource":
                roots.extend(_function_names(nodes[child.node_id]) for child in node.children)
            for saveable in node.saveable_objects.values():
                roots.append(_function_names(nodes[saveable.restore_function]))
        for name in _called_functions(
            library, [name for names in roots for name in names]
        ):
            ops.update(node.op for node in library[name].node_def)
    return ops


def unlisted_ops(ops: Iterable[str], allowed: Iterable[str] = CLASSIFIER_OPS) -> list[str]:
    """The op types of ``ops`` not in ``allowed``, sorted and unique."""
    return sorted(set(ops) - set(allowed))


# What a TensorFlow 1 SavedModel's restore op uses to read the model's own variables
# back from its checkpoint: allowed in that op (and only there) while it loads.
_TF1_RESTORE_OPS = frozenset(("Assign", "RestoreV2", "VariableV2"))

# The collections and signature whose ops a TensorFlow 1 SavedModel runs once restored;
# without an init op, the loader initializes its local variables and tables.
_TF1_INIT_COLLECTIONS = ("saved_model_main_op", "legacy_init_op", "table_initializer")
_TF1_INIT_SIGNATURE = "__saved_model_init_op"
_TF1_LOCAL_VARIABLES = "local_variables"


def _tf1_loading_op_types(meta_graph, library: dict) -> set[str]:
    """The op types a TensorFlow 1 SavedModel runs while it loads: those of its restore
    op (less the checkpoint reader's own) and of its init ops, with every node they
    depend on and every function those call."""
    init_roots = []
    for key in _TF1_INIT_COLLECTIONS:
        if key in meta_graph.collection_def:
            init_roots.extend(meta_graph.collection_def[key].node_list.value)
    init = meta_graph.signature_def.get(_TF1_INIT_SIGNATURE)
    if init is not None:
        init_roots.extend(output.name for output in init.outputs.values())
    if _TF1_LOCAL_VARIABLES in meta_graph.collection_def:
        from tensorflow.core.framework import variable_pb2

        for value in meta_graph.collection_def[_TF1_LOCAL_VARIABLES].bytes_list.value:
            init_roots.append(variable_pb2.VariableDef.FromString(value).initializer_name)
    restore = _subgraph_op_types(meta_graph.graph_def, library,
                                 [meta_graph.saver_def.restore_op_name])
    return (restore - _TF1_RESTORE_OPS) | _subgraph_op_types(
        meta_graph.graph_def, library, init_roots
    )


def _subgraph_op_types(graph_def, library: dict, roots: list[str]) -> set[str]:
    """The op types of ``roots``, every node they depend on, and the functions called."""
    by_name = {node.name: node for node in graph_def.node}
    seen: set[str] = set()
    pending = [_node_name(root) for root in roots if root]
    functions: list[str] = []
    while pending:
        name = pending.pop()
        if name in seen or name not in by_name:
            continue
        seen.add(name)
        node = by_name[name]
        pending.extend(_node_name(source) for source in node.input)
        functions.extend(_attr_functions(node))
    ops = {by_name[name].op for name in seen}
    for name in _called_functions(library, functions):
        ops.update(node.op for node in library[name].node_def)
    return ops


def _node_name(tensor_or_node: str) -> str:
    """``"^a"``, ``"a:0"`` -> ``"a"``."""
    return tensor_or_node.lstrip("^").split(":")[0]


def _attr_functions(node) -> list[str]:
    """The function names a node's attributes hold (``f``, ``then_branch``, ``body``...)."""
    names = []
    for value in node.attr.values():
        if value.HasField("func"):
            names.append(value.func.name)
        names.extend(func.name for func in value.list.func)
    return names


def _function_names(node) -> list[str]:
    """The concrete function names a SavedObject node of kind function holds."""
    kind = node.WhichOneof("kind")
    if kind == "function":
        return list(node.function.concrete_functions)
    if kind == "bare_concrete_function":
        return [node.bare_concrete_function.concrete_function_name]
    return []


def _called_functions(library: dict, roots: Iterable[str]) -> set[str]:
    """``roots`` and every library function they call, however deeply (through
    ``PartitionedCall``, ``If``, ``While``... attributes naming functions)."""
    seen: set[str] = set()
    pending = [name for name in roots if name in library]
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        for node in library[name].node_def:
            pending.extend(n for n in _attr_functions(node) if n in library and n not in seen)
    return seen
