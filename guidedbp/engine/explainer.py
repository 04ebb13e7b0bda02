"""The attribution engine: guided backpropagation in one backward pass, and its peers.

The forward pass is traced into a ``tf.function`` under the graph's
``gradient_override_map``, which maps every ReLU-family op to a registered
gradient whose body is the ``grad_ys`` thresholding (clamp the arriving gradient
at zero, then send it through the ReLU's own gradient). One ordinary
``tf.gradients`` call then yields the guided map. The model itself is never
touched: the override lives only on the traced graph.

The same traced function serves the methods users compare guided backprop with:
Grad-CAM and guided Grad-CAM (a plain gradient to a feature map, in the same
graph), and, on top of any method, SmoothGrad and integrated gradients
(:mod:`guidedbp.engine._averaging`).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from guidedbp.engine import _averaging, _gradcam, _graph
from guidedbp.engine._graph import Report

#: Each method, and the gradient its traced function maps ReLUs to.
METHODS_GRADIENT = {
    "guided": _graph.GUIDED_GRADIENT,
    "vanilla": None,
    "deconvnet": _graph.DECONVNET_GRADIENT,
    "gradcam": None,
    "guided-gradcam": _graph.GUIDED_GRADIENT,
    "integrated-gradients": None,
}
_CAM_METHODS = ("gradcam", "guided-gradcam")
UPSAMPLING = ("bilinear", "nearest")

Target = int | Sequence[int] | np.ndarray | None


class NoReluWarning(UserWarning):
    """The model has no ReLU-family op, so guided backprop equals the plain gradient."""


@dataclass(frozen=True)
class Explanation:
    """Maps and the classes they explain.

    Attributes:
        maps: float32 ``(N, H, W, C)`` attributions of each image's target logit
            (``(N, H, W, 1)`` for Grad-CAM).
        targets: int ``(N,)`` class each map explains.
        logits: float32 ``(N,)`` the target's logit (the score that was differentiated).
        probabilities: float32 ``(N,)`` the target's probability under the model's head
            (softmax of the logits when the model ends in logits).
        class_probabilities: float32 ``(N, classes)`` every class's probability, for
            ranking (top-k).
    """

    maps: np.ndarray
    targets: np.ndarray
    logits: np.ndarray
    probabilities: np.ndarray
    class_probabilities: np.ndarray


class Explainer:
    """Saliency maps for a Keras image classifier: guided backpropagation and its peers.

    Guided backpropagation (Springenberg et al., 2015, "Striving for Simplicity:
    The All Convolutional Net") differentiates a class logit with respect to the
    input, and at every ReLU drops the negative part of the gradient arriving
    from above before applying the ReLU's forward mask. ``method="deconvnet"``
    (Zeiler & Fergus, 2014) drops the negative part but ignores the mask;
    ``method="vanilla"`` is the plain input gradient (Simonyan et al., 2014);
    ``"gradcam"`` is Grad-CAM (Selvaraju et al., 2017), ``"guided-gradcam"`` guided
    backprop times Grad-CAM; ``"integrated-gradients"`` is Sundararajan et al. (2017).
    ``smooth=N`` averages any method over N noisy copies (SmoothGrad, Smilkov et
    al., 2017).

    A softmax or sigmoid head is bypassed: maps explain the pre-activation logit.
    Every ``Relu`` and ``Relu6`` op the forward pass creates is guided (fused
    activations, ``ReLU``/``Activation`` layers, nested models, ``tf.nn.relu`` in
    custom layers); other activations keep their plain gradient.

    Args:
        model: A ``keras.Model`` taking ``(N, H, W, C)`` images and returning
            ``(N, classes)`` scores, a :class:`~guidedbp.models.loading.LoadedModel`, or
            any spec :func:`guidedbp.load_model` takes (a ``.keras``/``.h5`` path, a
            SavedModel folder, ``keras:NAME``).
        method: One of :data:`guidedbp.METHODS`.
        batch_size: Images (or noisy copies, or interpolation steps) per
            forward/backward pass; bounds memory.
        layer: Grad-CAM layer name; default: the last layer with a 4-D output before
            global pooling or flattening, inside nested models too.
        upsample: Grad-CAM upsampling to the input size: ``"bilinear"`` or ``"nearest"``.
        smooth: SmoothGrad copies per image; 0 or 1 turns it off.
        noise: SmoothGrad noise, relative to each image's value range.
        seed: SmoothGrad noise seed: same seed, same maps.
        steps: Integrated-gradients steps.
        baseline: Integrated-gradients baseline: ``"black"``, ``"white"``, ``"blur"``
            or an array in the model's input space.
        preprocess: The preprocessing mode that maps pixels into the model's input
            space, used to place the black and white baselines (taken from a
            :class:`~guidedbp.models.loading.LoadedModel`; ``"none"`` otherwise).

    Raises:
        ValueError: For an unknown method or a bad argument.

    >>> import numpy as np, keras
    >>> model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 3, activation="relu"),
    ...                           keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(5)])
    >>> explainer = Explainer(model, method="guided")
    >>> explainer(np.ones((2, 8, 8, 3), np.float32), target=3).shape
    (2, 8, 8, 3)
    >>> explainer.report.guided_ops
    {'Relu': 1}
    """

    def __init__(
        self,
        model,
        method: str = "guided",
        batch_size: int = 32,
        *,
        layer: str | None = None,
        upsample: str = "bilinear",
        smooth: int = 0,
        noise: float = 0.15,
        seed: int = 0,
        steps: int = 32,
        baseline="black",
        preprocess: str | None = None,
    ):
        if method not in METHODS_GRADIENT:
            raise ValueError(f"method={method!r} is not one of {', '.join(METHODS_GRADIENT)}")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size={batch_size!r} must be a positive integer")
        if upsample not in UPSAMPLING:
            raise ValueError(f"upsample={upsample!r} is not one of {', '.join(UPSAMPLING)}")
        if not isinstance(smooth, int) or smooth < 0:
            raise ValueError(f"smooth={smooth!r} must be a non-negative integer")
        if not noise >= 0:
            raise ValueError(f"noise={noise!r} must be >= 0")
        if not isinstance(steps, int) or steps < 1:
            raise ValueError(f"steps={steps!r} must be a positive integer")
        if layer is not None and method not in _CAM_METHODS:
            raise ValueError(f"layer={layer!r} only applies to {' and '.join(_CAM_METHODS)}")
        from guidedbp.models.loading import LoadedModel, load_model

        if isinstance(model, (str, os.PathLike)):
            model = load_model(model)
        if isinstance(model, LoadedModel):
            preprocess = preprocess or model.preprocess
            model = model.model
        if not callable(model):
            raise ValueError(f"model must be a keras.Model or a model spec, got {type(model).__name__}")
        _graph.register_gradients()
        self.model = model
        self.method = method
        self.batch_size = batch_size
        self.layer, self.upsample = layer, upsample
        self.smooth, self.noise, self.seed = smooth, float(noise), seed
        self.steps, self.baseline = steps, baseline
        self.preprocess = preprocess or "none"
        if isinstance(baseline, str) and baseline not in _averaging.BASELINES:
            raise ValueError(f"baseline={baseline!r} is not one of {', '.join(_averaging.BASELINES)}")
        self._layer_path = None
        if layer is not None:
            self._layer_path = _gradcam.layer_path(model, layer) or layer.split("/")
        self._functions: dict[tuple, tf.types.experimental.GenericFunction] = {}
        self._report: Report | None = None
        self.trace_count = 0

    # -- public API -------------------------------------------------------------------

    def __call__(self, images, target: Target = None) -> np.ndarray:
        """Saliency maps, float32, the same shape as ``images`` (1 channel for Grad-CAM).

        Args:
            images: float ``(N, H, W, C)`` in the model's input space.
            target: ``None`` for each image's top-1 class, an int for one class for all
                images, or a sequence of one class per image.
        """
        return self.explain(images, target).maps

    def explain(self, images, target: Target = None) -> Explanation:
        """Like calling the explainer, but also returns the classes and their scores."""
        images = _as_images(images)
        targets = _as_targets(target, len(images))
        function = self._function_for(images.shape[1:])
        report = self._report_of(function)
        if np.any(targets >= report.num_classes):
            bad = int(targets[targets >= report.num_classes][0])
            raise ValueError(
                f"target class {bad} is out of range: the model has "
                f"{report.num_classes} classes (0..{report.num_classes - 1})"
            )
        clean = self._run(function, images, targets)
        averaged = self.method == "integrated-gradients" or (self.smooth > 1 and self.noise > 0)
        if not averaged:
            return clean

        def base_maps(batch, fixed_targets):
            return self._run(function, batch, fixed_targets).maps

        def method_maps(batch, fixed_targets):
            if self.method != "integrated-gradients":
                return base_maps(batch, fixed_targets)
            baselines = _averaging.make_baselines(batch, self.baseline, *self._black_white(batch))
            return _averaging.integrated_gradients(
                base_maps, batch, fixed_targets, baselines, self.steps, self.batch_size
            )

        if self.smooth > 1 and self.noise > 0:
            maps = _averaging.smoothgrad(method_maps, images, clean.targets, self.smooth,
                                         self.noise, self.seed, self.batch_size)
        else:
            maps = method_maps(images, clean.targets)
        return Explanation(maps, clean.targets, clean.logits, clean.probabilities,
                           clean.class_probabilities)

    @property
    def report(self) -> Report:
        """What was done to the model: guided ops, plain activations, bypassed head."""
        if self._report is None:
            shape = _declared_image_shape(self.model)
            if shape is None:
                raise ValueError(
                    "the model declares no input shape: call the explainer on images "
                    "before reading its report"
                )
            self._report_of(self._function_for(shape))
        return self._report

    # -- running ----------------------------------------------------------------------

    def _run(self, function, images: np.ndarray, targets: np.ndarray) -> Explanation:
        parts = []
        for start in range(0, len(images), self.batch_size):
            batch = images[start : start + self.batch_size]
            parts.append(
                [t.numpy() for t in function(batch, targets[start : start + self.batch_size])]
            )
        maps, chosen, logits, probs, all_probs = (np.concatenate(p) for p in zip(*parts))
        return Explanation(maps=maps, targets=chosen, logits=logits, probabilities=probs,
                           class_probabilities=all_probs)

    def _black_white(self, images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        from guidedbp.models.preprocess import preprocess

        channels = images.shape[-1]
        pixels = np.array([[[[0.0] * channels], [[255.0] * channels]]], np.float32)
        black, white = preprocess(pixels.reshape(2, 1, 1, channels), self.preprocess)
        return black.reshape(channels), white.reshape(channels)

    # -- tracing ----------------------------------------------------------------------

    def _function_for(self, image_shape: tuple):
        declared = _declared_image_shape(self.model)
        if declared is not None:
            _check_shape(image_shape, declared)
            key = declared  # free dims stay free: one trace serves every size
        else:
            key = tuple(image_shape)
            _build_if_needed(self.model, key)
        if key not in self._functions:
            signature = [
                tf.TensorSpec((None, *key), tf.float32, name="images"),
                tf.TensorSpec((None,), tf.int32, name="targets"),
            ]
            # autograph=False: the body builds a graph in plain Python; nothing to convert.
            self._functions[key] = tf.function(
                self._attribute, input_signature=signature, autograph=False
            )
        return self._functions[key]

    def _report_of(self, function) -> Report:
        function.get_concrete_function()  # traces once, filling self._report
        return self._report

    def _attribute(self, images: tf.Tensor, targets: tf.Tensor):
        """Traced body: forward under the override, then the method's backward pass."""
        self.trace_count += 1
        graph = tf.compat.v1.get_default_graph()
        gradient = METHODS_GRADIENT[self.method]
        override = {op_type: gradient for op_type in _graph.RELU_OPS} if gradient else {}
        with graph.gradient_override_map(override):
            output = self.model(images, training=False)
        if isinstance(output, (list, tuple, dict)):
            raise ValueError("the model has several outputs; guidedbp explains one")
        forward_ops = graph.get_operations()

        logits, head, head_op = _graph.find_logits(output)
        relus = _graph.relu_ops(forward_ops)
        excluded = _graph.signed_compositions(relus)
        excluded_names = {op.name for op in excluded}
        if gradient:
            _graph.set_gradient(excluded, None)  # PReLU parts keep their plain gradient
        guided = [op for op in relus if op.name not in excluded_names]
        guided_counts, plain = _graph.census(forward_ops, guided, excluded, head_op)

        if logits.shape.rank != 2:
            raise ValueError(
                f"the model's output has shape {output.shape}; guidedbp expects "
                "(batch, classes)"
            )
        feature_map = None
        if self.method in _CAM_METHODS:
            feature_map = (
                _gradcam.feature_map_by_name(forward_ops, self._layer_path)
                if self._layer_path else _gradcam.default_feature_map(logits, images)
            )
        logits = tf.cast(logits, tf.float32)
        probabilities = _probabilities(logits, tf.cast(output, tf.float32), head)
        if logits.shape[-1] == 1:  # one logit z: class 1 scores z, class 0 scores -z
            logits = tf.concat([-logits, logits], axis=-1)
            probabilities = tf.concat([1.0 - probabilities, probabilities], axis=-1)

        self._report = Report(
            method=self.method,
            guided_ops=guided_counts if gradient else {},
            plain_activations=plain,
            head=head,
            num_classes=int(logits.shape[-1]),
            layer=_scope_of(feature_map),
        )
        if gradient and not guided:
            warnings.warn(
                f"{getattr(self.model, 'name', 'the model')} has no ReLU-family op: "
                f"{self.method} backprop equals the plain gradient for it",
                NoReluWarning,
                stacklevel=2,
            )

        chosen = tf.where(targets < 0, tf.argmax(logits, axis=-1, output_type=tf.int32), targets)
        target_logits = tf.gather(logits, chosen, batch_dims=1)
        score = tf.reduce_sum(target_logits)
        if feature_map is not None:
            # Grad-CAM weighs channels by the *plain* gradient: lift the override
            # for this one gradient, then put it back for the guided pass.
            _graph.set_gradient(guided, None)
            feature_gradient = tf.gradients(score, feature_map, unconnected_gradients="zero")[0]
            _graph.set_gradient(guided, gradient)
            maps = _gradcam.grad_cam(feature_map, feature_gradient, tf.shape(images)[1:3],
                                     self.upsample)
            if self.method == "guided-gradcam":
                guided_maps = tf.gradients(score, images, unconnected_gradients="zero")[0]
                maps = tf.cast(guided_maps, tf.float32) * maps
        else:
            maps = tf.gradients(score, images, unconnected_gradients="zero")[0]
        return (
            tf.cast(maps, tf.float32),
            chosen,
            target_logits,
            tf.gather(probabilities, chosen, batch_dims=1),
            probabilities,
        )


