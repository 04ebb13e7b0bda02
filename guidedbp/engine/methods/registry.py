"""The method registry: one record per attribution method, read by everything else.

A gradient method is what its traced function needs (an input gradient under some
ReLU rule, a feature map and its plain gradient) and how it combines those parts into
a map. The engine computes the parts every requested method needs from one forward
pass, one ``tf.gradients`` call per ReLU rule; each record's ``combine`` then turns
them into that method's map. A perturbation method (Score-CAM, occlusion, RISE...) needs no
gradient: its ``combine`` reads the model's scores on perturbed copies of the images,
which the explainer computes after the traced pass, forward only. Each record names
the runner that computes it (:data:`RUNNERS`): the explainer groups its methods by
runner and asks each runner for its group's maps, so a new kind of method is a runner
plus its records, and a new class activation map one weighting function in
``guidedbp.engine.methods.cams.WEIGHTINGS`` plus one record here.
``guidedbp.METHODS``, the CLI's ``--method`` choices and help, comparison panels,
``evaluate`` and the Ray runner all read this table, so a new method is one record
here plus its math.

Importing this module does not import TensorFlow: ``combine`` functions only call
methods of the :class:`Parts` or :class:`Probe` they receive.

>>> from guidedbp.engine.methods.registry import METHODS, method
>>> METHODS[:3]
('guided', 'vanilla', 'deconvnet')
>>> method("guided-gradcam").relu_rule, method("guided-gradcam").feature_map
('guided', True)
>>> method("occlusion").runner, method("scorecam").options
('perturbation', ('gradcam', 'scorecam'))
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from guidedbp._text import did_you_mean
from guidedbp.engine.options import STATISTIC_COPIES
from guidedbp.engine.rules.table import RULES
from guidedbp.errors import ArgumentError

#: ReLU gradient rules, in the order the engine computes them.
#: ``plain``: the op's own gradient. ``guided``: threshold the arriving gradient,
#: then apply the ReLU's mask. ``deconvnet``: threshold, ignore the mask.
RELU_RULES = tuple(RULES)

#: The runners, one per method kind (:mod:`guidedbp.engine.passes.runners`), in the order the
#: explainer runs them. ``gradient``: the traced pass, one forward and one backward per
#: ReLU rule, K classes at once. ``perturbation``: forward passes on perturbed copies,
#: after the traced pass. ``path-integrated``: many traced passes along a path, per class.
#: ``noise-statistic``: traced passes on SmoothGrad's noisy copies, K classes at once, kept
#: as a statistic over the copies (SquareGrad, VarGrad).
GRADIENT, PERTURBATION, PATH_INTEGRATED = "gradient", "perturbation", "path-integrated"
NOISE_STATISTIC = "noise-statistic"
RUNNERS = (GRADIENT, PERTURBATION, PATH_INTEGRATED, NOISE_STATISTIC)

#: What the ``noise-statistic`` runner keeps of a method's maps over the noisy copies: their
#: ``mean``, or their population ``variance`` (computed in float64, two-pass).
STATISTICS = ("mean", "variance")

#: The target kinds a method may be bound to (:attr:`Method.target`): ``detection``, a
#: detector's detection (:class:`~guidedbp.engine.targets.box_target.Detection`).
DETECTION = "detection"
TARGET_KINDS = (DETECTION,)

#: The version of the methods' maths, recorded in every manifest record (``made_by``):
#: bump it with a change that makes any method's maps differ (not with each release), so
#: that ``--skip-existing`` recomputes the maps an earlier version made.
MATHS_VERSION = 1


class Parts(Protocol):
    """What a gradient method's ``combine`` may use, inside the traced function."""

    input_gradient: object  # (N, H, W, C) gradient of the class score, under the method's rule
    images: object  # (N, H, W, C) float32 the images, in the model's input space

    def cam(self, weighting: str) -> object:
        """(N, H, W, 1) class activation map at the input size, from the feature map and
        its plain gradient: ``weighting`` names a function of the weightings table,
        ``"gradcam"``, ``"gradcam++"``, ``"layercam"``, ``"xgradcam"`` or ``"hirescam"``
        (see :data:`guidedbp.engine.methods.cams.WEIGHTINGS`), or of the gradient-free
        projections, ``"eigencam"`` (:data:`guidedbp.engine.methods.cams.PROJECTIONS`)."""


