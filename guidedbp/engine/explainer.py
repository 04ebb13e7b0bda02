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
any of them (:mod:`guidedbp.engine._averaging`). Perturbation methods (Score-CAM,
occlusion) run after the traced pass, forward only, through the same traced function
as :meth:`Explainer.predict` (:mod:`guidedbp.engine._perturbation`).

The engine knows TensorFlow and nothing about files, model specs or
preprocessing: :class:`guidedbp.Explainer` (the package's) adds those.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import tensorflow as tf

from guidedbp.caveats import Caveat
from guidedbp.engine import _averaging, _caveats, _gradcam, _graph, _inputs, _perturbation, _trace
from guidedbp.engine import methods as registry
from guidedbp.engine.options import UPSAMPLING, MethodOptions
from guidedbp.errors import ArgumentError

__all__ = ["Explainer", "Explanation", "NoReluWarning", "UPSAMPLING"]

Target = _inputs.Target


class NoReluWarning(UserWarning):
    """The model has no ReLU-family op, so guided backprop equals the plain gradient."""


@dataclass(frozen=True)
class Explanation:
    """Maps and the classes they explain.

    Attributes:
        by_method: method -> float32 ``(N, H, W, C)`` attributions of each image's
            target logit (``(N, H, W, 1)`` for the class activation maps and
            occlusion), in the explainer's order.
        targets: int ``(N,)`` class each map explains.
        logits: float32 ``(N,)`` the target's logit (the score that was differentiated).
        probabilities: float32 ``(N,)`` the target's probability under the model's head
            (softmax of the logits when the model ends in logits).
        class_probabilities: float32 ``(N, classes)`` every class's probability, for
            ranking (top-k).
        caveats: Per image, the :class:`~guidedbp.caveats.Caveat` items that make its
            maps less meaningful (no guided activation, a negligible map, a capped
            Score-CAM, and those the explainer was given for its model, such as random
            weights); ``()`` when none were looked for. :meth:`caveats_of` reads one
            image's.
    """

    by_method: dict
    targets: np.ndarray
    logits: np.ndarray
    probabilities: np.ndarray
    class_probabilities: np.ndarray
    caveats: tuple[tuple[Caveat, ...], ...] = ()

    def caveats_of(self, index: int) -> tuple[Caveat, ...]:
        """The caveats of image ``index`` (empty when there are none)."""
        return self.caveats[index] if self.caveats else ()

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
    backprop times Grad-CAM; ``"gradcam++"`` Grad-CAM++ (Chattopadhyay et al., 2018),
    ``"layercam"`` LayerCAM (Jiang et al., 2021); ``"integrated-gradients"`` is
    Sundararajan et al. (2017). ``smooth=N`` averages any method over N noisy copies
    (SmoothGrad, Smilkov et al., 2017). Several methods (``method=("guided",
    "gradcam")``) share one forward pass, and methods with the same ReLU rule share
    their backward pass.

    ``"scorecam"`` (Score-CAM, Wang et al., 2020) and ``"occlusion"`` (Zeiler & Fergus,
    2014) are forward-only perturbation methods: about ``max_channels`` (Score-CAM) or
    one per patch position (occlusion, 49 for 224x224 images by default) forward passes
    per image, batched ``batch_size`` at a time, after the gradient methods' pass. The
    classes of one image share those passes (:meth:`explain_top_k`); SmoothGrad
    repeats them for each noisy copy. :meth:`predict` gives the same forward pass's
    class scores and probabilities.

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
            space, to place the black and white integrated-gradients baselines and
            occlusion's ``fill``. Default: the identity (the model takes raw pixels).
        **fields: Method options by their flat names (``layer``, ``upsample``,
            ``smooth``, ``noise``, ``seed``, ``steps``, ``baseline``, ``max_channels``,
            ``patch``, ``stride``, ``fill``), replacing those of ``options``.
        caveats: :class:`~guidedbp.caveats.Caveat` items that hold for every map of
            this model (random weights, unscaled input), put first in each image's
            :attr:`Explanation.caveats`; the engine adds those it finds itself.

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
        caveats: Sequence[Caveat] = (),
        **fields,
    ):
        self.methods = registry.as_methods(method)
        if not all(isinstance(caveat, Caveat) for caveat in caveats):
            raise ArgumentError("caveats must be guidedbp.caveats.Caveat items")
        self.caveats: tuple[Caveat, ...] = tuple(caveats)
        self.options = MethodOptions.of(options, batch_size=batch_size, **fields)
        layer = self.options.gradcam.layer
        cams = [name for name in registry.METHODS if "gradcam" in registry.method(name).options]
        if layer is not None and not set(cams) & set(self.methods):
            raise ArgumentError(f"layer={layer!r} only applies to {', '.join(cams)}")
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
        records = [registry.method(m) for m in self.methods]
        # Gradient methods computed straight from the clean images in the traced pass,
        # path-integrated ones, and forward-only perturbation ones.
        self._direct = tuple(r.name for r in records
                             if not r.path_integrated and not r.perturbation)
        self._integrated_methods = tuple(r.name for r in records if r.path_integrated)
        self._perturbed = tuple(r.name for r in records if r.perturbation)
        # The traced pass that resolves the classes: the direct methods', else the one
        # integrated gradients runs anyway, else a pass computing no map.
        self._clean = self._direct or self._integrated_methods[:1]
        self._features = any(r.perturbation and r.feature_map for r in records)
        self._functions: dict[tuple, tf.types.experimental.GenericFunction] = {}
        self._predict_functions: dict[tuple, tf.types.experimental.GenericFunction] = {}
        self._reports: dict[tuple, _graph.Report] = {}
        self._warned: set[tuple] = set()
        self._feature_channels: dict[tuple, int] = {}  # Score-CAM's feature map, per key
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
        for the class activation maps and occlusion).

        Args:
            images: float ``(N, H, W, C)`` in the model's input space.
            target: ``None`` for each image's top-1 class, an int for one class for all
                images, or a sequence of one class per image.
        """
        return self.explain(images, target).maps

    def explain(self, images, target: Target = None) -> Explanation:
        """Every method's maps, with the classes they explain and their scores."""
        images = _inputs.as_images(images)
        targets = _inputs.as_targets(target, len(images))
        key = self._signature(images.shape[1:])
        report = self._report_for(key)
        _inputs.check_range(targets, report.num_classes)
        smooth = self.options.smoothgrad
        if smooth.active:
            clean = self._run(self._clean, key, images, targets)
            maps = _averaging.smoothgrad(
                lambda batch, fixed: self._fixed_maps(key, batch, fixed), images, clean.targets,
                smooth.smooth, smooth.noise, smooth.seed, self.batch_size,
            )
        else:
            clean = self._columns(key, images, targets[:, None])[0]
            if not self._integrated_methods:
                return self._with_caveats(key, images, clean)
            maps = {**clean.by_method, **self._integrated(key, images, clean.targets)}
        return self._with_caveats(key, images, Explanation(
            {m: maps[m] for m in self.methods}, clean.targets, clean.logits,
            clean.probabilities, clean.class_probabilities))

    def explain_top_k(self, images, k: int) -> list[Explanation]:
        """Each image's ``k`` most probable classes (fewer if the model has fewer), most
        probable first: one :class:`Explanation` per rank.

        The ranks share one forward pass (k backward passes), and the perturbation
        methods' forward passes, unless SmoothGrad or integrated gradients average many
        passes anyway. Ties go to the lower class index.
        """
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ArgumentError(f"k={k!r} must be a positive integer")
        images = _inputs.as_images(images)
        key = self._signature(images.shape[1:])
        k = min(int(k), self._report_for(key).num_classes)
        ranks = np.tile(-np.arange(1, k + 1, dtype=np.int32), (len(images), 1))
        return [self._with_caveats(key, images, explanation)
                for explanation in self._explain_columns(key, images, ranks)]

    def explain_classes(self, images, classes: Sequence[int]) -> list[Explanation]:
        """The same ``classes`` for every image, in that order, from one forward pass:
        one :class:`Explanation` per class."""
        images = _inputs.as_images(images)
        key = self._signature(images.shape[1:])
        columns = [_inputs.as_targets(int(c) if isinstance(c, (int, np.integer)) else c,
                                      len(images))
                   for c in classes]
        if not columns:
            raise ArgumentError("classes is empty: expected at least one class")
        return [self._with_caveats(key, images, explanation)
                for explanation in self._explain_columns(key, images, np.stack(columns, axis=1))]

    def _explain_columns(self, key: tuple, images: np.ndarray, targets: np.ndarray
                         ) -> list[Explanation]:
        report = self._report_for(key)
        _inputs.check_range(targets, report.num_classes)
        if not self.options.smoothgrad.active and not self._integrated_methods:
            return self._columns(key, images, targets)
        # Averaged methods run their many passes per class anyway: resolve the ranks
        # from one clean pass, then explain class by class.
        if np.any(targets < 0):
            clean = self._run_columns(self._clean, key, images, targets).explanations
            targets = np.stack([e.targets for e in clean], axis=1).astype(np.int32)
        return [self.explain(images, targets[:, column]) for column in range(targets.shape[1])]

    def predict(self, images) -> tuple[np.ndarray, np.ndarray]:
        """Every class's score and probability, forward only.

        The scores are the logits the maps explain (a softmax or sigmoid head bypassed;
        a single-logit model scores class 0 as ``-z`` and class 1 as ``z``); the
        probabilities are the model's own. Images go through the model ``batch_size`` at
        a time, in a function traced once per input signature, with no gradient.

        Args:
            images: float ``(N, H, W, C)`` in the model's input space.

        Returns:
            ``(scores, probabilities)``, float32 ``(N, classes)`` each.

        >>> import numpy as np, keras
        >>> model = keras.Sequential([keras.Input((4, 4, 1)), keras.layers.Flatten(),
        ...                           keras.layers.Dense(3, activation="softmax")])
        >>> scores, probabilities = Explainer(model).predict(np.ones((2, 4, 4, 1)))
        >>> scores.shape, probabilities.shape
        ((2, 3), (2, 3))
        """
        images = _inputs.as_images(images)
        key = self._signature(images.shape[1:])
        function = self._predict_function(key)
        parts = [function(images[start : start + self.batch_size])
                 for start in range(0, len(images), self.batch_size)]
        return (np.concatenate([scores.numpy() for scores, _ in parts]),
                np.concatenate([probabilities.numpy() for _, probabilities in parts]))

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
        shape = _inputs.declared_image_shape(self.model)
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
        maps = {}
        if self._direct or self._perturbed:
            maps = self._columns(key, images, targets[:, None])[0].by_method
        return {**maps, **self._integrated(key, images, targets)}

    def _columns(self, key: tuple, images: np.ndarray, targets: np.ndarray
                 ) -> list[Explanation]:
        """The direct and perturbation methods for K classes per image (``targets``
        ``(N, K)``, ``-r`` the r-th most probable): one Explanation per column, without
        the path-integrated methods."""
        run = self._run_columns(self._clean, key, images, targets, features=self._features)
        computed = [m for m in self.methods if m in self._direct or m in self._perturbed]
        if not self._perturbed:
            return [replace(e, by_method={m: e.by_method[m] for m in computed})
                    for e in run.explanations]
        if run.features is not None:
            self._feature_channels[key] = int(run.features.shape[-1])
        chosen = np.stack([e.targets for e in run.explanations], axis=1).astype(np.int32)
        probe = _perturbation.Probe(
            images, chosen, lambda batch: self._scores(key, batch), self.batch_size,
            self.options, features=run.features,
            fill=self._pixel_values(self.options.occlusion.fill, images.shape[-1]),
        )
        perturbed = {m: registry.method(m).combine(probe) for m in self._perturbed}
        return [replace(e, by_method={m: perturbed[m][:, column] if m in perturbed
                                      else e.by_method[m] for m in computed})
                for column, e in enumerate(run.explanations)]

    def _integrated(self, key: tuple, images: np.ndarray, targets: np.ndarray) -> dict:
        """The path-integrated methods' maps, each over its own base map."""
        names = self._integrated_methods
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
        """``methods`` (gradient methods) for one class per image (``targets`` ``(N,)``)."""
        return self._run_columns(methods, key, images, targets[:, None]).explanations[0]

    def check_memory(self, image_shape: tuple, columns: int = 1, methods: tuple = (),
                     batch: int | None = None) -> None:
        """Refuse at once a batch whose images and maps alone would not fit in the free
        memory (``columns`` classes per image, the explainer's methods by default), or
        an occlusion patch that does not fit the images or takes too many positions.

        Raises:
            ArgumentError: Naming the sizes and a ``batch_size`` that would fit.
        """
        _inputs.check_memory(batch or self.batch_size, tuple(image_shape),
                             columns * len(methods or self.methods))
        if "occlusion" in (methods or self.methods):  # its patch fits, and not too often
            occlusion = self.options.occlusion
            _perturbation.occlusion_geometry(*image_shape[:2], occlusion.patch, occlusion.stride)

    def _run_columns(self, methods: tuple, key: tuple, images: np.ndarray,
                     targets: np.ndarray, features: bool = False) -> _Pass:
        """Gradient ``methods`` for K classes per image (``targets`` ``(N, K)``, ``-r`` the
        r-th most probable), from one forward pass per batch: one Explanation per column,
        and with ``features`` the feature map of the images."""
        self.check_memory(images.shape[1:], targets.shape[1], methods,
                          batch=min(len(images), self.batch_size))
        function = self._function(key, methods, targets.shape[1])
        parts = []
        for start in range(0, len(images), self.batch_size):
            parts.append(function(images[start : start + self.batch_size],
                                  targets[start : start + self.batch_size]))
        joined = {name: np.concatenate([p[name].numpy() for p in parts])
                  for name in ("targets", "logits", "probabilities", "class_probabilities")}
        maps = {m: np.concatenate([p["maps"][m].numpy() for p in parts]) for m in methods}
        explanations = [
            Explanation({m: maps[m][:, column] for m in methods}, joined["targets"][:, column],
                        joined["logits"][:, column], joined["probabilities"][:, column],
                        joined["class_probabilities"])
            for column in range(targets.shape[1])
        ]
        feature_maps = (np.concatenate([p["features"].numpy() for p in parts]) if features
                        else None)
        return _Pass(explanations, feature_maps)

    def _scores(self, key: tuple, images: np.ndarray) -> np.ndarray:
        """Class scores of at most ``batch_size`` images, forward only."""
        return self._predict_function(key)(images)[0].numpy()

    def _black_white(self, channels: int) -> tuple[np.ndarray, np.ndarray]:
        black, white = self._pixel_values([0.0, 255.0], channels)
        return black, white

    def _pixel_values(self, values, channels: int) -> np.ndarray:
        """Uniform pixels of 0-255 ``values`` in the model's input space: ``(len, C)``
        (``(C,)`` for one value)."""
        values = np.asarray(values, np.float32)
        pixels = values.reshape(-1).repeat(channels).reshape(-1, 1, 1, channels)
        if self.pixel_to_input is not None:
            pixels = np.asarray(self.pixel_to_input(pixels), np.float32)
        pixels = pixels.reshape(-1, channels)
        return pixels[0] if values.ndim == 0 else pixels

    # -- caveats ----------------------------------------------------------------------

    def _with_caveats(self, key: tuple, images: np.ndarray, explanation: Explanation
                      ) -> Explanation:
        """``explanation`` with each image's caveats: the model's (given), then those of
        the traced model, then those of the image's own maps (:mod:`._caveats`). Computed
        afresh, so applying it twice is harmless."""
        shared = [*self.caveats, *_caveats.of_model(
            self.methods, self._report_for(key).guided_ops, self.options.scorecam.max_channels,
            self._feature_channels.get(key))]

        def span() -> float:
            black, white = self._black_white(images.shape[-1])
            return float(np.max(np.abs(white.astype(np.float64) - black)))

        return replace(explanation, caveats=_caveats.of_images(
            explanation.by_method, len(images), span, shared))

    # -- tracing ----------------------------------------------------------------------

    def _signature(self, image_shape: tuple) -> tuple:
        """The trace key of an image shape: the declared shape (free dims stay free, so
        one trace serves every size), else the shape itself."""
        declared = _inputs.declared_image_shape(self.model)
        if declared is not None:
            _inputs.check_shape(image_shape, declared)
            return declared
        key = tuple(image_shape)
        _inputs.build_if_needed(self.model, key)
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
                    self.options.gradcam.upsample, features=self._features,
                )
                self._reports.setdefault(key, report)
                return outputs

            # autograph=False: the body builds a graph in plain Python; nothing to convert.
            self._functions[(key, methods, columns)] = tf.function(
                traced, input_signature=signature, autograph=False
            )
        return self._functions[(key, methods, columns)]

    def _predict_function(self, key: tuple):
        """The forward-only function of signature ``key``: images -> (scores,
        probabilities)."""
        if key not in self._predict_functions:

            def forward(images):
                self.trace_count += 1
                return _trace.predict(self.model, images)

            self._predict_functions[key] = tf.function(
                forward, input_signature=[tf.TensorSpec((None, *key), tf.float32, name="images")],
                autograph=False,
            )
        return self._predict_functions[key]


@dataclass(frozen=True)
class _Pass:
    """What one traced pass over the images gave: an Explanation per class column, and
    the feature map (``(N, h, w, k)``) when Score-CAM needs it."""

    explanations: list[Explanation]
    features: np.ndarray | None = None


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
