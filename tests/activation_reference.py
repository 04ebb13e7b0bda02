"""An independent reference for the generalised guided rule: a Keras clone with custom gradients.

The rule. At every elementwise activation ``y = f(x)`` of the model, let ``g`` be the
gradient arriving at ``y``. The backward pass sends to ``x``

* ``guided``:    ``f'(x) * max(g, 0)`` (the VJP of ``f`` at ``x`` applied to ``relu(g)``);
* ``deconvnet``: ``max(g, 0)`` (``f`` is ignored);
* ``plain``:     ``f'(x) * g`` (the true gradient, to check the mechanism itself).

Every other op keeps its own gradient: convolutions, pooling, additions,
multiplications (so a gate ``x * sigmoid(z)`` is a product whose sigmoid alone is
guided), BatchNormalization, LayerNormalization, attention's softmax. The map is the
gradient of the pre-activation logit of the target class with respect to the images:
the classification head's softmax or sigmoid is removed.

What counts as an activation (each is replaced in the clone by ``f`` wrapped in a
``tf.custom_gradient`` whose backward is the rule's):

* the ``activation`` attribute of any layer (Dense, Conv*, DepthwiseConv2D, ...) when it
  is one of the covered functions below (``keras.activations.*``, ``keras.ops.*``,
  ``tf.nn.*``, or a ``functools.partial`` of one, e.g. GELU with ``approximate=True``);
* ``Activation`` layers, the same way;
* ``ReLU`` layers with all their arguments: ``f = keras.activations.relu(x,
  negative_slope, max_value, threshold)``, so ``f'`` is 1 on ``threshold < x <
  max_value``, ``negative_slope`` below the threshold and 0 above ``max_value``;
* ``LeakyReLU`` (``f'`` = 1 or ``negative_slope``) and ``ELU`` (``alpha * exp(x)`` below 0);
* ``PReLU``: ``f(x) = relu(x) - alpha * relu(-x)`` with its learned ``alpha`` (read as a
  constant, so ``f'`` is 1 above 0 and ``alpha`` below; no gradient to ``alpha``);
* ``Lambda(tf.nn.relu)`` and ``Lambda(tf.nn.relu6)`` (or any covered function).

Covered functions: relu, relu6, leaky_relu, elu, selu, gelu (exact and tanh), silu/swish,
hard_silu/hard_swish, hard_sigmoid, sigmoid, tanh, softplus, softsign, mish. Softmax,
log-softmax, sparsemax and GLU are not elementwise and keep their gradient; ``linear``
is nothing. Any other activation (exponential, celu, a lambda, ...) raises
``ValueError``, as does a layer whose activation cannot be set (LSTM, GRU) or that
cannot be cloned from its config. After cloning, the traced forward pass (nested
functions included) is scanned: an activation op (``Relu``, ``Relu6``, ``LeakyRelu``,
``Elu``, ``Selu``, ``Sigmoid``, ``Tanh``, ``Softplus``, ``Softsign``, ``Erf``,
``Erfc``: TensorFlow's exact GELU) outside
the reference's wrappers, say a ``tf.nn.relu`` inside a custom layer or an opaque
``Lambda``, raises too. The reference never silently falls back to the plain gradient.

The head: the operation that produces the model's (single) output, looked for through
nested models. When it is a layer whose ``activation`` is softmax or sigmoid, that
activation becomes linear; when it is an ``Activation`` or ``Softmax`` layer with softmax
or sigmoid, it becomes the identity; a ``keras.ops.softmax`` call as the head raises.
So the clone outputs logits.

Nested Functional and Sequential models are cloned recursively (shared layers stay
shared); all weights are copied from the original. The clone's output, through the
stripped head, must equal the model's on the images (else ``ValueError``: a layer rebuilt
from its config as another function).

A second strategy, for models whose layers cannot be rebuilt from their config
(keras-hub's): ``rule_patched`` / ``patched_map`` patch the model itself, sub-layers of
custom layers included, in the same way, run the same scan, and restore everything in
``finally``. ``reference_maps`` computes all rules from one clone (or one patching): the
wrappers read their ``Rule`` when the backward pass runs, switched between passes. This
module imports nothing from ``guidedbp.engine``.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import keras
import numpy as np
import tensorflow as tf

RULES = ("guided", "deconvnet", "plain")

#: Name scope of the wrappers' forward ops, by which the scan tells them from plain ones.
_SCOPE = "reference_rule"

#: TensorFlow op types that only activations create in the models the reference takes.
_ACTIVATION_OPS = frozenset({"Relu", "Relu6", "LeakyRelu", "Elu", "Selu", "Sigmoid", "Tanh",
                             "Softplus", "Softsign", "Erf", "Erfc"})  # exact GELU: Erfc

_COVERED = ("relu", "relu6", "leaky_relu", "elu", "selu", "gelu", "silu", "swish", "hard_silu",
            "hard_swish", "hard_sigmoid", "sigmoid", "tanh", "softplus", "softsign", "mish")
_NOT_ELEMENTWISE = ("softmax", "log_softmax", "sparsemax", "glu")
_HEADS = ("softmax", "sigmoid")


def _functions(names: Sequence[str], *modules) -> dict[Callable, str]:
    table = {}
    for module in modules:
        for name in names:
            function = getattr(module, name, None)
            if function is not None:
                table[function] = name
    return table


_COVERED_FUNCTIONS = _functions(_COVERED, keras.activations, keras.ops, tf.nn, tf.math)
_NOT_ELEMENTWISE_FUNCTIONS = _functions(_NOT_ELEMENTWISE, keras.activations, keras.ops, tf.nn)
_HEAD_FUNCTIONS = _functions(_HEADS, keras.activations, keras.ops, tf.nn, tf.math)
_LINEAR = keras.activations.linear


class Rule:
    """The rule wrappers apply, read by each backward pass when it runs.

    So one clone (or one patching) serves all three rules: switch ``name`` between eager
    gradient passes, as ``reference_maps`` does. (A gradient traced in a ``tf.function``
    would keep the rule of its tracing.)
    """

    def __init__(self, name: str):
        if name not in RULES:
            raise ValueError(f"rule={name!r} is not one of {', '.join(RULES)}")
        self.name = name


def _with_backward(f: Callable, rule: Rule) -> Callable:
    """``f`` with the backward pass of ``rule``; the forward pass is ``f`` itself."""

    @tf.custom_gradient
    def apply(x):
        with tf.name_scope(_SCOPE):
            y = f(x)

        def backward(dy):
            if rule.name == "deconvnet":
                return tf.nn.relu(dy)
            sent = tf.nn.relu(dy) if rule.name == "guided" else dy
            with tf.GradientTape() as tape:
                tape.watch(x)
                out = f(x)
            return tape.gradient(out, x, output_gradients=sent)

        return y, backward

    return apply


def guided_activation(f: Callable) -> Callable:
    """``f`` whose backward sends ``f'(x) * max(g, 0)`` to ``x``."""
    return _with_backward(f, Rule("guided"))


