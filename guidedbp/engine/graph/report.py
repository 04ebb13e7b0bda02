"""What the engine did to a model's gradient, read off the traced graph: the
:class:`Report` every trace leaves, and how it is written out."""

from __future__ import annotations

from dataclasses import dataclass, field

from guidedbp.engine.graph.ops import RELU_KINDS


@dataclass(frozen=True)
class Report:
    """What the engine did to a model's gradient, read off the traced graph.

    Attributes:
        method: The attribution method.
        guided_activations: The activations whose gradient the guided rule replaced (the
            deconvnet rule's when no method is guided), by kind (``{"silu": 49,
            "sigmoid": 16}``); empty when no method swaps gradients.
        plain_activations: Activations left with their plain gradient, by kind.
        head: The output head bypassed to reach the logit, or ``None``.
        num_classes: Number of classes the target may name.
        layer: Grad-CAM's feature-map layer (its name scope in the graph), or ``None``.
        cam_layers: Each class activation map's layer (the methods with a feature map:
            Grad-CAM and its kin, Score-CAM), by method, named as ``layer=`` takes it
            (``{"gradcam": "conv5_block3_out"}``); empty when no method has one.
        guide: The scope of that rule: ``"all"`` (every activation) or ``"relu"`` (the
            ReLU family), or ``None`` when no method swaps gradients.
        by_rule: Each swapping rule the methods use (``"guided"``, ``"deconvnet"``) ->
            ``(scope, the activations it guides by kind)``.
        output_shape: The shape of the output the first trace's target read (its
            logits behind a bypassed head), ``None`` for the batch.
        unreached_activations: The activations of :attr:`plain_activations` that sit
            inside functions the model calls (``tf.while_loop``/``tf.cond`` bodies,
            nested ``tf.function`` calls), by kind: ReLUs the rules could not reach (a nested
            ``tf.function``'s) and other activations (only ReLUs are guided there).
        guided_in_functions: The ReLUs of :attr:`guided_activations` that sit inside
            ``tf.while_loop``/``tf.cond`` bodies, by kind (a body's ReLU counts once
            however many times it runs).
    """

    method: str
    guided_activations: dict[str, int] = field(default_factory=dict)
    plain_activations: dict[str, int] = field(default_factory=dict)
    head: str | None = None
    num_classes: int = 0
    layer: str | None = None
    cam_layers: dict[str, str] = field(default_factory=dict)
    guide: str | None = None
    by_rule: dict[str, tuple[str, dict[str, int]]] = field(default_factory=dict)
    output_shape: tuple = ()
    unreached_activations: dict[str, int] = field(default_factory=dict)
    guided_in_functions: dict[str, int] = field(default_factory=dict)

    def unreached(self, rule: str) -> dict[str, int]:
        """The :attr:`unreached_activations` in ``rule``'s scope (:attr:`by_rule`): those
        its maps should have guided and did not; empty for a rule the methods do not use."""
        if rule not in self.by_rule:
            return {}
        scope = self.by_rule[rule][0]
        return {kind: count for kind, count in self.unreached_activations.items()
                if scope == "all" or kind in RELU_KINDS}

    @property
    def guided_ops(self) -> dict[str, int]:
        """The older name of :attr:`guided_activations`."""
        return self.guided_activations

    @property
    def num_guided(self) -> int:
        return sum(self.guided_activations.values())

    def as_dict(self) -> dict:
        return {
            "method": self.method,
            "guide": self.guide,
            "guided_activations": dict(self.guided_activations),
            "plain_activations": dict(self.plain_activations),
            "by_rule": {rule: {"guide": scope, "guided_activations": dict(counts)}
                        for rule, (scope, counts) in self.by_rule.items()},
            "unreached_activations": dict(self.unreached_activations),
            "head_bypassed": self.head,
            "num_classes": self.num_classes,
            "layer": self.layer,
            "cam_layers": dict(self.cam_layers),
        }

    def __str__(self) -> str:
        counts = format_counts
        guided = counts(self.guided_activations)
        return (
            f"method: {self.method}\n"
            f"guided activations: {guided}"
            + (f" (--guide {self.guide})" if self.guide else "") + "\n"
            f"activations left alone: {counts(self.plain_activations)}"
            + (f" (inside functions, out of the rules' reach: "
               f"{counts(self.unreached_activations)})" if self.unreached_activations
               else "") + "\n"
            f"head bypassed: {self.head or 'none (output is already a logit)'}\n"
            f"classes: {self.num_classes}"
            + (f"\nCAM layer: {format_layers(self.cam_layers)}" if self.cam_layers else "")
        )


def format_layers(layers: dict[str, str]) -> str:
    """``{"gradcam": "conv_1", "scorecam": "conv_1"}`` -> ``"conv_1 (gradcam, scorecam)"``:
    each layer once, with the methods that use it."""
    by_layer: dict[str, list[str]] = {}
    for name, layer in layers.items():
        by_layer.setdefault(layer, []).append(name)
    return "; ".join(f"{layer} ({', '.join(names)})" for layer, names in by_layer.items())


def format_counts(counts: dict[str, int]) -> str:
    """``{"silu": 49, "sigmoid": 16}`` -> ``"silu 49, sigmoid 16"``, most first;
    ``"none"`` when empty."""
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(f"{key} {value}" for key, value in ordered) or "none"