def _scope_of(tensor) -> str | None:
    return None if tensor is None else tensor.op.name.rsplit("/", 1)[0]


def saliency(model, images, target: Target = None, method: str = "guided", **options) -> np.ndarray:
    """One-shot saliency maps: ``Explainer(model, method, **options)(images, target)``.

    >>> import numpy as np, keras
    >>> model = keras.Sequential([keras.Input((4, 4, 1)), keras.layers.Flatten(),
    ...                           keras.layers.Dense(3, activation="softmax")])
    >>> saliency(model, np.zeros((1, 4, 4, 1), np.float32), target=0).dtype
    dtype('float32')
    """
    return Explainer(model, method=method, **options)(images, target)


# -- helpers ----------------------------------------------------------------------------


def _probabilities(logits: tf.Tensor, output: tf.Tensor, head: str | None) -> tf.Tensor:
    if head in ("softmax", "sigmoid"):
        return output
    if head == "log_softmax":
        return tf.exp(output)
    if logits.shape[-1] == 1:
        return tf.sigmoid(logits)
    return tf.nn.softmax(logits)


def _as_images(images) -> np.ndarray:
    array = np.asarray(images)
    if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
        raise ValueError(f"images must be numeric, got dtype {array.dtype}")
    if array.ndim != 4:
        hint = " (add a batch axis: images[None])" if array.ndim == 3 else ""
        raise ValueError(f"images must have shape (N, H, W, C), got {array.shape}{hint}")
    if len(array) == 0:
        raise ValueError("images is empty: expected at least one image")
    return np.ascontiguousarray(array, dtype=np.float32)


