"""The traced body: one forward pass, then every requested method's gradients.

The forward pass runs under the graph's ``gradient_override_map``, which points
every ReLU-family op at the guided gradient. Each ReLU rule the requested methods
need (plain, guided, deconvnet) then gets one ``tf.gradients`` call from the same
forward pass: the rule is set on the ops of the activations in its scope (the ReLU
family, or every activation: :mod:`guidedbp.engine.graph.activations`) just before its call,
and everything is put back in ``finally``. ReLUs inside a SavedModel's ``tf.cond``
branches and ``tf.while_loop`` bodies, rebuilt from their definitions by each call,
follow the call's rule through
:func:`~guidedbp.engine.rules.relu.rule_in_functions`. The plain call also yields the
feature-map gradient of the class activation maps (Grad-CAM, Grad-CAM++, LayerCAM), so
``vanilla,gradcam`` costs one forward and one backward pass, and
``guided,vanilla,gradcam,guided-gradcam`` one forward and two backward passes.

Perturbation methods (Score-CAM, occlusion) take no part in the backward passes: the
explainer runs them afterwards through :func:`predict`, a forward pass with no
gradient override; the traced pass hands Score-CAM the clean feature map.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field, replace

import tensorflow as tf

from guidedbp import _outputs
from guidedbp.engine.graph import activations as _activations
from guidedbp.engine.graph import layers as _layers
from guidedbp.engine.graph import ops as _ops
from guidedbp.engine.graph import report as _report
from guidedbp.engine.graph import tokens as _tokens
from guidedbp.engine.methods import cams as _cams
from guidedbp.engine.methods.registry import RELU_RULES, method
from guidedbp.engine.rules import relu as _relu
from guidedbp.engine.rules.table import GUIDED_GRADIENT, RULES, SWAPPING
from guidedbp.engine.targets import columns as _columns
from guidedbp.engine.targets import proposals as _proposals
from guidedbp.engine.targets import scoring as _scoring

#: Each swapping rule's scope when the explainer names none (``guide=None``): the
#: generalised guided rule localises on SiLU/GELU networks as on ReLU ones, the
#: generalised deconvnet rule does not (README, "How it works").
DEFAULT_GUIDE = {rule.name: rule.default_scope for rule in RULES.values() if rule.default_scope}


def guide_scopes(guide: str | None) -> dict[str, str]:
    """Each swapping rule's scope: ``guide`` for both, or :data:`DEFAULT_GUIDE`."""
    return dict(DEFAULT_GUIDE) if guide is None else {rule: guide for rule in DEFAULT_GUIDE}


@dataclass
class _Cams:
    """One class's activation maps, each built once however many methods read it."""

    feature_map: tf.Tensor | None
    feature_gradient: tf.Tensor | None
    size: tf.Tensor
    upsample: str
    built: dict = field(default_factory=dict)

    def __call__(self, weighting: str) -> tf.Tensor:
        if weighting not in self.built:
            self.built[weighting] = _cams.class_activation_map(
                self.feature_map, self.feature_gradient, weighting, self.size, self.upsample)
        return self.built[weighting]


@dataclass
class _Parts:
    """The pieces a method's ``combine`` reads
    (:class:`~guidedbp.engine.methods.registry.Parts`)."""

    input_gradient: tf.Tensor | None
    cam: _Cams
    images: tf.Tensor


def predict(model, images, output=None):
    """Every class's float32 score (the logits the maps explain) and probability,
    ``(N, max(classes, 2))`` each: one forward pass, no gradient override."""
    raw = model(images, training=False)
    selected = _outputs.select(model, raw, output)
    selected = _scoring.one_tensor(model, raw, selected, "class scores")
    logits, head, _ = _ops.find_logits(selected)
    _check_logits(logits, selected)
    _scoring.refuse_a_value(logits, head, replace(_columns.CLASS, output=output))
    return _ops.class_scores(logits, selected, head)


def target_scores(model, images, classes, data, columns):
    """The distinct ``columns``' float32 scores, ``(N, k_d)`` for column ``d``'s k_d
    targets per image (``classes[d]`` ``(N, k_d)``, resolved as given; ``data[d]``
    ``(N, k_d, ...)``): one forward pass, no gradient override (the perturbation
    methods'), traced once whatever the k_d."""
    raw = model(images, training=False)
    return _scoring.score_rows(model, raw, columns, classes, data,
                               _proposals.image_size(images))