def deconvnet_activation(f: Callable) -> Callable:
    """``f`` whose backward sends ``max(g, 0)`` to ``x``."""
    return _with_backward(f, Rule("deconvnet"))


def plain_activation(f: Callable) -> Callable:
    """``f`` whose backward is its own: ``f'(x) * g`` (the wrapper, checked)."""
    return _with_backward(f, Rule("plain"))


def _base(function):
    while isinstance(function, functools.partial):
        function = function.func
    return function


def _kind(function, where: str) -> str:
    """``"linear"``, ``"covered"`` or ``"keep"`` (not elementwise); raises for the rest."""
    base = _base(function)
    if function is None or base is _LINEAR:
        return "linear"
    try:
        if base in _COVERED_FUNCTIONS:
            return "covered"
        if base in _NOT_ELEMENTWISE_FUNCTIONS:
            return "keep"
    except TypeError:  # an unhashable callable
        pass
    raise ValueError(f"{where}: activation {function!r} is not one the rule covers; "
                     "the reference cannot replace it")


def _is_head_function(function) -> bool:
    try:
        return _base(function) in _HEAD_FUNCTIONS
    except TypeError:
        return False


def _prelu_call(layer: keras.layers.PReLU, rule: Rule) -> Callable:
    """``layer``'s call under ``rule``; ``alpha`` is read outside the wrapper."""

    def call(inputs):
        alpha = tf.convert_to_tensor(layer.alpha)
        prelu = lambda x: keras.activations.relu(x) - alpha * keras.activations.relu(-x)  # noqa: E731
        return _with_backward(prelu, rule)(inputs)

    return call


