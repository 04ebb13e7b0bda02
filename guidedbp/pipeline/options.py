"""Everything an explain run is asked to do: one frozen, picklable object.

:class:`RunOptions` groups the options by concern: the methods and their options
(:class:`~guidedbp.engine.options.MethodOptions`), the classes to explain, how
inputs are read and fitted, how maps are drawn
(:class:`~guidedbp.render.options.RenderOptions`) and what is written. Every
default is declared here once; ``guidedbp explain`` builds its flags from these
fields (a test checks that they agree) and the Ray runner ships the object as it
is. Every field has a unique flat name, which is also the keyword
:func:`guidedbp.explain_files` takes and, with dashes, the CLI flag.

>>> from guidedbp.pipeline.options import RunOptions
>>> options = RunOptions.of(methods="guided,gradcam", top_k=3, renders="panel")
>>> options.methods, options.classes.top_k, options.render.renders
(('guided', 'gradcam'), 3, ('panel',))
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field

from guidedbp._numbers import whole_number
from guidedbp._text import did_you_mean
from guidedbp.engine.methods.registry import as_methods
from guidedbp.engine.options import MethodOptions
from guidedbp.errors import ArgumentError
from guidedbp.figures import FIGURE_FORMATS
from guidedbp.io.shard import manifest_name
from guidedbp.models.resizing import RESIZE_MODES
from guidedbp.pipeline.target_specs import DETECTION_KINDS, parse_target
from guidedbp.render.options import RenderOptions

#: Where ``guidedbp explain`` writes when no OUT is given.
DEFAULT_OUTPUT = "guidedbp-out"
#: The manifest's file name under OUT (shards name theirs ``manifest-K-of-N.jsonl``).
MANIFEST = "manifest.jsonl"
#: The figures' resolution range, in dots per inch.
MIN_DPI, MAX_DPI = 20, 1200
#: Classes explained per image at most (``top_k``, or ``classes`` listed): each class is a
#: map per method in one engine pass, so memory grows with their number.
MAX_CLASSES = 100
#: The largest side of ``size`` (pixels): a model's activations at 4096x4096 already take
#: gigabytes.
MAX_SIDE = 4096


@dataclass(frozen=True)
class ClassOptions:
    """What each image is explained for: classes, or other targets of the model's output.

    Attributes:
        classes: Classes by index or name, the same for every image; empty: the
            top-1 class (or the top ``top_k``). At most :data:`MAX_CLASSES`.
        top_k: Explain each image's ``top_k`` most probable classes, at most
            :data:`MAX_CLASSES`.
        targets: Target specs (:func:`~guidedbp.pipeline.target_specs.parse_target`:
            ``class:C``, ``unit:I``, ``region:C``, ``similar:IMAGE``), as text or
            parsed; with ``classes``, at most :data:`MAX_CLASSES` in all. They share
            one forward pass.
        model_output: The model output every target reads (its name, or its index),
            for models with several; ``None``: the only one.
        mask_dir: For region targets: a folder with one mask per input, at the input's
            path below its INPUT folder, any image format (nonzero inside); ``None``: the
            pixels the model assigns to the class.
        detections: For a detector: explain each image's K best detections (``K`` or
            ``"top:K"``, at most :data:`MAX_CLASSES`), one set of maps each; ``None``:
            none.
        detection_threshold: For a detector: the class score from which a proposal is a
            detection (found by ``detections``, or of a ``box:`` target's box).
    """

    classes: tuple = ()
    top_k: int | None = None
    targets: tuple = ()
    model_output: str | int | None = None
    mask_dir: str | None = None
    detections: int | None = None
    detection_threshold: float = 0.3

    def __post_init__(self):
        if isinstance(self.classes, (str, int)):
            object.__setattr__(self, "classes", (self.classes,))
        else:
            object.__setattr__(self, "classes", tuple(self.classes))
        targets = (self.targets,) if isinstance(self.targets, str) else tuple(self.targets)
        object.__setattr__(self, "targets", tuple(parse_target(t) for t in targets))
        output = self.model_output
        if isinstance(output, str) and whole_number(output) is not None:
            object.__setattr__(self, "model_output", whole_number(output))
        elif output is not None and (isinstance(output, bool)
                                     or not isinstance(output, (str, int)) or output == ""):
            raise ArgumentError(f"model_output={output!r} must be an output's name or index")
        if self.mask_dir is not None:
            object.__setattr__(self, "mask_dir", os.fspath(self.mask_dir))
        if self.top_k is not None and (isinstance(self.top_k, bool)
                                       or not isinstance(self.top_k, int) or self.top_k < 1):
            raise ArgumentError(f"top_k={self.top_k!r} must be a positive integer or None")
        if (self.top_k or 0) > MAX_CLASSES or len(self.classes) > MAX_CLASSES:
            given = f"top_k={self.top_k!r}" if self.top_k else f"{len(self.classes)} classes"
            raise ArgumentError(f"{given} is above the upper bound of {MAX_CLASSES} classes per "
                                "image")
        if self.classes and self.top_k:
            raise ArgumentError("classes and top_k cannot be used together")
        object.__setattr__(self, "detections", parse_detections(self.detections))
        threshold = self.detection_threshold
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) \
                or not 0 <= threshold <= 1:
            raise ArgumentError(f"detection_threshold={threshold!r} must be a number from 0 "
                                "to 1")
        if self.detections is not None:
            others = (f"top_k={self.top_k}" if self.top_k else
                      f"classes={self.classes[0]}" if self.classes else
                      f"targets={self.targets[0].text}" if self.targets else None)
            if others is not None:
                raise ArgumentError(f"detections=top:{self.detections} explains the detections "
                                    f"the model finds: it cannot go with {others}")
        if len(self.classes) + len(self.targets) > MAX_CLASSES:
            raise ArgumentError(f"{len(self.classes) + len(self.targets)} targets is above the "
                                f"upper bound of {MAX_CLASSES} per image")

    @property
    def detections_only(self) -> bool:
        """Whether every target is a detector's detection (``box:`` targets, or
        ``detections``): the runs ``drise`` explains, and ``all`` includes it for."""
        if self.detections is not None:
            return True
        return bool(self.targets) and not self.classes and not self.top_k and all(
            spec.kind in DETECTION_KINDS for spec in self.targets)


def parse_detections(value) -> int | None:
    """``detections`` as a count: ``3``, ``"3"`` or ``"top:3"`` -> 3; ``None`` stays.

    Raises:
        ArgumentError: Anything but a whole number from 1 to :data:`MAX_CLASSES`.

    >>> parse_detections("top:3"), parse_detections(None)
    (3, None)
    """
    if value is None:
        return None
    count = value
    if isinstance(value, str):
        text = value.strip().lower()
        text = text[4:] if text.startswith("top:") else text
        count = whole_number(text)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_CLASSES:
        raise ArgumentError(f"detections={value!r} must be top:K, K a whole number from 1 to "
                            f"{MAX_CLASSES} (top:3 explains each image's 3 best detections)")
    return count


@dataclass(frozen=True)
class InputOptions:
    """Which files are read and how each is fitted to the model.

    Attributes:
        recursive: Walk folders recursively.
        size: ``(H, W)`` for models with free spatial dimensions, each side at most
            :data:`MAX_SIDE`; ``None``: each image's own size.
        resize: How an image is fitted to the model's input size, one of
            :data:`~guidedbp.models.resizing.RESIZE_MODES`.
        shard: ``(K, N)``: explain only shard K of N (a stable hash of each input's
            output name), writing ``manifest-K-of-N.jsonl``.
    """

    recursive: bool = True
    size: tuple[int, int] | None = None
    resize: str = "stretch"
    shard: tuple[int, int] | None = None

    def __post_init__(self):
        if self.resize not in RESIZE_MODES:
            raise ArgumentError(f"resize={self.resize!r} is not one of {', '.join(RESIZE_MODES)}")
        if self.size is not None:
            object.__setattr__(self, "size", tuple(self.size))
            if len(self.size) != 2 or not all(isinstance(v, int) and v > 0 for v in self.size):
                raise ArgumentError(f"size={self.size!r} must be (height, width) in pixels")
            if max(self.size) > MAX_SIDE:
                raise ArgumentError(f"size={self.size!r} is above the upper bound of {MAX_SIDE} "
                                    "pixels a side")
        if self.shard is not None:
            object.__setattr__(self, "shard", tuple(self.shard))
            if len(self.shard) != 2 or not 0 <= self.shard[0] < self.shard[1]:
                raise ArgumentError(f"shard={self.shard!r} must be (K, N) with 0 <= K < N")


@dataclass(frozen=True)
class OutputOptions:
    """What is written under OUT besides the rendered PNGs.

    Attributes:
        raw: Also save each float32 map (model resolution) as ``.npy``.
        figure: Also draw each explanation as a matplotlib figure in this format, one of
            :data:`~guidedbp.figures.FIGURE_FORMATS` (needs the ``plot`` extra); ``None``: no
            figure.
        dpi: The figure's resolution (dots per inch): the PNG's pixels, the size of the
            pictures embedded in a PDF or SVG.
        report: Write ``OUT/index.html``, a page to browse the run (not with a shard:
            ``guidedbp report OUT`` after merging).
        skip_existing: Resume: inputs whose outputs all exist are not recomputed.
        fail_fast: Stop at the first input that fails.
    """

    raw: bool = False
    figure: str | None = None
    dpi: int = 150
    report: bool = True
    skip_existing: bool = False
    fail_fast: bool = False

    def __post_init__(self):
        if self.figure is not None and self.figure not in FIGURE_FORMATS:
            raise ArgumentError(f"figure={self.figure!r} is not one of "
                                f"{', '.join(FIGURE_FORMATS)} (or None)")
        if isinstance(self.dpi, bool) or not isinstance(self.dpi, int) \
                or not MIN_DPI <= self.dpi <= MAX_DPI:
            raise ArgumentError(f"dpi={self.dpi!r} must be a whole number from {MIN_DPI} to "
                                f"{MAX_DPI}")


@dataclass(frozen=True)
class RunOptions:
    """An explain run's options, grouped by concern.

    Attributes:
        methods: Method names of :data:`guidedbp.METHODS`, in order, or ``"all"``: every
            method that explains the targets (``drise`` where every target is a detection).
        method: Their options.
        classes: :class:`ClassOptions`.
        inputs: :class:`InputOptions`.
        render: :class:`~guidedbp.render.options.RenderOptions`.
        output: :class:`OutputOptions`.
    """

    methods: tuple[str, ...] = ("guided",)
    method: MethodOptions = field(default_factory=MethodOptions)
    classes: ClassOptions = field(default_factory=ClassOptions)
    inputs: InputOptions = field(default_factory=InputOptions)
    render: RenderOptions = field(default_factory=RenderOptions)
    output: OutputOptions = field(default_factory=OutputOptions)

    def __post_init__(self):
        # "all": every method that explains the run's targets (D-RISE on detections only).
        object.__setattr__(self, "methods", as_methods(
            self.methods, detection=self.classes.detections_only))

    @classmethod
    def of(cls, options: RunOptions | None = None, **fields) -> RunOptions:
        """``options`` (default: all defaults) with fields replaced by their flat names.

        Flat names: ``methods``, every :class:`MethodOptions` name (``batch_size``,
        ``layer``, ``smooth``, ...), and the fields of the other groups
        (``top_k``, ``renders``, ``raw``, ...).

        Raises:
            ArgumentError: For an unknown name or a bad value.
        """
        options = options or cls()
        top: dict = {}
        grouped: dict[str, dict] = {}
        method_fields = {}
        for name, value in fields.items():
            if name == "methods":
                top[name] = value
            elif name in _METHOD_NAMES:
                method_fields[name] = value
            elif name in _FLAT_NAMES:
                grouped.setdefault(_FLAT_NAMES[name], {})[name] = value
            else:
                known = sorted({"methods", *_METHOD_NAMES, *_FLAT_NAMES})
                hint = did_you_mean(name, known)
                raise ArgumentError(f"unknown option {name!r}" + (f" ({hint})" if hint else "")
                                    + f": expected one of {', '.join(known)}")
        if method_fields:
            top["method"] = MethodOptions.of(options.method, **method_fields)
        for group, values in grouped.items():
            top[group] = dataclasses.replace(getattr(options, group), **values)
        return dataclasses.replace(options, **top)

    def flat(self) -> dict:
        """Every option by its flat name (the inverse of :meth:`of`)."""
        values = {"methods": self.methods, **self.method.flat()}
        for group in _GROUPS:
            values.update({f.name: getattr(getattr(self, group), f.name)
                           for f in dataclasses.fields(_GROUPS[group])})
        return values

    @property
    def manifest(self) -> str:
        """The manifest's file name under OUT."""
        return MANIFEST if self.inputs.shard is None else manifest_name(*self.inputs.shard)


_GROUPS = {"classes": ClassOptions, "inputs": InputOptions, "render": RenderOptions,
           "output": OutputOptions}
_FLAT_NAMES = {f.name: group for group, kind in _GROUPS.items() for f in dataclasses.fields(kind)}
_METHOD_NAMES = set(MethodOptions().flat())
#: The options that mean something for one image in memory
#: (:func:`guidedbp.explain_image`): the methods and their options, and how the image is
#: fitted to the model. The others choose files, classes or what is written.
IMAGE_OPTIONS = frozenset({"methods", *_METHOD_NAMES, "size", "resize"})
