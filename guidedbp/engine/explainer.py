"""The attribution engine: guided backpropagation in one backward pass, and its peers.

The forward pass is traced into a ``tf.function`` under the graph's
``gradient_override_map``, which maps every ReLU-family op to a registered
gradient whose body is the ``grad_ys`` thresholding (clamp the arriving gradient
at zero, then send it through the ReLU's own gradient). One ordinary
``tf.gradients`` call then yields the guided map. The model itself is never
touched: the override lives only on the traced graph.

One explainer computes several methods from a single forward pass
(:mod:`guidedbp.engine._trace`); the methods are records of
:mod:`guidedbp.engine.methods`. SmoothGrad and integrated gradients run on top of
any of them (:mod:`guidedbp.engine._averaging`).

The engine knows TensorFlow and nothing about files, model specs or
preprocessing: :class:`guidedbp.Explainer` (the package's) adds those.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from guidedbp.engine import _averaging, _gradcam, _graph, _trace
from guidedbp.engine import methods as registry
from guidedbp.engine.options import UPSAMPLING, MethodOptions
from guidedbp.errors import ArgumentError

__all__ = ["Explainer", "Explanation", "NoReluWarning", "UPSAMPLING"]

Target = int | Sequence[int] | np.ndarray | None


class NoReluWarning(UserWarning):
    """The model has no ReLU-family op, so guided backprop equals the plain gradient."""


@dataclass(frozen=True)
class Explanation:
    """Maps and the classes they explain.

    Attributes:
        by_method: method -> float32 ``(N, H, W, C)`` attributions of each image's
            target logit (``(N, H, W, 1)`` for Grad-CAM), in the explainer's order.
        targets: int ``(N,)`` class each map explains.
        logits: float32 ``(N,)`` the target's logit (the score that was differentiated).
        probabilities: float32 ``(N,)`` the target's probability under the model's head
            (softmax of the logits when the model ends in logits).
        class_probabilities: float32 ``(N, classes)`` every class's probability, for
            ranking (top-k).
    """

    by_method: dict
    targets: np.ndarray
    logits: np.ndarray
    probabilities: np.ndarray
    class_probabilities: np.ndarray

    @property
    def maps(self) -> np.ndarray:
        """The first (or only) method's maps."""
        return next(iter(self.by_method.values()))

    @property
    def methods(self) -> tuple[str, ...]:
        return tuple(self.by_method)


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
    al., 2017). Several methods (``method=("guided", "gradcam")``) share one forward
    pass, and methods with the same ReLU rule share their backward pass.

    A softmax or sigmoid head is bypassed: maps explain the pre-activation logit.
    Every ``Relu`` and ``Relu6`` op the forward pass creates is guided (fused
    activations, ``ReLU``/``Activation`` layers, nested models, ``tf.nn.relu`` in
    custom layers); other activations keep their plain gradient.

    Args:
        model: A traceable callable ``model(images, training=False) -> (N, classes)``
            taking ``(N, H, W, C)`` images: a ``keras.Model``, or any object with that
            call (and optionally Keras' ``inputs`` and ``layers``).
        method: A method name of :data:`guidedbp.METHODS`, a comma list, or a
            sequence of names.
        batch_size: Overrides ``options.batch_size``.
        options: :class:`~guidedbp.engine.options.MethodOptions`.
        pixel_to_input: Maps 0-255 pixels ``(N, H, W, C)`` into the model's input
            space, to place the black and white integrated-gradients baselines.
            Default: the identity (the model takes raw pixels).
        **fields: Method options by their flat names (``layer``, ``upsample``,
            ``smooth``, ``noise``, ``seed``, ``steps``, ``baseline``), replacing
            those of ``options``.

    Raises:
        ValueError: For an unknown method or a bad argument.

    >>> import numpy as np, keras
    >>> model = keras.Sequential([
    ...     keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 3, activation="relu"),
    ...     keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(5)])
    >>> explainer = Explainer(model, method="guided")
    >>> explainer(np.ones((2, 8, 8, 3), np.float32), target=3).shape
    (2, 8, 8, 3)
    >>> explainer.report.guided_ops
    {'Relu': 1}
    """

    def __init__(
        self,
        model,
        method: str | Sequence[str] = "guided",
        batch_size: int | None = None,
        *,
        options: MethodOptions | None = None,
        pixel_to_input: Callable[[np.ndarray], np.ndarray] | None = None,
        **fields,
    ):
        self.methods = registry.as_methods(method)
        self.options = MethodOptions.of(options, batch_size=batch_size, **fields)
        layer = self.options.gradcam.layer
        cams = [name for name in registry.METHODS if registry.method(name).options == "gradcam"]
        if layer is not None and not set(cams) & set(self.methods):
            raise ArgumentError(f"layer={layer!r} only applies to {' and '.join(cams)}")
        if isinstance(model, (str, os.PathLike)):
            raise ArgumentError(
                f"model={os.fspath(model)!r} is a path: load it with guidedbp.load_model, "
                "or use guidedbp.Explainer, which takes model files too"
            )
        if not callable(model):
            raise ArgumentError(
                f"model must be a keras.Model or a callable, got {type(model).__name__}"
            )
        _graph.register_gradients()
        self.model = model
        self.pixel_to_input = pixel_to_input
        self._layer_path = None
        if layer is not None:
            self._layer_path = _gradcam.layer_path(model, layer) or layer.split("/")
        # Methods computed straight from the clean images, and path-integrated ones.
        self._direct = tuple(m for m in self.methods if not registry.method(m).path_integrated)
        self._clean = self._direct or self.methods
        self._functions: dict[tuple, tf.types.experimental.GenericFunction] = {}
        self._reports: dict[tuple, _graph.Report] = {}
        self._warned: set[tuple] = set()
        self.trace_count = 0

    @property
    def method(self) -> str:
        """The methods as one name: ``guided`` or ``guided,gradcam``."""
        return ",".join(self.methods)

    @property
    def batch_size(self) -> int:
        return self.options.batch_size

    # -- public API -------------------------------------------------------------------

    def __call__(self, images, target: Target = None) -> np.ndarray:
        """Saliency maps of the first method, float32, shaped like ``images`` (1 channel
        for Grad-CAM).

        Args:
            images: float ``(N, H, W, C)`` in the model's input space.
            target: ``None`` for each image's top-1 class, an int for one class for all
                images, or a sequence of one class per image.
        """
        return self.explain(images, target).maps

    def explain(self, images, target: Target = None) -> Explanation:
        """Every method's maps, with the classes they explain and their scores."""
        images = _as_images(images)
        targets = _as_targets(target, len(images))
        key = self._signature(images.shape[1:])
        report = self._report_for(key)
        _check_range(targets, report.num_classes)
        clean = self._run(self._clean, key, images, targets)
        smoothing = self.options.smoothgrad.active
        if not smoothing and self._direct == self.methods:
            return clean
        if smoothing:
            smooth = self.options.smoothgrad
            maps = _averaging.smoothgrad(
                lambda batch, fixed: self._fixed_maps(key, batch, fixed), images, clean.targets,
                smooth.smooth, smooth.noise, smooth.seed, self.batch_size,
            )
        else:
            maps = {**clean.by_method, **self._integrated(key, images, clean.targets)}
        return Explanation({m: maps[m] for m in self.methods}, clean.targets, clean.logits,
                           clean.probabilities, clean.class_probabilities)

    def explain_top_k(self, images, k: int) -> list[Explanation]:
        """Each image's ``k`` most probable classes (fewer if the model has fewer), most
        probable first: one :class:`Explanation` per rank.

        The ranks share one forward pass (k backward passes) unless SmoothGrad or
        integrated gradients average many passes anyway. Ties go to the lower class
        index.
        """
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ArgumentError(f"k={k!r} must be a positive integer")
        images = _as_images(images)
        key = self._signature(images.shape[1:])
        k = min(int(k), self._report_for(key).num_classes)
        ranks = np.tile(-np.arange(1, k + 1, dtype=np.int32), (len(images), 1))
        return self._explain_columns(key, images, ranks)

    def explain_classes(self, images, classes: Sequence[int]) -> list[Explanation]:
        """The same ``classes`` for every image, in that order, from one forward pass:
        one :class:`Explanation` per class."""
        images = _as_images(images)
        key = self._signature(images.shape[1:])
        columns = [_as_targets(int(c) if isinstance(c, (int, np.integer)) else c, len(images))
                   for c in classes]
        if not columns:
            raise ArgumentError("classes is empty: expected at least one class")
        return self._explain_columns(key, images, np.stack(columns, axis=1))

    def _explain_columns(self, key: tuple, images: np.ndarray, targets: np.ndarray
                         ) -> list[Explanation]:
        report = self._report_for(key)
        _check_range(targets, report.num_classes)
        if not self.options.smoothgrad.active and self._direct == self.methods:
            return self._run_columns(self.methods, key, images, targets)
        # Averaged methods run their many passes per class anyway: resolve the ranks
        # from one clean pass, then explain class by class.
        if np.any(targets < 0):
            clean = self._run_columns(self._clean, key, images, targets)
            targets = np.stack([e.targets for e in clean], axis=1).astype(np.int32)
        return [self.explain(images, targets[:, column]) for column in range(targets.shape[1])]

    def report_for(self, image_shape: tuple) -> _graph.Report:
        """The report for images of ``(H, W, C)`` ``image_shape``, tracing once for it.

        Raises:
            ArgumentError: The model cannot take images of that shape.
        """
        return self._report_for(self._signature(tuple(image_shape)))

    @property
    def report(self) -> _graph.Report:
        """What was done to the model: guided ops, plain activations, bypassed head.

        The report of the model's declared input shape; where the model declares none,
        the report of the newest image shape explained (:meth:`report_for` names one).
        """
        shape = _declared_image_shape(self.model)
        if shape is not None:
            return self._report_for(shape)
        if not self._reports:
            raise ArgumentError(
                "the model declares no input shape: call the explainer on images "
                "before reading its report"
            )
        return next(reversed(self._reports.values()))

    # -- running ----------------------------------------------------------------------

    def _fixed_maps(self, key: tuple, images: np.ndarray, targets: np.ndarray) -> dict:
        """Every method's maps for fixed classes (no SmoothGrad)."""
        maps = self._run(self._direct, key, images, targets).by_method if self._direct else {}
        return {**maps, **self._integrated(key, images, targets)}

    def _integrated(self, key: tuple, images: np.ndarray, targets: np.ndarray) -> dict:
        """The path-integrated methods' maps, each over its own base map."""
        names = [name for name in self.methods if registry.method(name).path_integrated]
        if not names:
            return {}
        ig = self.options.integrated_gradients
        baselines = _averaging.make_baselines(images, ig.baseline,
                                              *self._black_white(images.shape[-1]))
        result = {}
        for name in names:
            result[name] = _averaging.integrated_gradients(
                lambda batch, fixed, name=name: self._run((name,), key, batch, fixed).maps,
                images, targets, baselines, ig.steps, self.batch_size,
            )
        return result

    def _run(self, methods: tuple, key: tuple, images: np.ndarray, targets: np.ndarray
             ) -> Explanation:
        """``methods`` for one class per image (``targets`` ``(N,)``)."""
        return self._run_columns(methods, key, images, targets[:, None])[0]

    def _run_columns(self, methods: tuple, key: tuple, images: np.ndarray,
                     targets: np.ndarray) -> list[Explanation]:
        """``methods`` for K classes per image (``targets`` ``(N, K)``, ``-r`` the r-th most
        probable), from one forward pass per batch: one Explanation per column."""
        function = self._function(key, methods, targets.shape[1])
        parts = []
        for start in range(0, len(images), self.batch_size):
            parts.append(function(images[start : start + self.batch_size],
                                  targets[start : start + self.batch_size]))
        joined = {name: np.concatenate([p[name].numpy() for p in parts])
                  for name in ("targets", "logits", "probabilities", "class_probabilities")}
        maps = {m: np.concatenate([p["maps"][m].numpy() for p in parts]) for m in methods}
        return [Explanation({m: maps[m][:, column] for m in methods},
                            joined["targets"][:, column], joined["logits"][:, column],
                            joined["probabilities"][:, column], joined["class_probabilities"])
                for column in range(targets.shape[1])]

    def _black_white(self, channels: int) -> tuple[np.ndarray, np.ndarray]:
        pixels = np.array([0.0, 255.0], np.float32).repeat(channels).reshape(2, 1, 1, channels)
        if self.pixel_to_input is not None:
            pixels = np.asarray(self.pixel_to_input(pixels), np.float32)
        return pixels[0].reshape(channels), pixels[1].reshape(channels)

    # -- tracing ----------------------------------------------------------------------

    def _signature(self, image_shape: tuple) -> tuple:
        """The trace key of an image shape: the declared shape (free dims stay free, so
        one trace serves every size), else the shape itself."""
        declared = _declared_image_shape(self.model)
        if declared is not None:
            _check_shape(image_shape, declared)
            return declared
        key = tuple(image_shape)
        _build_if_needed(self.model, key)
        return key

    def _report_for(self, key: tuple) -> _graph.Report:
        """The report of signature ``key``, tracing the clean function once for it."""
        if key not in self._reports:
            self._function(key, self._clean).get_concrete_function()
        report = self._reports[key]
        if key not in self._warned:
            self._warned.add(key)
            swapping = [m for m in self.methods if registry.swaps_relus((m,))]
            if swapping and not report.guided_ops:
                name = getattr(self.model, "name", None) or "the model"
                what = (f"{swapping[0]} backprop equals" if len(swapping) == 1
                        else f"{' and '.join(swapping)} equal")
                warnings.warn(
                    f"{name} has no ReLU-family op: {what} the plain gradient for it",
                    NoReluWarning, stacklevel=_caller_stacklevel(),
                )
        return report

    def _function(self, key: tuple, methods: tuple, columns: int = 1):
        if (key, methods, columns) not in self._functions:
            signature = [
                tf.TensorSpec((None, *key), tf.float32, name="images"),
                tf.TensorSpec((None, columns), tf.int32, name="targets"),
            ]

            def traced(images, targets):
                self.trace_count += 1
                outputs, report = _trace.attribute(
                    self.model, images, targets, methods, self.methods, self._layer_path,
                    self.options.gradcam.upsample,
                )
                self._reports.setdefault(key, report)
                return outputs

            # autograph=False: the body builds a graph in plain Python; nothing to convert.
            self._functions[(key, methods, columns)] = tf.function(
                traced, input_signature=signature, autograph=False
            )
        return self._functions[(key, methods, columns)]