class _ReferencePReLU(keras.layers.PReLU):
    """PReLU with the rule's backward."""

    def __init__(self, rule: Rule, **kwargs):
        super().__init__(**kwargs)
        self.rule = rule

    def call(self, inputs):
        return _prelu_call(self, self.rule)(inputs)


_ACTIVATION_LAYERS = (keras.layers.ReLU, keras.layers.LeakyReLU, keras.layers.ELU)


def _layer_function(layer) -> Callable:
    """The function a ReLU, LeakyReLU or ELU layer computes, with all its arguments."""
    if isinstance(layer, keras.layers.ReLU):
        return functools.partial(
            keras.activations.relu, negative_slope=float(layer.negative_slope),
            max_value=None if layer.max_value is None else float(layer.max_value),
            threshold=float(layer.threshold))
    if isinstance(layer, keras.layers.LeakyReLU):
        return functools.partial(keras.activations.leaky_relu,
                                 negative_slope=float(layer.negative_slope))
    return functools.partial(keras.activations.elu, alpha=float(layer.alpha))


def _rule_activation(activation, rule: Rule, is_head: bool, where: str):
    """The clone's activation: linear at the head, wrapped if covered, else as it was."""
    kind = _kind(activation, where)
    if is_head and _is_head_function(activation):
        return _LINEAR
    if kind == "covered":
        return _with_backward(activation, rule)
    return activation  # linear, or not elementwise


def _elementwise(function: Callable, rule: Rule, name: str) -> keras.layers.Layer:
    return keras.layers.Activation(_with_backward(function, rule), name=name)


def _head_operation(model: keras.Model):
    if len(model.outputs) != 1:
        raise ValueError(f"model {model.name!r} has {len(model.outputs)} outputs, expected 1")
    return model.outputs[0]._keras_history[0]


def _clone_layer(layer, rule: Rule, head, cache: dict):
    """The rule's version of one operation of a functional graph (or Sequential layer)."""
    if id(layer) in cache:
        return cache[id(layer)]
    where = f"layer {getattr(layer, 'name', layer)!r}"
    if layer is head and type(layer).__name__ in ("Softmax", "Sigmoid") and not isinstance(
            layer, keras.layers.Layer):
        raise ValueError(f"the head is a keras.ops call ({where}); the reference strips "
                         "only a head layer's softmax or sigmoid")
    if isinstance(layer, keras.Model):
        clone = _clone(layer, rule, strip_head=layer is head, cache=cache)
    elif not isinstance(layer, keras.layers.Layer):
        clone = layer  # a stateless keras.ops node; the scan catches activation ops
    elif isinstance(layer, keras.layers.PReLU):
        clone = _ReferencePReLU(rule=rule, **layer.get_config())
    elif isinstance(layer, _ACTIVATION_LAYERS):
        clone = _elementwise(_layer_function(layer), rule, layer.name)
    elif isinstance(layer, keras.layers.Softmax):
        if layer is head:  # Softmax layers compute softmax only
            clone = keras.layers.Identity(name=layer.name)
        else:
            clone = layer.__class__.from_config(layer.get_config())
    elif isinstance(layer, keras.layers.Lambda):
        function = layer.function
        try:
            covered = _base(function) in _COVERED_FUNCTIONS
        except TypeError:
            covered = False
        if covered:  # a Lambda still, as its node passes Lambda's call arguments
            clone = keras.layers.Lambda(_with_backward(function, rule), name=layer.name)
        else:  # opaque, so shared as it is (Lambda keeps no weights); the scan raises
            clone = layer  # if it holds an activation
    elif type(layer) is keras.layers.Activation:  # built directly: its activation may be
        clone = keras.layers.Activation(  # a partial, which get_config cannot serialize
            _rule_activation(layer.activation, rule, layer is head, where), name=layer.name)
    else:
        try:
            clone = layer.__class__.from_config(layer.get_config())
        except TypeError as error:
            raise ValueError(f"{where}: the reference cannot clone it ({error})") from error
        activation = getattr(layer, "activation", None)
        if activation is not None:
            try:
                clone.activation = _rule_activation(activation, rule, layer is head, where)
            except AttributeError as error:  # a read-only property (recurrent layers)
                raise ValueError(f"{where}: the reference cannot set its activation") from error
    cache[id(layer)] = clone
    return clone


