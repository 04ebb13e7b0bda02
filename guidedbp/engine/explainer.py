"""The attribution engine: guided backpropagation in one backward pass, and its peers.

The forward pass is traced into a ``tf.function`` under the graph's
``gradient_override_map``, which maps every ReLU-family op to a registered
gradient whose body is the ``grad_ys`` thresholding (clamp the arriving gradient
at zero, then send it through the ReLU's own gradient). One ordinary
``tf.gradients`` call then yields the guided map. The model itself is never
touched: the override lives only on the traced graph.

One explainer computes several methods from a single forward pass
(:mod:`guidedbp.engine.passes.trace`); the methods are records of
:mod:`guidedbp.engine.methods.registry`, each naming the runner that computes it
(:mod:`guidedbp.engine.passes.runners`: the traced gradient pass, path-integrated,
perturbation), and the explainer asks each runner for its methods' maps. The traced
functions are kept per input signature (:mod:`guidedbp.engine.passes.functions`).
SmoothGrad runs on top of every method (:mod:`guidedbp.engine.methods.averaging`).
Perturbation methods (Score-CAM, occlusion) run after the traced pass, forward only,
through the same traced function as :meth:`Explainer.predict`
(:mod:`guidedbp.engine.methods.perturbation`).

The engine knows TensorFlow and nothing about files, model specs or
preprocessing: :class:`guidedbp.Explainer` (the package's) adds those.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from guidedbp.caveats import Caveat
from guidedbp.engine import found_caveats as _found_caveats
from guidedbp.engine import inputs as _inputs
from guidedbp.engine import payoff as _payoff
from guidedbp.engine.explanation import (
    Explanation,
    NoReluWarning,
    ValueOutputWarning,
    explanations_of,
)
from guidedbp.engine.methods import averaging as _averaging
from guidedbp.engine.methods import registry
from guidedbp.engine.options import UPSAMPLING, MethodOptions
from guidedbp.engine.passes.runners import Progress
from guidedbp.engine.targets.columns import Columns
from guidedbp.engine.targets.kinds import OutputName, Target
from guidedbp.engine.traced_model import TracedModel
from guidedbp.errors import ArgumentError

__all__ = ["Explainer", "Explanation", "NoReluWarning", "UPSAMPLING", "ValueOutputWarning"]

#: What to explain: a class (``None``: each image's top-1; an int; one per image), a
#: :class:`~guidedbp.engine.targets.kinds.Target`, or a score function of the output.
TargetLike = _inputs.Target | Target | Callable


class Explainer(TracedModel):
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
    deconvnet (:mod:`guidedbp.engine.graph.activations`). ``guide="relu"`` keeps the papers'
    scope, the ReLU family alone (deconvnet's default).

    Beyond classes, ``target=`` takes any :mod:`~guidedbp.engine.targets.kinds` target (one
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
            (:mod:`guidedbp.engine.graph.precision`); the maps stay float32.
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
        methods = registry.as_methods(method)
        if output is not None and (isinstance(output, bool)
                                   or not isinstance(output, (str, int, np.integer))):
            raise ArgumentError(f"output={output!r} must be an output's name or index")
        if not all(isinstance(caveat, Caveat) for caveat in caveats):
            raise ArgumentError("caveats must be guidedbp.caveats.Caveat items")
        options = MethodOptions.of(options, batch_size=batch_size, **fields)
        layer = options.gradcam.layer
        cams = [name for name in registry.METHODS if "gradcam" in registry.method(name).options]
        if layer is not None and not set(cams) & set(methods):
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
        super().__init__(model, methods, options,
                         output if output is None or isinstance(output, str) else int(output),
                         pixel_to_input, progress)
        self.caveats: tuple[Caveat, ...] = tuple(caveats)
        self._drifts: dict[tuple, list[Caveat]] = {}  # signature -> mixed precision's

    # -- public API -------------------------------------------------------------------

    def __call__(self, images, target: TargetLike = None) -> np.ndarray:
        """Saliency maps of the first method, float32, shaped like ``images`` (1 channel
        for the class activation maps and occlusion).

        Args:
            images: float ``(N, H, W, C)`` in the model's input space.
            target: ``None`` for each image's top-1 class (for an output that is one
                value, :meth:`reads_a_value`, that value: ``Unit(0)``), an int for one
                class for all images, a sequence of one class per image, a
                :class:`~guidedbp.engine.targets.kinds.Target`, or a score function
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
        return self._explain_one(key, images, self._targets.of(key, images, [target]))

    def _explain_one(self, key: tuple, images: np.ndarray, columns: Columns) -> Explanation:
        """The maps of the one target ``columns``."""
        self._targets.check(key, columns)
        smooth = self.options.smoothgrad
        if smooth.active:
            traced = self._runs.resolve(key, images, columns)
            clean = explanations_of(self.methods, traced, {})[0]
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
            clean = explanations_of(self.methods, traced, shared)[0]
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
        >>> from guidedbp.engine.targets.kinds import Unit
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
        columns = self._targets.of(key, images, list(targets))
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
        self._targets.check_bound([None])
        images = _inputs.as_images(images)
        key = self._traced.signature(images.shape[1:])
        k = min(int(k), self._targets.num_classes(key, self.output))
        ranks = np.tile(-np.arange(1, k + 1, dtype=np.int32), (len(images), 1))
        return [self._with_caveats(key, images, explanation)
                for explanation in self._explain_columns(
                    key, images, Columns.of_classes(ranks, self.output))]

    def explain_classes(self, images, classes: Sequence[int]) -> list[Explanation]:
        """The same ``classes`` for every image, in that order, four a forward pass (as
        :meth:`explain_top_k`): one :class:`Explanation` per class."""
        self._targets.check_bound([None])
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

    # -- dispatching to the runners ---------------------------------------------------

    def _explain_columns(self, key: tuple, images: np.ndarray, columns: Columns
                         ) -> list[Explanation]:
        self._targets.check(key, columns)
        if not self.options.smoothgrad.active and self._runs.shares_columns:
            return explanations_of(self.methods, *self._runs.columns(key, images, columns))
        # Averaged methods run their many passes per target anyway: fix the targets
        # (ranks, regions) from one clean pass, then explain target by target.
        fixed = self._runs.resolve(key, images, columns).columns
        return [self._explain_one(key, images, fixed.column(column))
                for column in range(fixed.width)]

    # -- caveats ----------------------------------------------------------------------

    def _with_caveats(self, key: tuple, images: np.ndarray, explanation: Explanation
                      ) -> Explanation:
        """``explanation`` with each image's caveats: the model's (given), then those of
        the traced model, then those of the image's own maps
        (:mod:`guidedbp.engine.found_caveats`). Computed afresh, so applying it twice is
        harmless."""
        report = self._report_for(key)
        shared = [*self.caveats, *_found_caveats.of_model(
            self.methods, report.by_rule, self.options.scorecam.max_channels,
            self._runs.feature_channels.get(key)),
            *_found_caveats.unguided(self.methods, report),
            *self._drift_of(key, images, explanation)]
        return _found_caveats.with_caveats(explanation, images, shared, self.pixel_to_input)

    def _drift_of(self, key: tuple, images: np.ndarray, explanation: Explanation
                  ) -> list[Caveat]:
        """Mixed precision's drift caveats (:mod:`guidedbp.engine.payoff`): measured once
        per signature, on the first image of its first explanation and that image's
        target; none in float32."""
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