class Probe(Protocol):
    """What a perturbation method's ``combine`` may use, outside the traced function:
    each returns float32 ``(N, K, H, W, 1)`` maps, K classes per image, from forward
    passes on perturbed copies of the images (see :mod:`guidedbp.engine.methods.perturbation`)."""

    def score_cam(self) -> object:
        """Feature-map channels weighted by the scores of the images they mask."""

    def occlusion(self) -> object:
        """The mean score drop of the patches that hide each pixel."""

    def rise(self) -> object:
        """The mean score of random masked copies, weighted by each mask per pixel."""

    def kernelshap(self) -> object:
        """Each superpixel's Shapley value, by the Shapley kernel's regression."""

    def lime(self) -> object:
        """Each superpixel's coefficient in a local linear model of the score."""

    def sobol(self) -> object:
        """Each grid cell's total-order Sobol index."""

    def drise(self) -> object:
        """RISE's estimate on D-RISE's grid: the detection similarity of random masked
        copies, weighted by each mask per pixel."""


@dataclass(frozen=True)
class Method:
    """One attribution method.

    Attributes:
        name: What ``--method`` and the API call it.
        title: One line for help texts.
        paper: Where it comes from.
        relu_rule: The ReLU rule of the input gradient it needs (one of
            :data:`RELU_RULES`), or ``None`` when it needs no input gradient.
        feature_map: Whether it needs a 4-D feature map (the ``layer`` option); a
            gradient method also gets the feature map's plain gradient.
        runner: The runner that computes it (one of :data:`RUNNERS`): ``gradient`` for
            a map of the traced pass; ``path-integrated`` for a map integrated along a
            path from a baseline (integrated gradients: many passes per image);
            ``perturbation`` for a map from the model's scores on perturbed copies of
            the image, forward only (Score-CAM, occlusion: many forward passes per
            image, after the traced pass), whose ``combine`` takes a :class:`Probe`
            rather than :class:`Parts`; ``noise-statistic`` for a statistic over
            SmoothGrad's noisy copies of the map its ``combine`` gives in the traced
            pass (SquareGrad, VarGrad: ``smooth`` copies per image, 16 when SmoothGrad
            is off; SmoothGrad does not average them again).
        signed: Whether the sign of its map means something (gradients, score drops),
            rather than a non-negative map (class activation maps, SquareGrad, VarGrad).
        options: The :class:`~guidedbp.engine.options.MethodOptions` groups that apply
            to it alone (``gradcam``: the feature-map layer and upsampling).
        combine: The parts -> the map: ``(N, H, W, C)`` from :class:`Parts` in the traced
            function, or ``(N, K, H, W, 1)`` from a :class:`Probe`.
        statistic: What the ``noise-statistic`` runner keeps of its maps over the noisy
            copies (one of :data:`STATISTICS`); the other runners ignore it.
        target: The only kind of target it explains (one of :data:`TARGET_KINDS`:
            ``detection``, D-RISE's), refused with any other before any pass; ``None``:
            any target. ``all`` selects it only where every target is of that kind.
    """

    name: str
    title: str
    paper: str
    relu_rule: str | None
    combine: Callable[[Parts], object] | Callable[[Probe], object]
    feature_map: bool = False
    runner: str = GRADIENT
    signed: bool = True
    options: tuple[str, ...] = ()
    statistic: str = "mean"
    target: str | None = None

    def __post_init__(self) -> None:
        if self.runner not in RUNNERS:
            raise ValueError(f"runner={self.runner!r} is not one of {', '.join(RUNNERS)}")
        if self.target is not None and self.target not in TARGET_KINDS:
            raise ValueError(f"target={self.target!r} is not one of {', '.join(TARGET_KINDS)}")
        if self.statistic not in STATISTICS:
            raise ValueError(f"statistic={self.statistic!r} is not one of "
                             f"{', '.join(STATISTICS)}")

    @property
    def path_integrated(self) -> bool:
        """Whether its map is integrated along a path (the ``path-integrated`` runner)."""
        return self.runner == PATH_INTEGRATED

    @property
    def perturbation(self) -> bool:
        """Whether its map comes from perturbed copies (the ``perturbation`` runner)."""
        return self.runner == PERTURBATION