def _clone(model: keras.Model, rule: Rule, strip_head: bool, cache: dict) -> keras.Model:
    if not isinstance(model, (keras.Sequential, keras.src.models.Functional)):
        raise ValueError(f"model {model.name!r} is a subclassed {type(model).__name__}: "
                         "the reference clones only Functional and Sequential models")
    head = _head_operation(model) if strip_head else None
    return keras.models.clone_model(
        model, clone_function=lambda layer: _clone_layer(layer, rule, head, cache))


def _check_no_plain_activation(clone: keras.Model) -> None:
    specs = [tf.TensorSpec(tensor.shape, tensor.dtype) for tensor in clone.inputs]
    forward = tf.function(lambda x: clone(x, training=False), autograph=False)
    graph = forward.get_concrete_function(specs[0] if len(specs) == 1 else specs).graph
    graph_def = graph.as_graph_def()
    # Nested functions (loop bodies, conditionals) too.
    nodes = [*graph_def.node, *(node for function in graph_def.library.function
                                for node in function.node_def)]
    plain = sorted(node.name for node in nodes
                   if node.op in _ACTIVATION_OPS and _SCOPE not in node.name)
    if plain:
        raise ValueError(f"activation ops the reference could not replace: {plain[:5]}")


def reference_clone(model: keras.Model, rule: str = "guided") -> keras.Model:
    """A clone of ``model`` with every covered activation under ``rule``, logits out.

    Args:
        model: A Functional or Sequential ``keras.Model`` with one output.
        rule: ``"guided"``, ``"deconvnet"`` or ``"plain"``.

    Returns:
        The clone, with the original's weights; the original is untouched.

    Raises:
        ValueError: For an activation the reference cannot replace, a subclassed model
            or several outputs.
    """
    return _reference_clone(model, Rule(rule))


def _reference_clone(model: keras.Model, rule: Rule) -> keras.Model:
    clone = _clone(model, rule, strip_head=True, cache={})
    original, copied = model.get_weights(), clone.get_weights()
    shapes = [w.shape for w in original]
    if shapes != [w.shape for w in copied]:
        raise ValueError(f"the clone of {model.name!r} does not have the model's weights")
    clone.set_weights(original)
    _check_no_plain_activation(clone)
    return clone


def clone_map(clone: keras.Model, images, target) -> np.ndarray:
    """The gradient of ``clone``'s logit ``target`` (an int, or one per image) w.r.t. images."""
    images = tf.convert_to_tensor(np.asarray(images, np.float32))
    targets = np.broadcast_to(np.asarray(target, np.int32), (images.shape[0],))
    with tf.GradientTape() as tape:
        tape.watch(images)
        logits = clone(images, training=False)
        score = tf.reduce_sum(tf.gather(logits, targets, axis=1, batch_dims=1))
    return tape.gradient(score, images).numpy().astype(np.float32)


