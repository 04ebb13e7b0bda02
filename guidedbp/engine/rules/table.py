"""The gradient rules, one record each: what a backward pass sends back through an
activation, and where it applies by default.

A rule is a record plus its math, as the class activation maps' weightings are: the
record names the gradient functions (registered with TensorFlow by
:mod:`guidedbp.engine.rules.relu` for the ReLU family alone, and by
:mod:`guidedbp.engine.rules.activations` for any elementwise activation; this module
imports no TensorFlow, so the method registry reads it freely) that
:class:`guidedbp.engine.graph.activations.Rules` points the traced graph's ops at before
one ``tf.gradients`` call. A method names its rule (:attr:`Method.relu_rule
<guidedbp.engine.methods.registry.Method.relu_rule>`); methods of one rule share its
backward pass.

>>> [rule.name for rule in RULES.values()]
['plain', 'guided', 'deconvnet']
>>> RULES["deconvnet"].default_scope, RULES["guided"].default_scope
('relu', 'all')
"""

from __future__ import annotations

from dataclasses import dataclass

# The names the rules' gradient functions are registered under (prefixed: they cannot
# collide with a user's own "GuidedRelu" registration): the ReLU family's alone
# (:mod:`guidedbp.engine.rules.relu`), any activation's (:mod:`.activations`).
GUIDED_GRADIENT = "guidedbp/GuidedRelu"
DECONVNET_GRADIENT = "guidedbp/DeconvnetRelu"
GUIDED_ACTIVATION = "guidedbp/GuidedActivation"
DECONVNET_ACTIVATION = "guidedbp/DeconvnetActivation"
SPINE = "guidedbp/Spine"


@dataclass(frozen=True)
class Rule:
    """One gradient rule.

    Attributes:
        name: How methods name it.
        relu_gradient: The gradient a ReLU-family op alone gets (``None``: its own).
        activation_gradient: The gradient an activation's output op gets under the
            ``all`` scope (``None``: its own).
        spine_gradient: The gradient the further ops on an activation's spine get (the
            path from its input to its output), or ``None``: their own.
        default_scope: Where it applies when the explainer names no ``guide``: ``"all"``
            activations, the ``"relu"`` family, or ``None`` (the plain rule changes
            nothing).
        summary: What it sends back, in a line.
    """

    name: str
    relu_gradient: str | None
    activation_gradient: str | None
    spine_gradient: str | None
    default_scope: str | None
    summary: str


RULES = {rule.name: rule for rule in (
    Rule("plain", None, None, None, None, "the model's own gradient"),
    # The generalised guided rule localises on SiLU/GELU networks as on ReLU ones; the
    # generalised deconvnet rule does not (Methods page, "How it works").
    Rule("guided", GUIDED_GRADIENT, GUIDED_ACTIVATION, None, "all",
         "f'(x) * max(g, 0) (Springenberg et al. 2015, at every activation)"),
    Rule("deconvnet", DECONVNET_GRADIENT, DECONVNET_ACTIVATION, SPINE, "relu",
         "max(g, 0), the forward mask ignored (Zeiler & Fergus 2014)"),
)}

#: The rules' names, the plain one first.
RELU_RULES = tuple(RULES)

#: The rules that swap gradients (all but the plain one), in the order a report prefers
#: them: a run's report speaks for the first its methods use.
SWAPPING = tuple(rule.name for rule in RULES.values() if rule.default_scope is not None)

#: Every gradient a rule points an op at: an op created with one of them is ours.
OURS = frozenset(name for rule in RULES.values()
                 for name in (rule.relu_gradient, rule.activation_gradient, rule.spine_gradient)
                 if name is not None)

