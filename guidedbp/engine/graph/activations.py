"""The model's activations, found at the op level, and the rules applied to their ops.

An *activation* is an elementwise function ``y = f(x)`` of the model: what Keras calls
an activation (a layer's ``activation``, an ``Activation`` layer, the ``ReLU``,
``LeakyReLU``, ``ELU`` and ``PReLU`` layers) and ``tf.nn`` activation ops anywhere. In
the traced graph one is a small region of ops, found from its *core* (an op of
:data:`CORE_KINDS`: ``Relu``, ``Sigmoid``, ``Erfc``...):

- the region starts as the core op and grows forward over the consumers of its output,
  then backward over the producers of its inputs, until it has exactly one input ``x``
  that depends on the images and one output ``y`` that the logits depend on;
- it grows only over elementwise ops (:data:`ELEMENTWISE_OPS`) in the core's own name
  scope (one Keras layer call, or one ``tf.nn`` function such as ``Gelu``), whose
  image-dependent tensors all have ``x``'s shape, and whose outputs feed nothing outside
  the region; it keeps the largest region that has one input and one output.

So ``silu`` (``x * sigmoid(x)`` behind TensorFlow's custom-gradient ``IdentityN``),
``gelu`` (exact, ``erfc``, or its ``tanh`` approximation), ``hard_silu``
(``x * relu6(x + 3) / 6``), ``mish`` and ``PReLU`` (``relu(x) - a relu(-x)``) are each
one activation, and the ``Relu6`` inside ``hard_silu`` is not an activation of its own;
two activations in two layers are never merged; a softmax over attention scores and a
normalisation (reductions) are never activations.

The rules, at every activation, with ``g`` the gradient arriving at ``y``:

- ``guided``: send ``f'(x) * max(g, 0)`` to ``x``: threshold ``g`` at ``y``, then the
  region's own gradient (``y``'s op gets
  :data:`~guidedbp.engine.rules.table.GUIDED_ACTIVATION`; a ReLU alone keeps
  :data:`~guidedbp.engine.rules.table.GUIDED_GRADIENT`, which is the same rule);
- ``deconvnet``: send ``max(g, 0)`` to ``x``: ``y``'s op sends the thresholded ``g`` to
  the input on a path to ``x`` (the *spine*) and nothing to its other inputs, and each
  further op on the spine passes it on unchanged
  (:data:`~guidedbp.engine.rules.table.SPINE`).

The rules' records and math are :mod:`guidedbp.engine.rules`; this module finds where
they apply and points the ops there (:class:`Rules`).

The ``relu`` scope keeps the paper's: only ``Relu`` and ``Relu6`` ops, each alone
(today's rule, :func:`guidedbp.engine.graph.ops.relu_ops`).
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from dataclasses import dataclass

import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2

from guidedbp.engine.graph import ops as _ops
from guidedbp.engine.rules import relu as _relu
from guidedbp.engine.rules.activations import ORIGINAL_ATTR, OUTPUT_ATTR, SPINE_ATTR
from guidedbp.engine.rules.table import OURS, RULES

#: Op types an activation is found from, and the kind a region of one core is.
CORE_KINDS = _ops.ACTIVATION_KINDS

#: Elementwise ops a region may hold besides its cores (constants broadcast).
ELEMENTWISE_OPS = frozenset((
    *CORE_KINDS, "Mul", "AddV2", "Add", "Sub", "RealDiv", "Div", "Neg", "Maximum", "Minimum",
    "Pow", "Square", "Exp", "Expm1", "Log", "Log1p", "Abs", "Select", "SelectV2", "Greater",
    "GreaterEqual", "Less", "LessEqual", "Equal", "NotEqual", "ClipByValue", "Identity",
    "IdentityN", "Cast", "ZerosLike", "OnesLike", "Reciprocal", "Sign",
))

#: Regions grow over at most this many ops (the largest activation, celu, has 10).
_MAX_OPS = 24



@dataclass(frozen=True)
class Activation:
    """One activation ``y = f(x)`` of the traced graph.

    Attributes:
        kind: Its name, as Keras names activations (``"silu"``, ``"gelu"``...).
        ops: The region's ops, in creation order.
        input: ``x``.
        output: ``y``.
        spine: ``(op, input index)`` from ``y``'s op down to the op that reads ``x``.
    """

    kind: str
    ops: tuple
    input: tf.Tensor
    output: tf.Tensor
    spine: tuple

    @property
    def output_op(self) -> tf.Operation:
        return self.output.op


def _reach(images: tf.Tensor, ends) -> tuple[list, set[str], set[str]]:
    """``ends`` as a list, the names of the ops that depend on ``images`` and of those
    that ``ends`` depend on."""
    ends = list(ends) if isinstance(ends, (list, tuple)) else [ends]
    live = set().union(*(_ops.ancestors(end.op) for end in ends))
    return ends, _ops.descendants(images.op), live


def on_path(ops: list[tf.Operation], images: tf.Tensor, ends) -> list[tf.Operation]:
    """The ``ops`` that depend on ``images`` and that ``ends`` depend on: those between
    the images and what the targets read, whose gradient the maps go through."""
    _, dependent, live = _reach(images, ends)
    return [op for op in ops if op.name in dependent and op.name in live]


def find(forward_ops: list[tf.Operation], images: tf.Tensor, ends,
         exclude: Iterable[tf.Operation] = ()) -> list[Activation]:
    """Every activation between ``images`` and ``ends`` (the logits, or every tensor the
    targets read; see the module docstring), in creation order; ``exclude`` (the heads
    bypassed or read through) are none."""
    ends, dependent, live = _reach(images, ends)
    order = {op.name: index for index, op in enumerate(forward_ops)}
    end_names = {end.name for end in ends}
    excluded = {op.name for op in exclude}
    claimed: set[str] = set()
    found = []
    for op in forward_ops:
        if (op.type in CORE_KINDS and op.name in live and op.name in dependent
                and op.name not in claimed and op.name not in excluded):
            activation = _grow(op, order, dependent, live, end_names)
            if activation is not None:
                claimed.update(member.name for member in activation.ops)
                found.append(activation)
    return found


def _scope(op: tf.Operation) -> str:
    return op.name.rsplit("/", 1)[0] + "/" if "/" in op.name else ""


def _in_scope(op: tf.Operation, scope: str) -> bool:
    return op.name.startswith(scope) if scope else "/" not in op.name


def _grow(core: tf.Operation, order: dict, dependent: set, live: set,
          end_names: set[str]) -> Activation | None:
    """The largest region around ``core`` with one input and one output, or None."""
    scope = _scope(core)
    shape = core.inputs[0].shape if core.inputs else None

    def fits(op: tf.Operation) -> bool:
        if op.type not in ELEMENTWISE_OPS or not _in_scope(op, scope):
            return False
        # IdentityN's outputs mirror its inputs (a custom gradient's constants too).
        tensors = [*op.inputs] if op.type == "IdentityN" else [*op.inputs, *op.outputs]
        return all(_same_shape(t.shape, shape) for t in tensors
                   if t.op.name in dependent and t.dtype.is_floating)

    def closed(region: dict) -> tuple | None:
        """Grow ``region`` backward until it has one image-dependent input."""
        while True:
            entries = {t.name: t for op in region.values() for t in op.inputs
                       if t.op.name in dependent and t.op.name not in region
                       and t.dtype.is_floating}
            if len(entries) == 1:
                return region, next(iter(entries.values()))
            if not entries or len(region) >= _MAX_OPS:
                return None
            # Absorb the latest-made input whose producer fits and feeds only the region.
            for tensor in sorted(entries.values(), key=lambda t: -order.get(t.op.name, -1)):
                producer = tensor.op
                if fits(producer) and all(
                        consumer.name in region or consumer.name not in live
                        for output in producer.outputs for consumer in output.consumers()):
                    region = {**region, producer.name: producer}
                    break
            else:
                return None

    def outputs(region: dict) -> list[tf.Tensor]:
        """The region's tensors that the logits read from outside it (or are the logits)."""
        return [t for op in region.values() for t in op.outputs
                if t.name in end_names or any(
                    consumer.name not in region and consumer.name in live
                    for consumer in t.consumers())]

    best = None
    region = {core.name: core}
    while len(region) <= _MAX_OPS:
        result = closed(region)
        if result is None:
            break
        region, entry = result
        leaving = outputs(region)
        if len(leaving) == 1 and leaving[0].dtype.is_floating:
            best = (dict(region), entry, leaving[0])
        consumers = {c.name: c for t in leaving for c in t.consumers() if c.name in live
                     and c.name not in region}
        if not consumers or not all(fits(c) for c in consumers.values()):
            break
        region = {**region, **consumers}
    if best is None:
        return None
    region, entry, output = best
    if _chains_a_relu(region):  # each ReLU thresholds alone, as the relu scope's do
        return Activation(CORE_KINDS[core.type], (core,), core.inputs[0], core.outputs[0],
                          ((core, 0),))
    spine = _spine(region, entry, output)
    if spine is None:
        return None
    ops = tuple(sorted(region.values(), key=lambda op: order[op.name]))
    return Activation(_kind(ops, entry, region), ops, entry, output, spine)


