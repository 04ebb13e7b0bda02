"""The attribution methods' options: frozen, picklable, defaults declared once.

Grouped by concern: the class activation maps' layer and upsampling, SmoothGrad's
noise, integrated gradients' path, Score-CAM's channels, occlusion's patch, the black-box
methods' grid and samples. The CLI
builds its flags from these fields (a test checks that every default and choice list
agrees; a field with ``metadata["help"]`` brings its own flag), and the Ray runner
ships them as they are. Importing this module does not import TensorFlow.

>>> from guidedbp.engine.options import MethodOptions
>>> options = MethodOptions.of(smooth=8, layer="conv")
>>> options.smoothgrad.smooth, options.gradcam.layer, options.batch_size
(8, 'conv', 16)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from guidedbp.errors import ArgumentError

#: Grad-CAM upsampling methods (``tf.image.resize`` names).
UPSAMPLING = ("bilinear", "nearest")
#: Integrated-gradients baselines by name; an array in input space also works.
BASELINES = ("black", "white", "blur")
#: Images (or noisy copies, or path steps) per forward/backward pass.
DEFAULT_BATCH_SIZE = 16
#: Upper bounds: each noisy copy, path step or batch image costs time (and a batch costs
#: memory) in proportion, so a value past these is a typo, refused at once rather than run
#: for hours. SmoothGrad's paper finds 50 copies enough; integrated gradients' 20-300 steps.
MAX_BATCH_SIZE = 1024
MAX_SMOOTH = 1000
#: Noisy copies per image of SquareGrad and VarGrad when SmoothGrad is off (``smooth`` 0
#: or 1): statistics over copies need some.
STATISTIC_COPIES = 16
MAX_STEPS = 1000
#: Occlusion's patch positions per image at most (64 x 64), one forward pass each:
#: ``patch=1, stride=1`` on a 224x224 image would be 50176.
MAX_OCCLUSION_POSITIONS = 4096
#: The black-box methods' forward passes per image at most (rise's and drise's masks,
#: kernelshap's and lime's samples, sobol's designs times cells + 2), and cells per side of
#: their grid.
MAX_BLACKBOX_PASSES = 100000
MAX_GRID = 64
#: The regions KernelSHAP and LIME hide: the grid's cells, or SLIC superpixels
#: (scikit-image, the ``segments`` extra).
SEGMENTS = ("grid", "slic")
#: Numeric precisions of the forward and backward passes: ``float32`` throughout, or
#: ``mixed`` (bfloat16 or float16 where the hardware runs it fast, float32 where it matters:
#: :mod:`guidedbp.engine.graph.precision`).
PRECISIONS = ("float32", "mixed")


def _positive_int(name: str, value, minimum: int = 1, maximum: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ArgumentError(f"{name}={value!r} must be {kind}")
    if maximum is not None and value > maximum:
        raise ArgumentError(f"{name}={value!r} is above the upper bound of {maximum}")


def _optional_positive_int(name: str, value) -> None:
    if value is not None:
        _positive_int(name, value)


@dataclass(frozen=True)
class GradCamOptions:
    """Options of the class activation maps: Grad-CAM, Grad-CAM++, LayerCAM, Score-CAM
    and their guided versions.

    Attributes:
        layer: The feature-map layer's name; ``None``: the last layer with a 4-D
            output before global pooling or flattening, inside nested models too.
        upsample: How the coarse map is resized to the input: one of :data:`UPSAMPLING`.
    """

    layer: str | None = None
    upsample: str = "bilinear"

    def __post_init__(self):
        if self.layer is not None and not isinstance(self.layer, str):
            raise ArgumentError(f"layer={self.layer!r} must be a layer name")
        if self.upsample not in UPSAMPLING:
            raise ArgumentError(
                f"upsample={self.upsample!r} is not one of {', '.join(UPSAMPLING)}"
            )


#: Where guided backprop and deconvnet replace gradients: ``all`` activations (the
#: generalised rule) or the ``relu`` family only (the paper's scope).
GUIDE_SCOPES = ("all", "relu")


@dataclass(frozen=True)
class GuideOptions:
    """Where the guided and deconvnet rules apply (README, "How it works").

    At every activation ``y = f(x)`` in scope, with ``g`` the gradient arriving at ``y``,
    guided backprop sends ``f'(x) * max(g, 0)`` to ``x`` and deconvnet ``max(g, 0)``;
    outside it, activations keep their own gradient. On ReLU and ReLU6 that is the
    papers' rule.

    Attributes:
        guide: ``"all"``: every elementwise activation (SiLU, GELU, hard-swish, sigmoid,
            ...); ``"relu"``: the ReLU family only (``Relu``/``Relu6`` ops, the papers'
            scope); ``None``: ``all`` for guided backprop (and the guided CAMs),
            ``relu`` for deconvnet, as measured in the README.
    """

    guide: str | None = field(default=None, metadata={
        "help": "Where guided backprop and deconvnet replace gradients: 'all' activations "
                "(SiLU, GELU, hard-swish, sigmoid... by f'(x)*max(g,0)) or the 'relu' family "
                "only [default: all for guided and the guided CAMs, relu for deconvnet].",
        "choices": GUIDE_SCOPES})

    def __post_init__(self):
        if self.guide is not None and self.guide not in GUIDE_SCOPES:
            raise ArgumentError(f"guide={self.guide!r} is not one of {', '.join(GUIDE_SCOPES)}")


@dataclass(frozen=True)
class SmoothGradOptions:
    """SmoothGrad (Smilkov et al. 2017), on top of any method; the noisy copies of
    SquareGrad and VarGrad too (:attr:`copies`), statistics over them that SmoothGrad
    does not average again.

    Attributes:
        smooth: Noisy copies per image, at most :data:`MAX_SMOOTH`; 0 or 1 turns
            SmoothGrad off.
        noise: Noise standard deviation, relative to each image's value range.
        seed: Noise seed: same seed, same maps.
    """

    smooth: int = 0
    noise: float = 0.15
    seed: int = 0

    def __post_init__(self):
        _positive_int("smooth", self.smooth, minimum=0, maximum=MAX_SMOOTH)
        if isinstance(self.noise, bool) or not isinstance(self.noise, (int, float)) \
                or not self.noise >= 0:
            raise ArgumentError(f"noise={self.noise!r} must be a number >= 0")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ArgumentError(f"seed={self.seed!r} must be an integer")

    @property
    def active(self) -> bool:
        return self.smooth > 1 and self.noise > 0

    @property
    def copies(self) -> int:
        """Noisy copies per image of SquareGrad and VarGrad: ``smooth``, or
        :data:`STATISTIC_COPIES` when that turns SmoothGrad off."""
        return self.smooth if self.smooth > 1 else STATISTIC_COPIES


@dataclass(frozen=True)
class IntegratedGradientsOptions:
    """Integrated gradients (Sundararajan et al. 2017).

    Attributes:
        steps: Riemann steps along the path, at most :data:`MAX_STEPS`.
        baseline: ``"black"``, ``"white"``, ``"blur"`` (see :data:`BASELINES`), or an
            array in the model's input space that broadcasts to the images.
    """

    steps: int = 32
    baseline: object = "black"

    def __post_init__(self):
        _positive_int("steps", self.steps, maximum=MAX_STEPS)
        if isinstance(self.baseline, str) and self.baseline not in BASELINES:
            raise ArgumentError(
                f"baseline={self.baseline!r} is not one of {', '.join(BASELINES)} or an array"
            )


@dataclass(frozen=True)
class ScoreCamOptions:
    """Score-CAM (Wang et al. 2020).

    Attributes:
        max_channels: Feature-map channels scored per image, those of largest mean
            activation; each costs one forward pass. ``None`` or 0: every channel.
    """

    max_channels: int | None = field(default=32, metadata={
        "help": "Score-CAM: feature-map channels scored per image, largest mean activation "
                "first (one forward pass each); 0: all.",
        "metavar": "N", "min": 0})

    def __post_init__(self):
        if self.max_channels is not None:
            _positive_int("max_channels", self.max_channels, minimum=0)


@dataclass(frozen=True)
class OcclusionOptions:
    """Occlusion (Zeiler & Fergus 2014): a patch slid over the image.

    ``fill`` is a pixel value (0-255, the same in every channel), not an input-space
    value: the explainer maps it into the model's input space with its
    ``pixel_to_input``, as it does integrated gradients' black and white baselines. The
    default, mid-gray 127.5, is the paper's gray square, and is close to the input-space
    zero (the mean pixel) of the usual ImageNet preprocessings.

    Attributes:
        patch: The patch's side in pixels; ``None``: a quarter of the images' shorter
            side (56 for 224x224 images).
        stride: How far the patch moves each step, in pixels, at most ``patch``;
            ``None``: two thirds of the patch, rounded up. The two may place the patch at
            most :data:`MAX_OCCLUSION_POSITIONS` times on an image. 224x224 images with the
            defaults: 6x6 = 36 positions, one forward pass each (about 17 times guided
            backprop's time on ResNet50).
        fill: The patch's pixel value, 0-255; also what the black-box methods
            (:class:`BlackBoxOptions`) put where they hide a region.
    """

    patch: int | None = field(default=None, metadata={
        "help": "Occlusion: patch side in pixels; one forward pass per patch position "
                "[default: a quarter of the shorter image side: 6x6 = 36 positions with "
                "the default stride].",
        "metavar": "PX", "integer": True, "min": 1})
    stride: int | None = field(default=None, metadata={
        "help": "Occlusion: patch step in pixels, at most the patch [default: two thirds "
                "of the patch].",
        "metavar": "PX", "integer": True, "min": 1})
    fill: float = field(default=127.5, metadata={
        "help": "Occlusion, rise, drise, kernelshap, lime, sobol: the pixel value (0-255, every "
                "channel) of what they hide, preprocessed like the images.",
        "metavar": "PIXEL", "min": 0.0, "max": 255.0})

    def __post_init__(self):
        _optional_positive_int("patch", self.patch)
        _optional_positive_int("stride", self.stride)
        if self.patch is not None and self.stride is not None and self.stride > self.patch:
            raise ArgumentError(
                f"stride={self.stride!r} must not exceed patch={self.patch!r}: pixels between "
                "patches would get no value"
            )
        if isinstance(self.fill, bool) or not isinstance(self.fill, (int, float)) \
                or not 0 <= self.fill <= 255:
            raise ArgumentError(f"fill={self.fill!r} must be a pixel value from 0 to 255")


@dataclass(frozen=True)
class BlackBoxOptions:
    """The black-box methods: RISE (Petsiuk et al. 2018), D-RISE (Petsiuk et al. 2021),
    KernelSHAP (Lundberg & Lee 2017), LIME (Ribeiro et al. 2016) and Sobol indices (Fel et
    al. 2021).

    Each scores the images with regions hidden (set to occlusion's ``fill``), forward
    only; the regions are the cells of a ``grid`` x ``grid`` grid. The random draws (RISE's
    masks, the coalitions) use SmoothGrad's ``seed``, per image. The defaults are the
    fewest forward passes that point at the object (pointing game >= 0.8, README) on the
    demo's shapes; models of natural images need more (RISE's paper: 4000 masks).

    Attributes:
        grid: Cells per side of the grid: RISE's low-resolution masks, Sobol's masks,
            KernelSHAP's and LIME's superpixels, at most the images' shorter side.
            ``None``: 7 for RISE (the paper's and Xplique's), 16 for D-RISE (its paper's),
            8 for the others (Xplique's Sobol grid), or the shorter side if less.
        masks: RISE's and D-RISE's random masks per image, one forward pass each.
            ``None``: 100 for RISE, 500 for D-RISE (its paper: 5000), the fewest that
            point at the object on the bundled shapes and detector (pointing game
            ``1.000`` for D-RISE at 500 masks on its 16 x 16 grid, ``0.962`` at 250:
            Detectors page).
        keep_probability: RISE, D-RISE: the probability that a cell is kept, in ``(0, 1]``.
        samples: KernelSHAP's and LIME's coalitions per image, one forward pass each
            (KernelSHAP adds two: no superpixel and all).
        designs: Sobol's quasi-Monte Carlo designs; each costs ``grid ** 2 + 2``
            forward passes (8 designs on grid 8: 528).
        segments: KernelSHAP's and LIME's superpixels, one of :data:`SEGMENTS`: the
            grid's cells, or about ``grid ** 2`` SLIC superpixels per image (scikit-image's
            ``slic`` on the image scaled to its own range; needs ``guidedbp[segments]``).
    """

    grid: int | None = field(default=None, metadata={
        "help": "rise, drise, sobol, kernelshap, lime: cells per side of the grid whose cells "
                "they hide (rise's and drise's random masks, sobol's masks, the superpixels) "
                "[default: 7 for rise, 16 for drise, 8 for the others, or the images' shorter "
                "side if less].",
        "metavar": "N", "integer": True, "min": 1, "max": MAX_GRID})
    masks: int | None = field(default=None, metadata={
        "help": "rise, drise: random masks per image, one forward pass each [default: 100 "
                "for rise, 500 for drise: on its finer grid, fewer masks give blotchy maps].",
        "metavar": "N", "integer": True, "min": 1, "max": MAX_BLACKBOX_PASSES})
    keep_probability: float = field(default=0.5, metadata={
        "help": "rise, drise: the probability that a grid cell is kept (not hidden), in "
                "(0, 1].",
        "metavar": "P", "min": 0.0, "max": 1.0})
    samples: int = field(default=256, metadata={
        "help": "kernelshap, lime: coalitions of superpixels scored per image, one forward "
                "pass each.",
        "metavar": "N", "min": 1, "max": MAX_BLACKBOX_PASSES})
    designs: int = field(default=8, metadata={
        "help": "sobol: quasi-Monte Carlo designs, grid^2 + 2 forward passes each (528 for "
                "8 designs on grid 8).",
        "metavar": "N", "min": 1, "max": MAX_BLACKBOX_PASSES})
    segments: str = field(default="grid", metadata={
        "help": "kernelshap, lime: the superpixels they hide: the grid's cells, or about "
                "grid^2 SLIC superpixels per image (scikit-image: pip install "
                "'guidedbp[segments]').",
        "choices": SEGMENTS})

    def __post_init__(self):
        if self.segments not in SEGMENTS:
            raise ArgumentError(
                f"segments={self.segments!r} is not one of {', '.join(SEGMENTS)}")
        if self.grid is not None:
            _positive_int("grid", self.grid, maximum=MAX_GRID)
        if self.masks is not None:
            _positive_int("masks", self.masks, maximum=MAX_BLACKBOX_PASSES)
        _positive_int("samples", self.samples, maximum=MAX_BLACKBOX_PASSES)
        _positive_int("designs", self.designs, maximum=MAX_BLACKBOX_PASSES)
        if isinstance(self.keep_probability, bool) \
                or not isinstance(self.keep_probability, (int, float)) \
                or not 0 < self.keep_probability <= 1:
            raise ArgumentError(
                f"keep_probability={self.keep_probability!r} must be a number in (0, 1]")


@dataclass(frozen=True)
class MethodOptions:
    """Every method's options, grouped by the methods they apply to.

    Attributes:
        batch_size: Images (or noisy copies, or path steps) per forward/backward
            pass, at most :data:`MAX_BATCH_SIZE`; bounds memory.
        precision: One of :data:`PRECISIONS`. ``"mixed"`` runs the model's passes in
            bfloat16 on a CPU with AVX512-BF16 or AMX and on a GPU of compute capability
            8.0 or more (float16 on 7.x), keeping float32 for the layers at the input's
            resolution, the output layers (logits, head, score) and the maps; refused
            where the hardware has no fast path or the model is no Functional or
            Sequential Keras model.
        guided: :class:`GuideOptions`.
        gradcam: :class:`GradCamOptions`.
        smoothgrad: :class:`SmoothGradOptions`.
        integrated_gradients: :class:`IntegratedGradientsOptions`.
        scorecam: :class:`ScoreCamOptions`.
        occlusion: :class:`OcclusionOptions`.
        blackbox: :class:`BlackBoxOptions`.
    """

    batch_size: int = DEFAULT_BATCH_SIZE
    precision: str = field(default="float32", metadata={
        "help": "Numeric precision of the forward and backward passes: 'mixed' runs them in "
                "bfloat16 where the hardware has a fast path (CPUs with AVX512-BF16 or AMX; "
                "GPUs of compute capability 8.0+, float16 on 7.x), keeping float32 for the "
                "high-resolution stem, the logits and the maps; refused elsewhere.",
        "choices": PRECISIONS})
    guided: GuideOptions = field(default_factory=GuideOptions)
    gradcam: GradCamOptions = field(default_factory=GradCamOptions)
    smoothgrad: SmoothGradOptions = field(default_factory=SmoothGradOptions)
    integrated_gradients: IntegratedGradientsOptions = field(
        default_factory=IntegratedGradientsOptions)
    scorecam: ScoreCamOptions = field(default_factory=ScoreCamOptions)
    occlusion: OcclusionOptions = field(default_factory=OcclusionOptions)
    blackbox: BlackBoxOptions = field(default_factory=BlackBoxOptions)

    def __post_init__(self):
        _positive_int("batch_size", self.batch_size, maximum=MAX_BATCH_SIZE)
        if self.precision not in PRECISIONS:
            raise ArgumentError(
                f"precision={self.precision!r} is not one of {', '.join(PRECISIONS)}")

    @classmethod
    def of(cls, options: MethodOptions | None = None, **fields) -> MethodOptions:
        """``options`` (default: all defaults) with fields replaced by their flat names.

        Flat names are the fields of the groups (``layer``, ``smooth``, ``steps``,
        ``max_channels``, ``patch``, ...), ``batch_size`` and ``precision``; ``None`` for
        ``batch_size`` keeps the current value.

        Raises:
            ValueError: For an unknown name or a bad value.
        """
        options = options or cls()
        if fields.get("batch_size", 0) is None:
            fields.pop("batch_size")
        groups: dict[str, dict] = {}
        for name, value in fields.items():
            group = _FLAT_NAMES.get(name)
            if group is None:
                known = ", ".join(sorted(_FLAT_NAMES))
                raise ArgumentError(f"unknown option {name!r}: expected one of {known}")
            groups.setdefault(group, {})[name] = value
        top = groups.pop("", {})
        replaced = {group: dataclasses.replace(getattr(options, group), **values)
                    for group, values in groups.items()}
        return dataclasses.replace(options, **top, **replaced)

    def flat(self) -> dict:
        """Every option by its flat name (the inverse of :meth:`of`)."""
        values = {"batch_size": self.batch_size, "precision": self.precision}
        for group in _GROUPS:
            values.update({f.name: getattr(getattr(self, group), f.name)
                           for f in dataclasses.fields(_GROUPS[group])})
        return values


_GROUPS = {"guided": GuideOptions, "gradcam": GradCamOptions, "smoothgrad": SmoothGradOptions,
           "integrated_gradients": IntegratedGradientsOptions, "scorecam": ScoreCamOptions,
           "occlusion": OcclusionOptions, "blackbox": BlackBoxOptions}
_FLAT_NAMES = {"batch_size": "", "precision": "",
               **{f.name: group for group, kind in _GROUPS.items()
                  for f in dataclasses.fields(kind)}}