def raw_output(model, images, output=None):
    """The output ``output`` names, float32, flattened per image: ``(N, size)``."""
    raw = model(images, training=False)
    selected = _outputs.select(model, raw, output)
    selected = _scoring.one_tensor(model, raw, selected, "an embedding")
    return tf.reshape(tf.cast(selected, tf.float32), [tf.shape(selected)[0], -1])


def attribute(model, images, classes, data, columns, methods: tuple[str, ...],
              report_methods: tuple[str, ...], layer_path: list[str] | None, upsample: str,
              features: bool = False, guide: str | None = None):
    """Trace ``model`` on ``images`` and compute ``methods``' maps from one forward pass.

    Args:
        model: The traceable callable.
        images: float32 ``(N, H, W, C)`` placeholder.
        classes: int32 ``(N, K)``: a class column's class (``-r`` means the image's r-th
            most probable class).
        data: K float32 placeholders, each column's data
            (:class:`~guidedbp.engine.targets.columns.Columns`).
        columns: The K :class:`~guidedbp.engine.targets.columns.Column` targets, each explained
            from the same forward pass.
        methods: The gradient methods to compute (no perturbation method).
        report_methods: The methods the report speaks for (the explainer's).
        layer_path: The feature-map layer (enclosing model names, then its own), or None.
        upsample: Class activation map upsampling.
        features: Whether to return the feature map too (for Score-CAM).
        guide: Where the swapping rules apply: ``"all"`` activations, the ``"relu"``
            family, or ``None`` for :data:`DEFAULT_GUIDE`.

    Returns:
        ``(outputs, report)``: outputs is a dict with ``maps`` (method -> float32
        ``(N, K, ...)`` maps), ``targets``, ``logits`` (the scores), ``probabilities``
        (each ``(N, K)``), ``class_probabilities`` ``(N, classes)``, ``resolved`` (K
        tensors: what each column resolved, see
        :class:`~guidedbp.engine.targets.scoring.Scored`) and, with ``features``,
        ``features`` (float32 ``(N, h, w, k)``, a token layer's grid);
        report a :class:`~guidedbp.engine.graph.report.Report`.
    """
    records = [method(name) for name in methods]
    rules = [rule for rule in RELU_RULES if any(r.relu_rule == rule for r in records)]
    needs_cam = any(r.feature_map for r in records)
    swapped = any(rule != "plain" for rule in rules)
    graph = tf.compat.v1.get_default_graph()
    override = {op_type: GUIDED_GRADIENT for op_type in _relu.RELU_OPS} if swapped else {}
    override.update(_proposals.gradient_overrides(model))  # D-FINE's training-only stops
    with graph.gradient_override_map(override):
        raw = model(images, training=False)
    forward_ops = graph.get_operations()
    # The ReLUs of loops and branches built in this trace (a Keras layer's tf.while_loop)
    # sit in graphs of their own, which the override map did not reach: marked as it
    # would have marked them (their rule follows rule_in_functions, as a SavedModel's),
    # and put back in the finally below.
    built_relus = _ops.built_function_relus(forward_ops) if swapped else []
    _ops.set_gradient(built_relus, GUIDED_GRADIENT)

    scored = _scoring.score(model, raw, columns, classes, data, _proposals.image_size(images))
    # The ReLUs between the images and what the targets read: those the rules can change
    # (a ReLU on a weight, or on another output's path, is counted in no scope).
    relus = _activations.on_path(_ops.relu_ops(forward_ops), images, scored.ends)
    excluded = _ops.signed_compositions(relus)
    excluded_names = {op.name for op in excluded}
    _ops.set_gradient(excluded, None)  # PReLU parts: plain in the relu scope, always
    scopes = guide_scopes(guide)
    plan = _activations.Rules(
        _activations.find(forward_ops, images, scored.ends, scored.heads),
        [op for op in relus if op.name not in excluded_names], scopes)
    in_functions, plain_in_functions, unreached = _ops.function_census(
        _ops.function_ops(forward_ops))
    report_rules = [record.relu_rule for record in map(method, report_methods)]
    main_rule = next((rule for rule in SWAPPING if rule in report_rules), None)
    by_rule = {rule: (scopes[rule], dict(collections.Counter(plan.census(rule))
                                          + collections.Counter(in_functions)))
               for rule in SWAPPING if rule in report_rules}
    guided_counts = by_rule[main_rule][1] if main_rule else {}
    # Left plain inside functions: the activations other than ReLUs (only ReLUs are
    # guided there), and the ReLUs out of the rules' reach (counted, as outside, only
    # where a rule guides ReLUs).
    unreached = dict(collections.Counter(plain_in_functions)
                     + collections.Counter(unreached if main_rule else {}))
    plain = dict(collections.Counter(plan.left_plain(main_rule))
                 + collections.Counter(unreached))
    feature_map = None
    if needs_cam or features:
        feature_map = (_layers.feature_map_by_name(forward_ops, layer_path, model)
                       if layer_path
                       else _default_feature_map(scored, columns, images))
    report = _report.Report(
        method=",".join(report_methods),
        guided_activations=guided_counts,
        plain_activations=plain,
        head=scored.head,
        num_classes=scored.num_classes,
        layer=None if feature_map is None else feature_map.op.name.rsplit("/", 1)[0],
        cam_layers={} if feature_map is None else dict.fromkeys(
            [name for name in report_methods if method(name).feature_map],
            _layers.layer_name(model, forward_ops, feature_map)),
        guide=scopes[main_rule] if main_rule else None,
        by_rule=by_rule,
        output_shape=scored.output_shape,
        unreached_activations=unreached,
        guided_in_functions=in_functions if main_rule else {},
    )

    target_scores = scored.scores  # (N, K)
    per_column = []  # one target per image at a time: its own backward passes
    calls = rules if not needs_cam or "plain" in rules else ["plain", *rules]
    try:
        for column in range(len(columns)):
            score = tf.reduce_sum(target_scores[:, column])
            input_gradients, feature_gradient = {}, None
            for rule in calls:
                plan.apply(rule)
                wanted = [images] if rule in rules else []
                if rule == "plain" and needs_cam:
                    wanted.append(feature_map)
                with _relu.rule_in_functions(rule):
                    gradients = tf.gradients(score, wanted, unconnected_gradients="zero")
                if rule in rules:
                    input_gradients[rule] = tf.cast(gradients[0], tf.float32)
                if rule == "plain" and needs_cam:
                    feature_gradient = gradients[-1]
            cams = _Cams(feature_map, feature_gradient, tf.shape(images)[1:3], upsample)
            per_column.append({
                record.name: tf.cast(
                    record.combine(_Parts(input_gradients.get(record.relu_rule), cams,
                                          tf.cast(images, tf.float32))),
                    tf.float32)
                for record in records
            })
    finally:  # the ops go back to the gradient they were created with
        plan.restore()
        _ops.set_gradient(built_relus, None)
    maps = {record.name: tf.stack([column[record.name] for column in per_column], axis=1)
            for record in records}
    outputs = {
        "maps": maps,  # (N, K, H, W, C)
        "targets": scored.targets,
        "logits": target_scores,
        "probabilities": scored.probabilities,
        "class_probabilities": scored.class_probabilities,
        "resolved": tuple(scored.resolved),
    }
    if features:
        outputs["features"] = tf.cast(_tokens.as_grid(feature_map), tf.float32)  # tokens: grid
    return outputs, report


def _default_feature_map(scored, columns, images) -> tf.Tensor:
    """The class activation maps' layer where none is named: beside a detection, the last
    feature map that the whole gradient of every target passes through
    (:func:`~guidedbp.engine.targets.proposals.feature_map`), else the last one before
    the first target's output (:func:`~guidedbp.engine.graph.layers.default_feature_map`)."""
    if any(column.kind == "detection" for column in columns):
        found = _proposals.feature_map(scored.ends, images)
        if found is not None:
            return found
    return _layers.default_feature_map(scored.base, images)


def _check_logits(logits, output) -> None:
    if logits.shape.rank != 2:
        raise _columns.NotAClassifier(
            f"the model's output has shape {tuple(output.shape)}; class scores need "
            "(batch, classes)")