def reference_map(model: keras.Model, images, target, rule: str = "guided") -> np.ndarray:
    """The rule's saliency maps: float32, shaped like ``images`` ``(N, H, W, C)``.

    >>> model = keras.Sequential([keras.Input((1, 1, 2)), keras.layers.Flatten(),
    ...                           keras.layers.Dense(2, activation="softmax")])
    >>> reference_map(model, np.ones((1, 1, 1, 2)), 0).shape
    (1, 1, 1, 2)
    """
    return reference_maps(model, images, target, (rule,)).maps[rule]


def _check_same_function(model: keras.Model, logits: np.ndarray, images) -> None:
    """Raises unless the model's output is ``logits`` through identity, softmax or sigmoid.

    A custom layer whose ``get_config`` misses an argument (an activation, say) is rebuilt
    by the clone as another function, with the same weights and nothing for the scan to
    see; this catches it.
    """
    outputs = model(np.asarray(images, np.float32), training=False).numpy()
    tolerance = 1e-5 * float(np.abs(outputs).max()) + 1e-7
    for head in (np.asarray, lambda z: keras.ops.softmax(z).numpy(),
                 lambda z: keras.ops.sigmoid(z).numpy()):
        candidate = head(logits)
        if candidate.shape == outputs.shape and np.allclose(candidate, outputs, rtol=1e-4,
                                                            atol=tolerance):
            return
    raise ValueError(f"the reference of {model.name!r} computes another function than the "
                     "model (a layer that does not rebuild from its config?)")


# -- the second strategy: the model itself, patched for the duration of one gradient ----------


def _set_attribute(owner, name: str, value, undo: list[Callable[[], None]]) -> None:
    original = getattr(owner, name)
    setattr(owner, name, value)
    undo.append(lambda: setattr(owner, name, original))


def _set_call(layer: keras.layers.Layer, call: Callable, undo: list[Callable[[], None]]) -> None:
    """Shadows the class's ``call`` with an instance attribute (Keras looks up ``self.call``)."""
    had, original = "call" in vars(layer), vars(layer).get("call")
    object.__setattr__(layer, "call", call)
    undo.append(lambda: object.__setattr__(layer, "call", original) if had
                else object.__delattr__(layer, "call"))


def _innermost_head(model: keras.Model):
    head = _head_operation(model)
    while isinstance(head, keras.Model):
        head = _head_operation(head)
    if type(head).__name__ in ("Softmax", "Sigmoid") and not isinstance(head, keras.layers.Layer):
        raise ValueError(f"the head is a keras.ops call (layer {head.name!r}); the reference "
                         "strips only a head layer's softmax or sigmoid")
    return head


def _patch_layer(layer, rule: Rule, is_head: bool, undo: list[Callable[[], None]]) -> None:
    """Puts ``layer`` (not a model: their layers are visited one by one) under ``rule``."""
    where = f"layer {layer.name!r}"
    if isinstance(layer, keras.layers.PReLU):
        _set_call(layer, _prelu_call(layer, rule), undo)
    elif isinstance(layer, _ACTIVATION_LAYERS):
        _set_call(layer, _with_backward(_layer_function(layer), rule), undo)
    elif isinstance(layer, keras.layers.Softmax):
        if is_head:
            _set_call(layer, lambda inputs, mask=None: inputs, undo)
    elif isinstance(layer, keras.layers.Lambda):
        try:
            covered = _base(layer.function) in _COVERED_FUNCTIONS
        except TypeError:
            covered = False
        if covered:  # else left as it is; the scan raises if it holds an activation
            _set_attribute(layer, "function", _with_backward(layer.function, rule), undo)
    elif getattr(layer, "activation", None) is not None:
        activation = _rule_activation(layer.activation, rule, is_head, where)
        if activation is not layer.activation:
            try:
                _set_attribute(layer, "activation", activation, undo)
            except AttributeError as error:  # a read-only property (recurrent layers)
                raise ValueError(f"{where}: the reference cannot set its activation") from error