# -- helpers ----------------------------------------------------------------------------


def _caller_stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the first frame outside guidedbp
    (and TensorFlow, which may sit between when a trace is running)."""
    import sys

    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frame, level = sys._getframe(1), 1
    while frame is not None:
        filename = os.path.abspath(frame.f_code.co_filename)
        if not filename.startswith(package + os.sep) and "/tensorflow/" not in filename:
            return level
        frame, level = frame.f_back, level + 1
    return 1


def _check_range(targets: np.ndarray, num_classes: int) -> None:
    if np.any(targets >= num_classes):
        bad = int(targets[targets >= num_classes][0])
        raise ArgumentError(
            f"target class {bad} is out of range: the model has "
            f"{num_classes} classes (0..{num_classes - 1})"
        )


def _as_images(images) -> np.ndarray:
    array = np.asarray(images)
    if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
        raise ArgumentError(f"images must be numeric, got dtype {array.dtype}")
    if array.ndim != 4:
        hint = " (add a batch axis: images[None])" if array.ndim == 3 else ""
        raise ArgumentError(f"images must have shape (N, H, W, C), got {array.shape}{hint}")
    if len(array) == 0:
        raise ArgumentError("images is empty: expected at least one image")
    return np.ascontiguousarray(array, dtype=np.float32)


def _as_targets(target: Target, count: int) -> np.ndarray:
    if target is None:
        return np.full(count, -1, np.int32)
    if isinstance(target, (int, np.integer)):
        targets = np.full(count, int(target), np.int64)
    else:
        targets = np.asarray(target)
        if targets.ndim != 1 or not np.issubdtype(targets.dtype, np.integer):
            raise ArgumentError(
                f"target must be None, an int or a sequence of ints, got {target!r}"
            )
        if len(targets) != count:
            raise ArgumentError(f"target has {len(targets)} classes for {count} images")
    if np.any(targets < 0):
        raise ArgumentError(f"target classes must be >= 0, got {int(targets.min())}")
    return targets.astype(np.int32)


def _declared_image_shape(model) -> tuple | None:
    try:
        inputs = model.inputs
    except (AttributeError, ValueError):
        return None
    if not inputs or len(inputs) != 1:
        if inputs and len(inputs) > 1:
            raise ArgumentError(
                f"the model has {len(inputs)} inputs; guidedbp explains one image input"
            )
        return None
    shape = tuple(inputs[0].shape[1:])
    return shape if len(shape) == 3 else None


def _check_shape(image_shape: tuple, declared: tuple) -> None:
    if len(image_shape) != len(declared) or any(
        d is not None and d != s for s, d in zip(image_shape, declared)
    ):
        want = "x".join("?" if d is None else str(d) for d in declared)
        got = "x".join(str(s) for s in image_shape)
        raise ArgumentError(f"the model takes images of HxWxC {want}, got {got}")


def _build_if_needed(model, image_shape: tuple) -> None:
    if not getattr(model, "built", True):
        model(np.zeros((1, *image_shape), np.float32), training=False)
