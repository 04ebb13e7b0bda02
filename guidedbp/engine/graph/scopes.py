"""Keras layers and the name scopes of a traced graph: the scope each layer's call opened,
so that a layer the user names (``layer="conv2d_1"``) is found in the graph, and a tensor
found in the graph (the default feature map) is named as the user names layers.

Keras opens a name scope per layer call, which TensorFlow makes unique in its graph: a
layer ``conv2d`` traced once gets the scope ``conv2d_1``, and the layer ``conv2d_1``
beside it ``conv2d_1_2``. A scope's name alone does not say which layer opened it.
Each model's (or layer's) child scopes are therefore handed out in the order the graph
first meets them, each to the first of its layers, in their order, that has none yet and
whose name the scope extends (``name`` or ``name_K``): a model runs its layers in that
order, so a layer's scope comes before those of the layers after it.

Layers inside layers count: a Keras model's ``layers``, and the layers a custom layer
tracks (a vision transformer's blocks inside its encoder layer).

>>> import keras, tensorflow as tf
>>> model = keras.Sequential([keras.Input((4, 4, 1)), keras.layers.Conv2D(1, 1, name="c"),
...                           keras.layers.Conv2D(1, 1, name="c_1")], name="m")
>>> traced = tf.function(model, autograph=False).get_concrete_function(
...     tf.TensorSpec((None, 4, 4, 1)))
>>> scopes = layer_scopes(model, traced.graph.get_operations())
>>> scopes[("c",)], scopes[("c_1",)]
(('m_1', 'c_1'), ('m_1', 'c_1_2'))
"""

from __future__ import annotations

import re

#: A layer's path: the names of the Keras models (and layers) enclosing it, then its own.
Path = tuple[str, ...]


def children(layer) -> list:
    """The layers directly inside ``layer``: a Keras model's ``layers`` (its inputs left
    out), else the layers a custom layer tracks; none for anything else."""
    if hasattr(layer, "layers"):
        inside = list(getattr(layer, "layers", None) or [])
    else:
        flatten = getattr(layer, "_flatten_layers", None)
        try:
            inside = list(flatten(include_self=False, recursive=False)) if flatten else []
        except TypeError:  # a _flatten_layers of another signature: none known
            inside = []
    return [child for child in inside if type(child).__name__ != "InputLayer"]


def layer_path(model, name: str) -> list[str] | None:
    """The path of the first layer named ``name`` (depth first, in the layers' order):
    the names of the layers enclosing it, then its own; None if absent."""
    for layer in children(model):
        if layer.name == name:
            return [name]
        inner = layer_path(layer, name)
        if inner:
            return [layer.name, *inner]
    return None


def layer_scopes(model, forward_ops: list) -> dict[Path, tuple[str, ...]]:
    """Each layer's path (:func:`layer_path`'s, as a tuple) -> the name scopes of its
    first call in ``forward_ops`` (a traced graph's operations, in creation order), the
    enclosing models' scopes first. Empty for a model with no Keras layers (a
    SavedModel's graph); a layer whose call made no op is left out."""
    if not children(model):
        return {}
    firsts = _first_scopes(forward_ops)
    tops = [scopes[0] for scopes in firsts if len(scopes) == 1]
    name = getattr(model, "name", None)
    root = next(((scope,) for scope in tops if name and _extends(scope, name)), ())
    found: dict[Path, tuple[str, ...]] = {}
    _assign(model, (), root, firsts, found)
    return found


def owner(scopes: dict[Path, tuple[str, ...]], op_scopes: list[str]) -> Path | None:
    """The path of the innermost layer whose call holds an op of name scopes
    ``op_scopes`` (:func:`layer_scopes`' ``scopes``), or None."""
    best: Path | None = None
    for path, prefix in scopes.items():
        if tuple(op_scopes[:len(prefix)]) == prefix and (
                best is None or len(prefix) > len(scopes[best])):
            best = path
    return best


def exported_names(forward_ops: list) -> dict[Path, Path]:
    """Each name scope of a graph without Keras layers (a SavedModel's, by its path) ->
    the same path by its layers' own names.

    Exporting a Keras model traces it in a graph where each layer's name is already taken,
    so TensorFlow makes every layer's scope unique: ``conv`` becomes ``conv_1`` and a layer
    ``conv_1`` beside it ``conv_1_2``. Where every suffixed scope of one scope drops its
    last ``_N`` to a name no other of them (nor an unsuffixed one) has, the names are
    those; elsewhere (a graph's own scopes ``block`` and ``block_1``) the scopes stand.

    >>> ops = [type("Op", (), {"name": name}) for name in (
    ...     "m_1/conv_1/Relu", "m_1/conv_1_2/Relu", "m_1/Cast/x", "f/block/a", "f/block_1/a")]
    >>> names = exported_names(ops)
    >>> names[("m_1", "conv_1")], names[("m_1", "conv_1_2")], names[("m_1", "Cast")]
    (('m', 'conv'), ('m', 'conv_1'), ('m', 'Cast'))
    >>> names[("f", "block")], names[("f", "block_1")]
    (('f', 'block'), ('f', 'block_1'))
    """
    firsts = _first_scopes(forward_ops)
    children: dict[Path, list[str]] = {}
    for scopes in firsts:
        children.setdefault(scopes[:-1], []).append(scopes[-1])
    renamed: dict[Path, dict[str, str]] = {}
    for parent, names in children.items():
        stripped = {name: found.group(1) for name in names
                    if (found := _SUFFIXED.fullmatch(name))}
        plain = set(names) - set(stripped)
        if len(set(stripped.values())) == len(stripped) and not plain & set(stripped.values()):
            renamed[parent] = stripped
    found: dict[Path, Path] = {}
    for scopes in firsts:  # enclosing scopes come first
        parent = scopes[:-1]
        found[scopes] = (*found.get(parent, parent),
                         renamed.get(parent, {}).get(scopes[-1], scopes[-1]))
    return found


#: A name scope TensorFlow may have made unique: ``name_N``.
_SUFFIXED = re.compile(r"(.+)_[0-9]+")


def _first_scopes(forward_ops: list) -> list[tuple[str, ...]]:
    """Every name scope of ``forward_ops`` (enclosing ones too), in the order the ops
    first meet them."""
    seen: dict[tuple[str, ...], None] = {}
    for op in forward_ops:
        scopes = op.name.split("/")[:-1]
        for depth in range(1, len(scopes) + 1):
            seen.setdefault(tuple(scopes[:depth]), None)
    return list(seen)


def _assign(layer, path: Path, prefix: tuple[str, ...], firsts: list, found: dict) -> None:
    """Hand the child scopes under ``prefix`` to ``layer``'s layers (see the module)."""
    inside = children(layer)
    if not inside:
        return
    taken: set[int] = set()
    for scopes in firsts:
        if len(scopes) != len(prefix) + 1 or scopes[:len(prefix)] != prefix:
            continue
        for index, child in enumerate(inside):
            if index not in taken and _extends(scopes[-1], child.name):
                taken.add(index)
                found[(*path, child.name)] = scopes
                _assign(child, (*path, child.name), scopes, firsts, found)
                break


def _extends(scope: str, name: str) -> bool:
    """Whether TensorFlow may have made the scope ``scope`` of a scope named ``name``."""
    return re.fullmatch(re.escape(name) + r"(_\d+)?", scope) is not None
