"""The method registry: one record per attribution method, read by everything else.

A method is what its traced function needs (an input gradient under some ReLU
rule, a feature map and its plain gradient) and how it combines those parts into a
map. The engine computes the parts every requested method needs from one forward
pass, one ``tf.gradients`` call per ReLU rule; each record's ``combine`` then turns
them into that method's map. ``guidedbp.METHODS``, the CLI's ``--method`` choices
and help, comparison panels, ``evaluate`` and the Ray runner all read this table,
so a new method is one record here plus its math.

Importing this module does not import TensorFlow: ``combine`` functions only call
methods of the :class:`Parts` they receive.

>>> from guidedbp.engine.methods import METHODS, method
>>> METHODS[:3]
('guided', 'vanilla', 'deconvnet')
>>> method("guided-gradcam").relu_rule, method("guided-gradcam").feature_map
('guided', True)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from guidedbp.errors import ArgumentError

#: ReLU gradient rules, in the order the engine computes them.
#: ``plain``: the op's own gradient. ``guided``: threshold the arriving gradient,
#: then apply the ReLU's mask. ``deconvnet``: threshold, ignore the mask.
RELU_RULES = ("plain", "guided", "deconvnet")


class Parts(Protocol):
    """What a method's ``combine`` may use, inside the traced function."""

    input_gradient: object  # (N, H, W, C) gradient of the class score, under the method's rule
    cam: object  # (N, H, W, 1) Grad-CAM map at the input size (plain gradient)


@dataclass(frozen=True)
class Method:
    """One attribution method.

    Attributes:
        name: What ``--method`` and the API call it.
        title: One line for help texts.
        paper: Where it comes from.
        relu_rule: The ReLU rule of the input gradient it needs (one of
            :data:`RELU_RULES`), or ``None`` when it needs no input gradient.
        feature_map: Whether it needs a 4-D feature map and its plain gradient.
        path_integrated: Whether its map is integrated along a path from a baseline
            (integrated gradients): many passes per image.
        signed: Whether the sign of its map means something (gradients), rather than
            a non-negative coarse map (class activation maps).
        options: The :class:`~guidedbp.engine.options.MethodOptions` group that
            applies to it alone, or ``None``.
        combine: The parts -> the map, in the traced function.
    """

    name: str
    title: str
    paper: str
    relu_rule: str | None
    combine: Callable[[Parts], object]
    feature_map: bool = False
    path_integrated: bool = False
    signed: bool = True
    options: str | None = None


def _input_gradient(parts: Parts):
    return parts.input_gradient


def _cam(parts: Parts):
    return parts.cam


def _guided_cam(parts: Parts):
    return parts.input_gradient * parts.cam


_REGISTRY = (
    Method("guided", "guided backpropagation", "Springenberg et al. 2015", "guided",
           _input_gradient),
    Method("vanilla", "plain input gradient", "Simonyan et al. 2014", "plain", _input_gradient),
    Method("deconvnet", "thresholded gradient, no forward mask",
           "Zeiler & Fergus 2014", "deconvnet", _input_gradient),
    Method("gradcam", "Grad-CAM: gradient-weighted feature map", "Selvaraju et al. 2017", None,
           _cam, feature_map=True, signed=False, options="gradcam"),
    Method("guided-gradcam", "guided backprop times Grad-CAM", "Selvaraju et al. 2017", "guided",
           _guided_cam, feature_map=True, options="gradcam"),
    Method("integrated-gradients", "gradient integrated along a path from a baseline",
           "Sundararajan et al. 2017", "plain", _input_gradient, path_integrated=True,
           options="integrated_gradients"),
)

#: Every method by name, in the order the CLI lists them.
REGISTRY: dict[str, Method] = {record.name: record for record in _REGISTRY}

#: Method names, in the order the CLI lists them.
METHODS: tuple[str, ...] = tuple(REGISTRY)


def method(name: str) -> Method:
    """The record of method ``name``.

    Raises:
        ValueError: For an unknown name, listing the known ones.
    """
    try:
        return REGISTRY[name]
    except (KeyError, TypeError):
        raise ArgumentError(f"method={name!r} is not one of {', '.join(METHODS)}") from None


def as_methods(methods) -> tuple[str, ...]:
    """``"guided"``, ``"guided,gradcam"``, ``"all"`` or a sequence -> known names, in order.

    Raises:
        ValueError: For an unknown or empty selection.
    """
    if isinstance(methods, str):
        if methods.strip().lower() == "all":
            return METHODS
        methods = methods.split(",")
    names = tuple(dict.fromkeys(str(name).strip().lower() for name in methods if str(name).strip()))
    if not names:
        raise ArgumentError(f"method: choose at least one of {', '.join(METHODS)}")
    for name in names:
        method(name)
    return names


def swaps_relus(methods) -> bool:
    """Whether any of ``methods`` replaces the ReLUs' gradient (guided, deconvnet)."""
    return any(method(name).relu_rule not in (None, "plain") for name in methods)