@contextlib.contextmanager
def rule_patched(model: keras.Model, rule: str = "guided") -> Iterator[keras.Model]:
    """``model`` itself under ``rule``, logits out, inside the ``with`` only.

    The strategy for models whose layers cannot be rebuilt from their config (keras-hub's
    ViT: ``ViTPatchingAndEmbedding.get_config`` holds arguments its ``__init__`` refuses),
    or whose activations sit in sub-layers of custom layers (the ``Dense(activation="gelu")``
    in keras-hub's ``MLP``, built inside ``ViTEncoderBlock.build``), which cloning never
    reaches. Every layer, sub-layers of custom layers included, is patched as the clone
    would rebuild it: a covered ``activation`` attribute (``Activation`` layers too)
    becomes its wrapper, a ReLU, LeakyReLU, ELU or PReLU layer's ``call`` is shadowed by
    the wrapped function, a covered ``Lambda`` function is wrapped; the head is stripped
    as in ``reference_clone``. Then the same scan of the traced forward pass raises for any
    activation op left plain (a ``keras.ops.gelu`` called inside a custom layer's ``call``,
    say). Everything is put back in ``finally``, after an error too.

    Args:
        model: A ``keras.Model`` with one output (Functional, or a subclass of it).
        rule: ``"guided"``, ``"deconvnet"`` or ``"plain"``.

    Yields:
        ``model``, patched.

    Raises:
        ValueError: As ``reference_clone``.
    """
    with _patched(model, Rule(rule)) as patched:
        yield patched


@contextlib.contextmanager
def _patched(model: keras.Model, rule: Rule) -> Iterator[keras.Model]:
    undo: list[Callable[[], None]] = []
    try:
        head = _innermost_head(model)
        for layer in model._flatten_layers(include_self=False, recursive=True):
            if not isinstance(layer, keras.Model):
                _patch_layer(layer, rule, layer is head, undo)
        _check_no_plain_activation(model)
        yield model
    finally:
        for restore in reversed(undo):
            restore()


def patched_map(model: keras.Model, images, target, rule: str = "guided") -> np.ndarray:
    """``reference_map`` by the patching strategy (``rule_patched``); ``model`` is restored."""
    with rule_patched(model, rule) as patched:
        return clone_map(patched, images, target)


STRATEGIES = ("clone", "patch")


@dataclass(frozen=True)
class References:
    """``reference_maps``' answer."""

    maps: dict[str, np.ndarray]  # by rule, float32, shaped like the images
    logits: np.ndarray  # the reference's (clone's or patched model's) output: logits


def reference_maps(model: keras.Model, images, target, rules: Sequence[str] = RULES,
                   strategy: str = "clone") -> References:
    """``reference_map`` (or ``patched_map``) of each of ``rules``, by one clone (or one
    patching) whose ``Rule`` is switched between the gradient passes: the same clone,
    weights and scan as one ``reference_clone`` per rule, built once.

    Args:
        model: As ``reference_clone`` (``strategy="clone"``) or ``rule_patched``
            (``"patch"``).
        images: float ``(N, H, W, C)``.
        target: An int, or one class per image.
        rules: Rule names.
        strategy: ``"clone"`` or ``"patch"``.

    Returns:
        Each rule's maps, and the reference's output on ``images`` (the logits).
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy={strategy!r} is not one of {', '.join(STRATEGIES)}")
    switch = Rule(rules[0])
    for name in rules:
        Rule(name)  # checked before any building
    with contextlib.ExitStack() as stack:
        if strategy == "clone":
            subject = _reference_clone(model, switch)
        else:
            subject = stack.enter_context(_patched(model, switch))
        maps = {}
        for name in rules:
            switch.name = name
            maps[name] = clone_map(subject, images, target)
        logits = subject(np.asarray(images, np.float32), training=False).numpy()
    _check_same_function(model, logits, images)
    return References(maps, logits)