def _chains_a_relu(region: dict) -> bool:
    """Whether a core of ``region`` reads another through the region's ops, one of the two
    a ReLU-family op: ``relu(1 - relu(x))`` in one layer is two activations (the rule
    thresholds at each, and the relu scope counts two), while PReLU's ``relu(x)`` and
    ``relu(-x)`` side by side, or mish's ``tanh(softplus(x))``, are one."""
    for op in region.values():
        if op.type not in CORE_KINDS:
            continue
        seen, pending = set(), [t.op for t in op.inputs if t.op.name in region]
        while pending:
            source = pending.pop()
            if source.name in seen:
                continue
            seen.add(source.name)
            if source.type in CORE_KINDS and (source.type in _relu.RELU_OPS
                                              or op.type in _relu.RELU_OPS):
                return True
            pending.extend(t.op for t in source.inputs if t.op.name in region)
    return False


def _same_shape(a: tf.TensorShape, b: tf.TensorShape | None) -> bool:
    if b is None or a.rank is None or b.rank is None:
        return True
    if a.rank != b.rank:
        return False
    return all(x is None or y is None or x == y for x, y in zip(a.as_list(), b.as_list()))


def _spine(region: dict, entry: tf.Tensor, output: tf.Tensor) -> tuple | None:
    """A path of ``(op, input index)`` from the output's op down to ``entry``."""
    path, op = [], output.op
    seen = set()
    while True:
        if op.name in seen:
            return None
        seen.add(op.name)
        for index, tensor in enumerate(op.inputs):
            if tensor.name == entry.name:
                path.append((op, index))
                return tuple(path)
        for index, tensor in enumerate(op.inputs):
            if tensor.op.name in region and tensor.dtype.is_floating:
                path.append((op, index))
                op = tensor.op
                break
        else:
            return None