def _as_targets(target: Target, count: int) -> np.ndarray:
    if target is None:
        return np.full(count, -1, np.int32)
    if isinstance(target, (int, np.integer)):
        targets = np.full(count, int(target), np.int64)
    else:
        targets = np.asarray(target)
        if targets.ndim != 1 or not np.issubdtype(targets.dtype, np.integer):
            raise ValueError(f"target must be None, an int or a sequence of ints, got {target!r}")
        if len(targets) != count:
            raise ValueError(f"target has {len(targets)} classes for {count} images")
    if np.any(targets < 0):
        raise ValueError(f"target classes must be >= 0, got {int(targets.min())}")
    return targets.astype(np.int32)


def _declared_image_shape(model) -> tuple | None:
    try:
        inputs = model.inputs
    except (AttributeError, ValueError):
        return None
    if not inputs or len(inputs) != 1:
        if inputs and len(inputs) > 1:
            raise ValueError(f"the model has {len(inputs)} inputs; guidedbp explains one image input")
        return None
    shape = tuple(inputs[0].shape[1:])
    return shape if len(shape) == 3 else None


def _check_shape(image_shape: tuple, declared: tuple) -> None:
    if len(image_shape) != len(declared) or any(
        d is not None and d != s for s, d in zip(image_shape, declared)
    ):
        want = "x".join("?" if d is None else str(d) for d in declared)
        got = "x".join(str(s) for s in image_shape)
        raise ValueError(f"the model takes images of HxWxC {want}, got {got}")


def _build_if_needed(model, image_shape: tuple) -> None:
    if not getattr(model, "built", True):
        model(np.zeros((1, *image_shape), np.float32), training=False)
