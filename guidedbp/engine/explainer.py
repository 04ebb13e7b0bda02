"""The attribution engine: guided backpropagation in one backward pass, and its peers.

The forward pass is traced into a ``tf.function`` under the graph's
``gradient_override_map``, which maps every ReLU-family op to a registered
gradient whose body is the ``grad_ys`` thresholding (clamp the arriving gradient
at zero, then send it through the ReLU's own gradient). One ordinary
``tf.gradients`` call then yields the guided map. The model itself is never
touched: the override lives only on the traced graph.

One explainer computes several methods from a single forward pass
(:mod:`guidedbp.engine._trace`); the methods are records of
:mod:`guidedbp.engine.methods`, each naming the runner that computes it
(:mod:`guidedbp.engine._runners`: the traced gradient pass, path-integrated,
perturbation), and the explainer asks each runner for its methods' maps. The traced
functions are kept per input signature (:mod:`guidedbp.engine._functions`).
SmoothGrad runs on top of every method (:mod:`guidedbp.engine._averaging`).
Perturbation methods (Score-CAM, occlusion) run after the traced pass, forward only,
through the same traced function as :meth:`Explainer.predict`
(:mod:`guidedbp.engine._perturbation`).

The engine knows TensorFlow and nothing about files, model specs or
preprocessing: :class:`guidedbp.Explainer` (the package's) adds those.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial

import numpy as np

from guidedbp.caveats import Caveat
from guidedbp.engine import (
    _activations,
    _averaging,
    _caveats,
    _gradcam,
    _graph,
    _inputs,
    _payoff,
    _precision,
    detect,
)
from guidedbp.engine import methods as registry
from guidedbp.engine._columns import (
    Column,
    Columns,
    NotAClass,
    NotAClassifier,
    columns_of,
    pass_columns,
    traced_passes,
)
from guidedbp.engine._functions import TracedFunctions
from guidedbp.engine._runners import MethodRunners, Pass, Progress, hands_out_features
from guidedbp.engine.explanation import Explanation, NoReluWarning, ValueOutputWarning
from guidedbp.engine.options import UPSAMPLING, MethodOptions
from guidedbp.engine.targets import OutputName, Target, Unit, as_target
from guidedbp.errors import ArgumentError

__all__ = ["Explainer", "Explanation", "NoReluWarning", "UPSAMPLING", "ValueOutputWarning"]

#: What to explain: a class (``None``: each image's top-1; an int; one per image), a
#: :class:`~guidedbp.engine.targets.Target`, or a score function of the output.
TargetLike = _inputs.Target | Target | Callable


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
    Sundararajan et al. (2017); ``"gradient-input"`` the plain gradient times the input
    (Shrikumar et al., 2016); ``"xgradcam"``, ``"hirescam"`` and ``"eigencam"`` are
    XGrad-CAM (Fu et al., 2020), HiResCAM (Draelos & Carin, 2020) and Eigen-CAM (Muhammad
    & Yeasin, 2020, no gradient). ``smooth=N`` averages any method over N noisy copies
    (SmoothGrad, Smilkov et al., 2017); ``"squaregrad"`` (Hooker et al., 2019) and
    ``"vargrad"`` (Adebayo et al., 2018) are the mean square and the variance of the plain
    gradient over those copies (16 of them where ``smooth`` is 0 or 1), not averaged again.
    Several methods (``method=("guided", "gradcam")``) share one forward pass, and methods
    with the same ReLU rule share their backward pass.

    ``"scorecam"`` (Score-CAM, Wang et al., 2020) and ``"occlusion"`` (Zeiler & Fergus,
    2014) are forward-only perturbation methods: about ``max_channels`` (Score-CAM) or
    one per patch position (occlusion, 49 for 224x224 images by default) forward passes
    per image, batched ``batch_size`` at a time, after the gradient methods' pass. So
    are the black-box methods, which need nothing but the model's scores: ``"rise"``
    (Petsiuk et al., 2018; ``masks`` passes), ``"kernelshap"`` (Lundberg & Lee, 2017)
    and ``"lime"`` (Ribeiro et al., 2016) over grid superpixels (``samples`` passes),
    ``"sobol"`` (Fel et al., 2021; ``designs * (grid ** 2 + 2)`` passes). The
    classes of one image share those passes (:meth:`explain_top_k`); SmoothGrad
    repeats them for each noisy copy. :meth:`predict` gives the same forward pass's
    class scores and probabilities.

    ``images`` are in the model's input space, what its call takes: raw 0-255 pixels, for
    models with a Rescaling layer inside; otherwise preprocessed as the model was trained.

    A softmax or sigmoid head is bypassed: maps explain the pre-activation logit.
    Every ``Relu`` and ``Relu6`` op the forward pass creates is guided (fused
    activations, ``ReLU``/``Activation`` layers, nested models, ``tf.nn.relu`` in
    custom layers), and with ``guide="all"`` (guided backprop's default) every other
    elementwise activation too — SiLU, GELU, hard-swish, sigmoid, tanh... — by the
    generalised rule: ``f'(x) * max(g, 0)`` for guided backprop, ``max(g, 0)`` for
    deconvnet (:mod:`guidedbp.engine._activations`). ``guide="relu"`` keeps the papers'
    scope, the ReLU family alone (deconvnet's default).

    Beyond classes, ``target=`` takes any :mod:`~guidedbp.engine.targets` target (one
    output unit, a segmentation region, a similarity to a reference, a score function of
    the output), on models with any outputs; ``output=`` picks the head of a model with
    several.

    Args:
        model: A traceable callable ``model(images, training=False)`` taking ``(N, H, W,
            C)`` images: a ``keras.Model``, or any object with that call (and optionally
            Keras' ``inputs`` and ``layers``). Its output may be ``(N, classes)``, any
            tensor, or a list or dict of them.
        method: A method name of :data:`guidedbp.METHODS`, a comma list, or a
            sequence of names.
        batch_size: Overrides ``options.batch_size``.
        options: :class:`~guidedbp.engine.options.MethodOptions`.
        pixel_to_input: Maps 0-255 pixels ``(N, H, W, C)`` into the model's input
            space, to place the black and white integrated-gradients baselines and
            occlusion's ``fill``. Default: the identity (the model takes raw pixels).
        **fields: Method options by their flat names (``guide``, ``layer``, ``upsample``,
            ``smooth``, ``noise``, ``seed``, ``steps``, ``baseline``, ``max_channels``,
            ``patch``, ``stride``, ``fill``, ``grid``, ``masks``, ``keep_probability``,
            ``samples``, ``designs``, ``segments``, ``precision``), replacing those of
            ``options``. ``precision="mixed"`` runs the model's passes in bfloat16 (float16
            on GPUs of compute capability 7.x) on a copy of it, float32 where it matters
            (:mod:`guidedbp.engine._precision`); the maps stay float32.
        caveats: :class:`~guidedbp.caveats.Caveat` items that hold for every map of
            this model (random weights, unscaled input), put first in each image's
            :attr:`Explanation.caveats`; the engine adds those it finds itself.
        output: The output every target reads where the model has several (its name,
            or its index), unless a target names its own.
        progress: ``progress(method, done, total)``, called after each forward pass of a
            perturbation method (occlusion, Score-CAM, RISE, KernelSHAP, LIME, Sobol) with
            the copies that call has scored so far and its total (for KernelSHAP over
            SLIC superpixels, an upper bound): black-box runs take minutes per image on
            large models, and the CLI's progress bar shows them moving. With several
            targets per image (top-K classes, K detections), also after each batch of
            the gradient pass's rows (an image and one target each), named by the
            methods (``"targets"`` where the pass computes no map).

    Raises:
        ValueError: For an unknown method or a bad argument; for ``precision="mixed"``
            on hardware without a fast bfloat16 or float16 path, or on a model that is no
            Functional or Sequential Keras model.

    >>> import numpy as np, keras
    >>> model = keras.Sequential([
    ...     keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 3, activation="relu"),
    ...     keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(5)])
    >>> explainer = Explainer(model, method="guided")
    >>> explainer(np.ones((2, 8, 8, 3), np.float32), target=3).shape
    (2, 8, 8, 3)
    >>> explainer.report.guided_activations
    {'relu': 1}
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
        output: OutputName = None,
        progress: Progress | None = None,
        **fields,
    ):
        self.methods = registry.as_methods(method)
        if output is not None and (isinstance(output, bool)
                                   or not isinstance(output, (str, int, np.integer))):
            raise ArgumentError(f"output={output!r} must be an output's name or index")
        self.output = output if output is None or isinstance(output, str) else int(output)
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
        #: The dtype the model's passes compute in (``options.precision``); the maps
        #: are float32 whatever it is.
        self.compute_dtype = "float32"
        traced_model = model
        if self.options.precision == "mixed":  # a copy in low precision: _precision
            self.compute_dtype = _precision.fast_dtype()
            traced_model = _precision.low_precision_model(model, self.compute_dtype)
            small = (_payoff.small_model_warning(traced_model.copy, self.compute_dtype)
                     if _precision.gpu_capability() is None else None)  # measured on CPUs
            if small:
                warnings.warn(small, UserWarning, stacklevel=_caller_stacklevel())
        _graph.register_gradients()
        _activations.register_gradients()
        self.model = model
        self.pixel_to_input = pixel_to_input
        layer_path = None
        if layer is not None:
            layer_path = _gradcam.layer_path(model, layer) or layer.split("/")
        self._traced = TracedFunctions(traced_model, self.methods, layer_path,
                                       self.options.gradcam.upsample,
                                       features=hands_out_features(self.methods),
                                       guide=self.options.guided.guide)
        # The methods by the runner each record names, and how their maps are computed.
        self._runs = MethodRunners(
            self.methods, self._traced, self.options, self.check_memory,
            partial(_inputs.pixel_values, pixel_to_input=pixel_to_input), progress)
        self._warned: set[tuple] = set()
        self._drifts: dict[tuple, list[Caveat]] = {}  # signature -> mixed precision's
        self._values: dict[tuple, bool] = {}  # signature -> whether the output is a value
        self._detectors: dict[tuple, object] = {}  # image shape -> proposals (detect)

    @property
    def method(self) -> str:
        """The methods as one name: ``guided`` or ``guided,gradcam``."""
        return ",".join(self.methods)

    @property
    def image_shape(self) -> tuple | None:
        """The ``(H, W, C)`` the model declares (free sides ``None``), or ``None``."""
        return _inputs.declared_image_shape(self.model)

    @property
    def batch_size(self) -> int:
        return self.options.batch_size

    @property
    def trace_count(self) -> int:
        """How many traces the explainer's functions ran: one per input signature and
        pass (the classes resolved with the maps, or scored alone)."""
        return self._traced.trace_count

    @property
    def _functions(self) -> dict:
        """The traced gradient passes by ``(signature, methods, columns)``."""
        return self._traced.gradient_functions

    # -- public API -------------------------------------------------------------------

    def __call__(self, images, target: TargetLike = None) -> np.ndarray:
        """Saliency maps of the first method, float32, shaped like ``images`` (1 channel
        for the class activation maps and occlusion).

        Args:
            images: float ``(N, H, W, C)`` in the model's input space.
            target: ``None`` for each image's top-1 class (for an output that is one
                value, :meth:`reads_a_value`, that value: ``Unit(0)``), an int for one
                class for all images, a sequence of one class per image, a
                :class:`~guidedbp.engine.targets.Target`, or a score function
                ``output -> (N,)``.

        Raises:
            ArgumentError: A target that does not fit the model, in one line naming the
                parameter: a class of an output that is a value, a score function that
                returns anything but one number per image (``None``, a scalar, ``(N, 2)``,
                one value for a batch of two), a ``Similarity`` reference whose length
                differs from the output's or an image the model cannot take. Checked
                before any method runs (a length known only when the images come, on the
                first batch).
        """
        return self.explain(images, target).maps

    def explain(self, images, target: TargetLike = None) -> Explanation:
        """Every method's maps, with the target they explain and its scores (``target``
        and its checks as :meth:`__call__` takes them)."""
        images = _inputs.as_images(images)
        key = self._traced.signature(images.shape[1:])
        return self._explain_one(key, images, self._columns_of(key, images, [target]))

    def _explain_one(self, key: tuple, images: np.ndarray, columns: Columns) -> Explanation:
        """The maps of the one target ``columns``."""
        self._check_columns(key, columns)
        smooth = self.options.smoothgrad
        if smooth.active:
            traced = self._runs.resolve(key, images, columns)
            clean = self._explanations(traced, {})[0]
            fixed = traced.columns
            maps = _averaging.smoothgrad(
                lambda copies, rows, numbers: self._runs.fixed_maps(
                    key, copies, replace(fixed.take(rows), streams=np.stack([rows, numbers],
                                                                            axis=1))),
                images, smooth.smooth, smooth.noise, smooth.seed, self.batch_size,
            ) if self._runs.averaged else {}
            # SquareGrad and VarGrad: statistics over those same copies, not averaged again
            maps.update(self._runs.noise_statistics(key, images, fixed))
        else:
            traced, shared = self._runs.columns(key, images, columns)
            clean = self._explanations(traced, shared)[0]
            maps = {**clean.by_method, **self._runs.per_class(key, images, traced.columns)}
        return self._with_caveats(key, images, replace(
            clean, by_method={m: maps[m] for m in self.methods}))

    def explain_targets(self, images, targets: Sequence[TargetLike]) -> list[Explanation]:
        """Several targets for every image, in that order: one :class:`Explanation` per
        target (classes, units, regions, similarities, score functions, detections,
        mixed as needed). Up to four share one forward pass, each target its own
        backward pass; more take a forward pass per four, traced at most four times for
        one kind of target whatever their number (a trace of K targets at once would
        grow faster than K).

        >>> import numpy as np, keras
        >>> from guidedbp.engine.targets import Unit
        >>> model = keras.Sequential([keras.Input((4, 4, 1)), keras.layers.Flatten(),
        ...                           keras.layers.Dense(3)])
        >>> first, second = Explainer(model, "vanilla").explain_targets(
        ...     np.ones((2, 4, 4, 1)), [Unit(0), Unit(2)])
        >>> first.maps.shape, first.target.label, second.target.label
        ((2, 4, 4, 1), 'unit:0', 'unit:2')
        """
        images = _inputs.as_images(images)
        key = self._traced.signature(images.shape[1:])
        if isinstance(targets, (str, Target)) or not isinstance(targets, Sequence):
            raise ArgumentError("targets must be a sequence of targets")
        columns = self._columns_of(key, images, list(targets))
        return [self._with_caveats(key, images, explanation)
                for explanation in self._explain_columns(key, images, columns)]

    def explain_top_k(self, images, k: int) -> list[Explanation]:
        """Each image's ``k`` most probable classes (fewer if the model has fewer), most
        probable first: one :class:`Explanation` per rank.

        The ranks share the forward pass four at a time (k backward passes, at most four
        traces whatever k), and the perturbation methods' forward passes, unless
        SmoothGrad or integrated gradients average many passes anyway. Ties go to the
        lower class index.
        """
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ArgumentError(f"k={k!r} must be a positive integer")
        self._check_bound([None])
        images = _inputs.as_images(images)
        key = self._traced.signature(images.shape[1:])
        k = min(int(k), self._num_classes(key, self.output))
        ranks = np.tile(-np.arange(1, k + 1, dtype=np.int32), (len(images), 1))
        return [self._with_caveats(key, images, explanation)
                for explanation in self._explain_columns(
                    key, images, Columns.of_classes(ranks, self.output))]

    def explain_classes(self, images, classes: Sequence[int]) -> list[Explanation]:
        """The same ``classes`` for every image, in that order, four a forward pass (as
        :meth:`explain_top_k`): one :class:`Explanation` per class."""
        self._check_bound([None])
        images = _inputs.as_images(images)
        key = self._traced.signature(images.shape[1:])
        columns = [_inputs.as_targets(int(c) if isinstance(c, (int, np.integer)) else c,
                                      len(images))
                   for c in classes]
        if not columns:
            raise ArgumentError("classes is empty: expected at least one class")
        return [self._with_caveats(key, images, explanation)
                for explanation in self._explain_columns(
                    key, images, Columns.of_classes(np.stack(columns, axis=1), self.output))]

    def predict(self, images) -> tuple[np.ndarray, np.ndarray]:
        """Every class's score and probability, forward only.

        The scores are the logits the maps explain (a softmax or sigmoid head bypassed;
        a single logit behind a sigmoid scores class 0 as ``-z`` and class 1 as ``z``);
        the probabilities are the model's own. One output unit with no sigmoid or softmax
        head is a value, not classes: it is refused (:meth:`reads_a_value`). Images go
        through the model ``batch_size`` at a time, in a function traced once per input
        signature, with no gradient.

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
        function = self._traced.predict(self._traced.signature(images.shape[1:]), self.output)
        parts = [function(images[start : start + self.batch_size])
                 for start in range(0, len(images), self.batch_size)]
        return (np.concatenate([scores.numpy() for scores, _ in parts]),
                np.concatenate([probabilities.numpy() for _, probabilities in parts]))

    def report_for(self, image_shape: tuple, targets: Sequence | None = None
                   ) -> _graph.Report:
        """The report for images of ``(H, W, C)`` ``image_shape``, tracing once for it.

        Args:
            image_shape: The images' shape.
            targets: Targets (:data:`TargetLike`, one per column, as :meth:`explain_targets`
                takes them) whose pass's report is wanted: their class activation maps'
                layer may not be a class's (a detection's is the last feature map its
                proposals share). ``None``: the signature's first report.

        Raises:
            ArgumentError: The model cannot take images of that shape, or bad targets.
        """
        key = self._traced.signature(tuple(image_shape))
        if targets is None:
            return self._report_for(key)
        images = np.zeros((1, *image_shape), np.float32)
        columns = self._columns_of(key, images, list(targets))
        return self._traced.pass_report(key, self._runs.clean, columns.specs)

    @property
    def report(self) -> _graph.Report:
        """What was done to the model: guided ops, plain activations, bypassed head.

        The report of the model's declared input shape; where the model declares none,
        the report of the newest image shape explained (:meth:`report_for` names one).
        """
        shape = _inputs.declared_image_shape(self.model)
        if shape is not None:
            return self._report_for(shape)
        newest = self._traced.newest_report()
        if newest is None:
            raise ArgumentError(
                "the model declares no input shape: call the explainer on images "
                "before reading its report"
            )
        return newest

    def reads_a_value(self, image_shape: tuple | None = None) -> bool:
        """Whether the output the explainer reads is one unit that no sigmoid or softmax
        head makes a probability: a value (a regression, or a binary classifier's raw
        logit), not a class. A target of ``None`` then explains that value,
        ``Unit(0)`` (with a :class:`ValueOutputWarning`), and a class target is refused.

        Args:
            image_shape: ``(H, W, C)`` of the images; ``None``: the model's declared one.

        Raises:
            ArgumentError: No ``image_shape`` for a model that declares none, or one the
                model cannot take.
        """
        shape = image_shape if image_shape is not None else self.image_shape
        if shape is None:
            raise ArgumentError("the model declares no input shape: give image_shape")
        return self._reads_a_value(self._traced.signature(tuple(shape)))

    def detector(self, image_shape: tuple | None = None) -> detect.DetectorInfo:
        """How a :class:`~guidedbp.engine.targets.Detection` target reads the model (the
        explainer's ``output``): its boxes and class scores outputs, proposals and classes.

        Args:
            image_shape: ``(H, W, C)`` of the images; ``None``: the model's declared one.

        Raises:
            ArgumentError: (``NotADetector``) a model whose outputs hold no boxes and
                class scores, in one line; no ``image_shape`` for a model that declares
                none.
        """
        shape = image_shape if image_shape is not None else self.image_shape
        if shape is None:
            raise ArgumentError("the model declares no input shape: give image_shape")
        return detect.detector(self.model, tuple(shape), self.output)

    def detect(self, images, top: int, threshold: float = 0.3) -> list[detect.Detected]:
        """Each image's ``top`` best detections (fewer where it has fewer), best first:
        its proposals (as a :class:`~guidedbp.engine.targets.Detection` reads them) whose
        class score is at least ``threshold``, after per-class greedy non-maximum
        suppression at IoU 0.5 (:func:`~guidedbp.engine.detect.suppress`). Forward only,
        in float32, ``batch_size`` images a pass, traced once per image shape.

        Raises:
            ArgumentError: ``top`` or ``threshold`` out of range, or (``NotADetector``) a
                model that is no detector.
        """
        if isinstance(top, bool) or not isinstance(top, (int, np.integer)) or top < 1:
            raise ArgumentError(f"top={top!r} must be a positive integer")
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float, np.number)) \
                or not 0 <= threshold <= 1:
            raise ArgumentError(f"threshold={threshold!r} must be a number in [0, 1]")
        images = _inputs.as_images(images)
        shape = tuple(int(side) for side in images.shape[1:])
        self._traced.signature(shape)  # the model can take them: checked as for maps
        if shape not in self._detectors:
            self._detectors[shape] = detect.proposals_function(self.model, shape, self.output)
        return detect.detections(self._detectors[shape], images, int(top), float(threshold),
                                 self.batch_size)

    def check_memory(self, image_shape: tuple, columns: int = 1, methods: tuple = (),
                     batch: int | None = None) -> None:
        """Refuse at once a batch whose images and maps alone would not fit in the free
        memory (``columns`` classes per image, the explainer's methods by default), or
        an occlusion patch that does not fit the images or takes too many positions.

        Raises:
            ArgumentError: Naming the sizes and a ``batch_size`` that would fit.
        """
        methods = methods or self.methods
        _inputs.check_memory(batch or self.batch_size, tuple(image_shape),
                             columns * len(methods))
        self._runs.check(methods, image_shape)

    # -- dispatching to the runners ---------------------------------------------------

    def _check_bound(self, targets: Sequence) -> None:
        """Refuse, before anything is traced or run, a method bound to detections
        (D-RISE) for ``targets`` (:data:`TargetLike`) that are not all detections."""
        found = [as_target(target) for target in targets]
        registry.check_targets(
            self.methods, [target.kind if target is not None else "class" for target in found],
            lambda index: (f"target {found[index].label}" if found[index] is not None
                           else "a class target"))

    def _columns_of(self, key: tuple, images: np.ndarray, targets: list) -> Columns:
        """The columns of ``targets`` (see :data:`TargetLike`) for ``images``; ``None``
        alone on an output that is a value (:meth:`reads_a_value`): ``Unit(0)``."""
        self._check_bound(targets)
        if len(targets) == 1 and targets[0] is None and self._reads_a_value(key):
            if ("value", key) not in self._warned:  # once per signature, as NoReluWarning
                self._warned.add(("value", key))
                warnings.warn("the model has one output unit with no sigmoid or softmax head: "
                              "explaining its value, target=Unit(0), not a class",
                              ValueOutputWarning, stacklevel=_caller_stacklevel())
            targets = [Unit(0)]
        if all(as_target(target) is None for target in targets):
            classes = np.stack([_inputs.as_targets(target, len(images)) for target in targets],
                               axis=1)
            return Columns.of_classes(classes, self.output)
        objects = []
        for target in targets:
            found = as_target(target)
            if found is None:  # a class among other targets: one class for every image
                if isinstance(target, bool) or not isinstance(target, (int, np.integer)):
                    raise ArgumentError(
                        f"target {target!r}: among other targets, a class is an int or Class(c)")
                from guidedbp.engine.targets import Class

                found = Class(int(target))
            objects.append(found)
        return columns_of(objects, self.output, len(images), partial(self._embedding, key),
                          tuple(np.shape(images)[1:3]))

    def _embedding(self, key: tuple, image: np.ndarray, output: OutputName) -> np.ndarray:
        """A reference image's output, flattened: ``(size,)``.

        Raises:
            ArgumentError: An image the model cannot take, or of another shape than the
                images explained.
        """
        image = _inputs.as_images(np.asarray(image)[None])
        try:
            if self._traced.signature(image.shape[1:]) != key:
                _inputs.check_shape(image.shape[1:], key)
        except ArgumentError as error:
            size = "x".join(map(str, image.shape[1:]))
            raise ArgumentError(f"the Similarity reference image is {size}: "
                                f"{str(error).split(', got ')[0]}") from None
        return self._traced.output(key, output)(image).numpy()[0]

    def _check_columns(self, key: tuple, columns: Columns) -> None:
        """Trace the report (with these targets, if it is the first trace), then check
        the class columns' classes against their outputs."""
        self._report_for(key, columns)
        outputs = {spec.output for spec in columns.specs if spec.kind == "class"}
        for output in outputs:
            wanted = [i for i, spec in enumerate(columns.specs)
                      if spec.kind == "class" and spec.output == output]
            count = (self._classes_in(key, columns.specs) if len(outputs) == 1
                     else self._num_classes(key, output))
            _inputs.check_range(columns.classes[:, wanted], count)

    def _classes_in(self, key: tuple, specs: tuple) -> int:
        """How many classes the first class target of ``specs`` chooses from, read off
        the traced pass (traced anyway to explain them)."""
        first = next((i for i, spec in enumerate(specs) if spec.kind == "class"), 0)
        layout = next(layout for layout in traced_passes(specs)
                      if any(first in targets for targets in layout))
        function = self._traced.gradient(key, self._runs.clean, pass_columns(specs, layout))
        return int(function.get_concrete_function().structured_outputs[
            "class_probabilities"].shape[-1])

    def _num_classes(self, key: tuple, output: OutputName) -> int:
        """How many classes ``output`` scores (two for a single logit behind a sigmoid)."""
        return self._classes_in(key, (Column("class", output),))

    def _reads_a_value(self, key: tuple) -> bool:
        """Whether the explainer's output is a value, not classes (:meth:`reads_a_value`),
        found once per signature: a class of it fails to trace."""
        if key not in self._values:
            try:
                self._num_classes(key, self.output)
                self._values[key] = False
            except NotAClass:
                self._values[key] = True
            except NotAClassifier:  # a map, several outputs: not one value either
                self._values[key] = False
        return self._values[key]

    def _explain_columns(self, key: tuple, images: np.ndarray, columns: Columns
                         ) -> list[Explanation]:
        self._check_columns(key, columns)
        if not self.options.smoothgrad.active and self._runs.shares_columns:
            return self._explanations(*self._runs.columns(key, images, columns))
        # Averaged methods run their many passes per target anyway: fix the targets
        # (ranks, regions) from one clean pass, then explain target by target.
        fixed = self._runs.resolve(key, images, columns).columns
        return [self._explain_one(key, images, fixed.column(column))
                for column in range(fixed.width)]

    def _explanations(self, traced: Pass, maps: dict) -> list[Explanation]:
        """One Explanation per target column of ``traced``, with ``maps`` (method ->
        ``(N, K, ...)``) in the explainer's order."""
        columns = traced.columns
        return [
            Explanation({m: maps[m][:, column] for m in self.methods if m in maps},
                        traced.targets[:, column], traced.logits[:, column],
                        traced.probabilities[:, column], traced.class_probabilities,
                        target=columns.targets[column] if columns.targets else None,
                        region_pixels=(columns.data[column].sum(axis=(1, 2)).astype(np.int64)
                                       if columns.specs[column].kind == "region" else None),
                        region_masks=(columns.data[column] != 0
                                      if columns.specs[column].kind == "region" else None),
                        detections=(columns.data[column][:, 4:]
                                    if columns.specs[column].kind == "detection" else None))
            for column in range(traced.targets.shape[1])
        ]

    # -- caveats ----------------------------------------------------------------------

    def _with_caveats(self, key: tuple, images: np.ndarray, explanation: Explanation
                      ) -> Explanation:
        """``explanation`` with each image's caveats: the model's (given), then those of
        the traced model, then those of the image's own maps (:mod:`._caveats`). Computed
        afresh, so applying it twice is harmless."""
        shared = [*self.caveats, *_caveats.of_model(
            self.methods, self._report_for(key).by_rule, self.options.scorecam.max_channels,
            self._runs.feature_channels.get(key)),
            *_caveats.unguided(self.methods, self._report_for(key)),
            *self._drift_of(key, images, explanation)]

        def span() -> float:
            black, white = _inputs.black_white(images.shape[-1], self.pixel_to_input)
            return float(np.max(np.abs(white.astype(np.float64) - black)))

        return replace(explanation, caveats=_caveats.of_explanation(
            explanation, len(images), shared, span))

    def _drift_of(self, key: tuple, images: np.ndarray, explanation: Explanation
                  ) -> list[Caveat]:
        """Mixed precision's drift caveats (:mod:`._payoff`): measured once per signature,
        on the first image of its first explanation and that image's target; none in
        float32."""
        if self.compute_dtype == "float32":
            return []
        if key not in self._drifts:
            target = (explanation.target if explanation.target is not None
                      else int(explanation.targets[0]))
            one_pass = MethodOptions.of(self.options, precision="float32", smooth=0)

            def maps(precision: str, names: tuple[str, ...]) -> dict[str, np.ndarray]:
                # The caller's model, or the copy (already low precision): as it is.
                model = self.model if precision == "float32" else self._traced.model
                twin = Explainer(model, names, options=one_pass, output=self.output)
                with warnings.catch_warnings():  # this run's own warnings said it all
                    warnings.simplefilter("ignore")
                    found = twin.explain(images[:1], target)
                return {name: found.by_method[name][0] for name in names}

            own = {name: maps_[0] for name, maps_ in explanation.by_method.items()}
            self._drifts[key] = _payoff.measure(self.methods, self.options.smoothgrad.active,
                                                own, maps)
        return self._drifts[key]

    def _report_for(self, key: tuple, columns: Columns | None = None) -> _graph.Report:
        """The report of signature ``key``, tracing the clean pass once for it (for
        ``columns``' targets where given); warns once per signature when guided or
        deconvnet backprop would equal the plain gradient."""
        report = self._traced.report(key, self._runs.clean, self.output,
                                     None if columns is None else columns.specs)
        if key not in self._warned:
            self._warned.add(key)
            plain = [m for m in self.methods if registry.method(m).relu_rule in report.by_rule
                     and not report.by_rule[registry.method(m).relu_rule][1]]
            if plain:
                name = getattr(self.model, "name", None) or "the model"
                what = (f"{plain[0]} backprop equals" if len(plain) == 1
                        else f"{' and '.join(plain)} equal")
                scopes = {report.by_rule[registry.method(m).relu_rule][0] for m in plain}
                lacks = ("no ReLU-family op" if scopes == {"relu"}
                         else "no activation to guide")
                warnings.warn(
                    f"{name} has {lacks}: {what} the plain gradient for it",
                    NoReluWarning, stacklevel=_caller_stacklevel(),
                )
        return report


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