def _input_gradient(parts: Parts):
    return parts.input_gradient


def _gradcam(parts: Parts):
    return parts.cam("gradcam")


def _guided_gradcam(parts: Parts):
    return parts.input_gradient * parts.cam("gradcam")


def _gradcam_plus_plus(parts: Parts):
    return parts.cam("gradcam++")


def _guided_gradcam_plus_plus(parts: Parts):
    return parts.input_gradient * parts.cam("gradcam++")


def _layercam(parts: Parts):
    return parts.cam("layercam")


def _score_cam(probe: Probe):
    return probe.score_cam()


def _occlusion(probe: Probe):
    return probe.occlusion()


def _gradient_input(parts: Parts):
    return parts.input_gradient * parts.images


def _squared_gradient(parts: Parts):
    return parts.input_gradient * parts.input_gradient


def _xgradcam(parts: Parts):
    return parts.cam("xgradcam")


def _hirescam(parts: Parts):
    return parts.cam("hirescam")


def _eigencam(parts: Parts):
    return parts.cam("eigencam")


def _rise(probe: Probe):
    return probe.rise()


def _kernelshap(probe: Probe):
    return probe.kernelshap()


def _lime(probe: Probe):
    return probe.lime()


def _sobol(probe: Probe):
    return probe.sobol()


def _drise(probe: Probe):
    return probe.drise()