def _kind(ops: tuple, entry: tf.Tensor, region: dict) -> str:
    """The activation's name, read off the ops it is made of."""
    types = collections.Counter(op.type for op in ops)
    cores = [CORE_KINDS[op.type] for op in ops if op.type in CORE_KINDS]
    # A product of two image-dependent tensors: the gate of silu, hard_silu, mish, gelu.
    gating = any(op.type == "Mul" and sum(
        t.name == entry.name or t.op.name in region for t in op.inputs) == 2 for op in ops)
    if types["Relu"] >= 2 and types["Neg"]:
        return "prelu"
    if types["Erf"] or types["Erfc"] or (types["Tanh"] and types["Pow"]):
        return "gelu"
    if types["Softplus"] and types["Tanh"] and gating:
        return "mish"
    if types["Sigmoid"] and gating and len(cores) == 1:
        return "silu"
    if types["Relu6"] and len(cores) == 1:
        return "hard_silu" if gating else "hard_sigmoid" if types["RealDiv"] or types["Mul"] \
            else "relu6"
    if len(set(cores)) == 1:
        return cores[0]
    return "+".join(dict.fromkeys(cores))


class Rules:
    """The gradient each rule gives each touched op, applied before each ``tf.gradients``
    call and undone after the last.

    Args:
        activations: :func:`find`'s activations (the ``all`` scope).
        relus: The ReLU-family ops the ``relu`` scope guides.
        scopes: Each swapping rule's scope (``{"guided": "all", "deconvnet": "relu"}``).
    """

    def __init__(self, activations: list[Activation], relus: list[tf.Operation],
                 scopes: dict[str, str]):
        self.activations = activations
        self.relus = relus
        self.scopes = scopes
        touched = {op.name: op for op in relus}
        for activation in activations:
            touched.update((op.name, op) for op in activation.ops
                           if op.type in _relu.RELU_OPS)
            touched.update((op.name, op) for op, _ in activation.spine)
        self._ops = list(touched.values())
        self._created = {op.name: _gradient_attr(op) for op in self._ops}
        for activation in activations:
            for index, (op, slot) in enumerate(activation.spine):
                _set_int(op, SPINE_ATTR, slot)
                if index == 0:
                    _set_int(op, OUTPUT_ATTR, activation.output.value_index)
                original = self._created[op.name]
                if original and original not in OURS:
                    _set_text(op, ORIGINAL_ATTR, original)

    def apply(self, rule: str) -> None:
        """Point every touched op at ``rule``'s gradients (``plain``: its own;
        :data:`~guidedbp.engine.rules.table.RULES`)."""
        plan: dict[str, str | None] = {op.name: None for op in self._ops}
        scope = self.scopes.get(rule)
        gradients = RULES[rule]
        if scope == "relu":
            plan.update((op.name, gradients.relu_gradient) for op in self.relus)
        elif scope == "all":
            for activation in self.activations:
                alone = len(activation.ops) == 1 and activation.ops[0].type in _relu.RELU_OPS
                if alone:  # a ReLU alone: the ReLU gradient, the same rule
                    plan[activation.output_op.name] = gradients.relu_gradient
                    continue
                head, *rest = activation.spine
                plan[head[0].name] = gradients.activation_gradient
                if gradients.spine_gradient is not None:
                    plan.update((op.name, gradients.spine_gradient) for op, _ in rest)
        for op in self._ops:
            _set_gradient(op, plan[op.name] or self._own(op))

    def restore(self) -> None:
        """Every touched op back to the gradient it was created with."""
        for op in self._ops:
            _set_gradient(op, self._created[op.name])

    def _own(self, op: tf.Operation) -> str | None:
        original = self._created[op.name]
        return None if original in OURS else original

    def census(self, rule: str) -> dict[str, int]:
        """The activation kinds ``rule`` guides, with counts."""
        scope = self.scopes.get(rule)
        if scope == "relu":
            return dict(collections.Counter(CORE_KINDS[op.type] for op in self.relus))
        if scope == "all":
            return dict(collections.Counter(a.kind for a in self.activations))
        return {}

    def left_plain(self, rule: str | None) -> dict[str, int]:
        """The activation kinds ``rule`` leaves with their own gradient, with counts: all
        of them for the plain rule, those with no ReLU op of its own for ``relu``."""
        scope = self.scopes.get(rule) if rule else None
        if scope == "all":
            return {}
        if scope == "relu":
            guided = {op.name for op in self.relus}
            return dict(collections.Counter(
                a.kind for a in self.activations if not any(op.name in guided for op in a.ops)))
        return dict(collections.Counter(  # no rule guides: the ReLUs are not counted as left
            a.kind for a in self.activations if a.kind not in ("relu", "relu6")))


def _gradient_attr(op: tf.Operation) -> str | None:
    attr = op.node_def.attr
    return attr["_gradient_op_type"].s.decode() if "_gradient_op_type" in attr else None


def _set_gradient(op: tf.Operation, name: str | None) -> None:
    if name is None:
        if "_gradient_op_type" in op.node_def.attr:
            op._clear_attr("_gradient_op_type")
    else:
        _set_text(op, "_gradient_op_type", name)


def _set_text(op: tf.Operation, name: str, value: str) -> None:
    op._set_attr(name, attr_value_pb2.AttrValue(s=value.encode()))


def _set_int(op: tf.Operation, name: str, value: int) -> None:
    op._set_attr(name, attr_value_pb2.AttrValue(i=value))