_REGISTRY = (
    Method("guided", "guided backpropagation", "Springenberg et al. 2015", "guided",
           _input_gradient),
    Method("vanilla", "plain input gradient", "Simonyan et al. 2014", "plain", _input_gradient),
    Method("deconvnet", "thresholded gradient, no forward mask",
           "Zeiler & Fergus 2014", "deconvnet", _input_gradient),
    Method("gradcam", "Grad-CAM: gradient-weighted feature map", "Selvaraju et al. 2017", None,
           _gradcam, feature_map=True, signed=False, options=("gradcam",)),
    Method("guided-gradcam", "guided backprop times Grad-CAM", "Selvaraju et al. 2017", "guided",
           _guided_gradcam, feature_map=True, options=("gradcam",)),
    Method("gradcam++", "Grad-CAM++: positive gradients, weighted per position",
           "Chattopadhyay et al. 2018", None, _gradcam_plus_plus, feature_map=True,
           signed=False, options=("gradcam",)),
    Method("guided-gradcam++", "guided backprop times Grad-CAM++", "Chattopadhyay et al. 2018",
           "guided", _guided_gradcam_plus_plus, feature_map=True, options=("gradcam",)),
    Method("layercam", "LayerCAM: positive gradient times activation, at any layer",
           "Jiang et al. 2021", None, _layercam, feature_map=True, signed=False,
           options=("gradcam",)),
    Method("scorecam", "Score-CAM: feature maps weighted by the scores of masked images",
           "Wang et al. 2020", None, _score_cam, feature_map=True, runner=PERTURBATION,
           signed=False, options=("gradcam", "scorecam")),
    Method("occlusion", "score drop when a sliding patch hides each region",
           "Zeiler & Fergus 2014", None, _occlusion, runner=PERTURBATION, options=("occlusion",)),
    Method("rise", "RISE: mean score of randomly masked copies, per pixel",
           "Petsiuk et al. 2018", None, _rise, runner=PERTURBATION, signed=False,
           options=("blackbox", "occlusion")),
    Method("kernelshap", "KernelSHAP: Shapley values of grid superpixels",
           "Lundberg & Lee 2017", None, _kernelshap, runner=PERTURBATION,
           options=("blackbox", "occlusion")),
    Method("lime", "LIME: local linear model of the score over grid superpixels",
           "Ribeiro et al. 2016", None, _lime, runner=PERTURBATION,
           options=("blackbox", "occlusion")),
    Method("sobol", "Sobol: total-order Sobol indices of grid cells' masks",
           "Fel et al. 2021", None, _sobol, runner=PERTURBATION, signed=False,
           options=("blackbox", "occlusion")),
    Method("drise", "D-RISE: RISE on a detection's similarity (IoU x class score), 16x16 "
           "masks; Detection targets only", "Petsiuk et al. 2021", None, _drise,
           runner=PERTURBATION, signed=False, options=("blackbox", "occlusion"),
           target=DETECTION),
    Method("integrated-gradients", "gradient integrated along a path from a baseline",
           "Sundararajan et al. 2017", "plain", _input_gradient, runner=PATH_INTEGRATED,
           options=("integrated_gradients",)),
    Method("gradient-input", "plain input gradient times the input",
           "Shrikumar et al. 2016", "plain", _gradient_input),
    Method("squaregrad", "SquareGrad: mean squared gradient over SmoothGrad's noisy copies "
           f"({STATISTIC_COPIES} when off)",
           "Hooker et al. 2019", "plain", _squared_gradient, runner=NOISE_STATISTIC,
           signed=False),
    Method("vargrad", "VarGrad: variance of the gradient over SmoothGrad's noisy copies "
           f"({STATISTIC_COPIES} when off)",
           "Adebayo et al. 2018", "plain", _input_gradient, runner=NOISE_STATISTIC,
           signed=False, statistic="variance"),
    Method("xgradcam", "XGrad-CAM: gradient times activation, normalized per channel",
           "Fu et al. 2020", None, _xgradcam, feature_map=True, signed=False,
           options=("gradcam",)),
    Method("hirescam", "HiResCAM: gradient times activation, position by position",
           "Draelos & Carin 2020", None, _hirescam, feature_map=True, signed=False,
           options=("gradcam",)),
    Method("eigencam", "Eigen-CAM: first principal component of the feature map, no gradient",
           "Muhammad & Yeasin 2020", None, _eigencam, feature_map=True, signed=False,
           options=("gradcam",)),
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
        hint = did_you_mean(name, METHODS)
        raise ArgumentError(f"method={name!r} is not one of {', '.join(METHODS)}"
                            + (f" ({hint})" if hint else "")) from None


def as_methods(methods, detection: bool = False) -> tuple[str, ...]:
    """``"guided"``, ``"guided,gradcam"``, ``"all"`` or a sequence -> known names, in order.

    ``"all"`` is every method that explains any target, and with ``detection`` (every
    target is a detector's detection) also those bound to detections (``drise``): what
    ``all`` can explain.

    >>> "drise" in as_methods("all"), "drise" in as_methods("all", detection=True)
    (False, True)

    Raises:
        ValueError: For an unknown or empty selection.
    """
    if isinstance(methods, str):
        if methods.strip().lower() == "all":
            return tuple(name for name in METHODS if REGISTRY[name].target is None
                         or (detection and REGISTRY[name].target == DETECTION))
        methods = methods.split(",")
    names = tuple(dict.fromkeys(str(name).strip().lower() for name in methods if str(name).strip()))
    if not names:
        raise ArgumentError(f"method: choose at least one of {', '.join(METHODS)}")
    for name in names:
        method(name)
    return names


def check_targets(methods, kinds, described: Callable[[int], str]) -> None:
    """Refuse, before any pass, a method bound to one kind of target (:attr:`Method.target`:
    D-RISE to detections) with a target of another kind.

    Args:
        methods: Method names.
        kinds: The kind of each target (the engine's column kinds: ``class``, ``unit``,
            ``detection``...).
        described: Target ``index`` -> how the message names it.

    Raises:
        ArgumentError: One line naming the method, the target that is no detection, and
            the target it needs.

    >>> check_targets(("guided", "drise"), ("detection",), str)
    >>> check_targets(("drise",), ("detection", "class"), lambda index: "class 3")
    Traceback (most recent call last):
    ...
    guidedbp.errors.ArgumentError: method='drise' (D-RISE) explains a detector's detections \
alone: class 3 is no detection; give it a guidedbp.targets.Detection target
    """
    bound = [name for name in methods if method(name).target is not None]
    for name in bound:
        other = next((index for index, kind in enumerate(kinds)
                      if kind != method(name).target), None)
        if other is not None:
            raise ArgumentError(
                f"method={name!r} ({method(name).title.split(':')[0]}) explains a "
                "detector's detections alone: "
                f"{described(other)} is no detection; give it a guidedbp.targets.Detection "
                "target")


def swaps_relus(methods) -> bool:
    """Whether any of ``methods`` replaces the ReLUs' gradient (guided, deconvnet)."""
    return any(method(name).relu_rule not in (None, "plain") for name in methods)
