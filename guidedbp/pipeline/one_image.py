"""One image file explained for a notebook: decoded, fitted and preprocessed as
``guidedbp explain`` does (:func:`explain_image`), its maps returned with the pictures
they were made from (:class:`ImageExplanation`), no file written. The options that only
a run over files has a use for are refused by name, not ignored.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

import numpy as np

from guidedbp._text import did_you_mean
from guidedbp.api import Explainer
from guidedbp.caveats import Caveat, unique
from guidedbp.engine.explainer import Explanation
from guidedbp.errors import ArgumentError
from guidedbp.io.images import decode_image
from guidedbp.models.loading import load_model
from guidedbp.models.preprocess import prepare
from guidedbp.pipeline.detections import detection_layers
from guidedbp.pipeline.naming import label_of
from guidedbp.pipeline.options import IMAGE_OPTIONS, RunOptions
from guidedbp.pipeline.run import loaded_model


@dataclass(frozen=True)
class ImageExplanation:
    """One image file's explanation, with the pictures it was made from.

    Attributes:
        path: The file.
        image: The decoded uint8 picture ``(H0, W0, C)``.
        fitted: The uint8 picture at the model's resolution.
        placement: How ``fitted`` sits in ``image`` (maps back to the original size).
        explanation: The engine's :class:`~guidedbp.engine.explainer.Explanation`
            for this one image (batch axis of 1).
        labels: The model's class names, or ``None``.
        layers: Each class activation map's layer, by method (``{"gradcam": "conv_1"}``,
            named as ``layer=`` takes it); empty without one.
    """

    path: str
    image: np.ndarray
    fitted: np.ndarray
    placement: object
    explanation: Explanation
    labels: tuple[str, ...] | None = None
    layers: dict[str, str] = field(default_factory=dict)

    @property
    def target(self) -> int:
        return int(self.explanation.targets[0])

    @property
    def label(self) -> str | None:
        return label_of(self.target, self.labels)

    @property
    def probability(self) -> float:
        return float(self.explanation.probabilities[0])

    @property
    def maps(self) -> dict[str, np.ndarray]:
        """Each method's map at the model's resolution, ``(h, w, C)``."""
        return {m: maps[0] for m, maps in self.explanation.by_method.items()}

    def original_maps(self) -> dict[str, np.ndarray]:
        """Each method's map mapped back onto the original picture, ``(H0, W0, C)``."""
        return {m: self.placement.to_original(v) for m, v in self.maps.items()}

    @property
    def caveats(self) -> tuple[Caveat, ...]:
        """What makes these maps less meaningful (:mod:`guidedbp.caveats`): random
        weights, unscaled pixels, no guided activation, a negligible map, ..."""
        return self.explanation.caveats_of(0)


def explain_image(model, path: str | os.PathLike, target=None, *, methods=None,
                  options: RunOptions | None = None, load: dict | None = None,
                  **fields) -> ImageExplanation:
    """Decode, fit and preprocess one image file as ``guidedbp explain`` does, and explain it.

    Every option means what it means to :func:`~guidedbp.pipeline.run.explain_files`:
    the methods and their options, ``size`` and ``resize`` give the same maps as its
    ``raw`` ones. The options of what it writes (renders, figures, ...), of which files it reads
    (``recursive``, ``shard``) and of several classes (``classes``, ``top_k``) are
    refused, not ignored: one image explains one ``target``.

    Args:
        model: What :func:`~guidedbp.pipeline.run.explain_files` takes, or a
            :class:`guidedbp.Explainer` (reused as it is: build one once to explain many
            images in a notebook; its method options are its own, so others given here
            are refused, and ``methods`` may only choose some of its methods).
        path: The image file.
        target: ``None`` (top-1), a class index or a class name.
        methods: Method names; ``None``: ``options``' (default ``guided``).
        options: :class:`~guidedbp.pipeline.options.RunOptions`, as
            :func:`~guidedbp.pipeline.run.explain_files` takes.
        load: Keyword arguments of :func:`guidedbp.load_model` for a spec.
        **fields: Method and input options by flat name (``smooth``, ``layer``,
            ``size``, ``resize``, ...).

    Raises:
        GuidedbpError: A file that is not a readable image, a bad, or refused, option
            or class.

    >>> result = explain_image("demo", "sample_images/shapes/circle_0.png")  # doctest: +SKIP
    >>> result.label, result.maps["guided"].shape  # doctest: +SKIP
    ('circle', (96, 96, 3))
    """
    _refuse_for_one_image(options, fields)
    if methods is not None:
        fields["methods"] = methods
    options = RunOptions.of(options, **fields)
    if isinstance(model, Explainer):
        _check_explainer_options(model, options, fields)
        if load:
            raise ArgumentError("load= applies to a model spec: this Explainer's model is "
                                "already loaded")
        explainer = model
    else:
        loaded = loaded_model(model, load)
        explainer = Explainer(loaded, options.methods, options=options.method)
    loaded = explainer.loaded or load_model(explainer.model)
    image = decode_image(os.fspath(path), channels=loaded.channels)
    fitted, placement, model_input = prepare(image, loaded.input_shape, loaded.preprocess,
                                             options.inputs.size, options.inputs.resize)
    explanation = explainer.explain(model_input[None], target)
    if "methods" in fields:  # an Explainer's methods, or some of them
        explanation = replace(explanation, by_method={
            name: explanation.by_method[name] for name in options.methods})
    if explainer.loaded is None:  # built on a model object: its caveats are found here
        explanation = replace(explanation, caveats=(
            unique((*loaded.caveats, *explanation.caveats_of(0))),))
    labels = None if loaded.labels is None else tuple(loaded.labels)
    report = explainer.report_for(model_input.shape)  # of this image's signature
    layers = (detection_layers(explainer, model_input.shape, target.output)
              if report.cam_layers and getattr(target, "kind", None) == "detection"
              else report.cam_layers)
    layers = {name: layer for name, layer in layers.items() if name in explanation.by_method}
    return ImageExplanation(os.fspath(path), image, fitted, placement, explanation, labels,
                            layers)


def _refuse_for_one_image(options: RunOptions | None, fields: dict) -> None:
    """Refuse, in one line, the options :func:`explain_image` has no use for (by name, or
    set in ``options``), rather than ignore them.

    Raises:
        ArgumentError: Naming the first such option and what to do instead.
    """
    unused = [name for name in fields if name not in IMAGE_OPTIONS and name != "methods"]
    if options is not None:
        defaults = RunOptions().flat()
        unused += [name for name, value in options.flat().items()
                   if name not in IMAGE_OPTIONS and name != "methods"
                   and value != defaults[name]]
    known = set(RunOptions().flat())
    for name in fields:
        if name not in known:
            takes = ["target", "methods", "options", "load", *sorted(IMAGE_OPTIONS - {"methods"})]
            hint = ("did you mean 'target'?" if name.lower().startswith("class")
                    else did_you_mean(name, takes))
            raise ArgumentError(f"unknown option {name!r}" + (f" ({hint})" if hint else "")
                                + f": explain_image takes {', '.join(takes)}")
    if not unused:
        return
    name = unused[0]
    if name in ("classes", "top_k"):
        raise ArgumentError(f"explain_image explains one class: give it as target= ({name}= "
                            "is explain_files' option; call explain_image once per class)")
    if name in ("targets", "mask_dir", "detections", "detection_threshold"):
        raise ArgumentError(f"explain_image explains one target: give it as target= (a class, "
                            f"or guidedbp.targets.Unit, Region(c, mask=...), Similarity; {name}= "
                            "is explain_files' option)")
    if name == "model_output":
        raise ArgumentError("explain_image reads the output its explainer reads: pass "
                            "guidedbp.Explainer(model, output=...) as its model (model_output= "
                            "is explain_files' option)")
    if name in ("recursive", "shard"):
        raise ArgumentError(f"explain_image reads the one file it is given: {name}= is "
                            "explain_files' option")
    raise ArgumentError(f"explain_image writes no files: {name}= is explain_files' option "
                        "(the result holds the maps as arrays; guidedbp.plot.plot(result, "
                        "cmap=..., clip=...) draws them)")


def _check_explainer_options(explainer: Explainer, options: RunOptions, fields: dict) -> None:
    """An Explainer keeps its own methods and method options: refuse others, in one line
    (``methods`` may choose some of its own)."""
    if "methods" in fields and not set(options.methods) <= set(explainer.methods):
        raise ArgumentError(f"methods={options.methods!r} are not all among the Explainer's "
                            f"own ({explainer.methods!r}): an Explainer keeps the methods it was "
                            "built with (build one with them, or pass the model itself)")
    defaults = RunOptions().flat()
    own = explainer.options.flat()
    asked = [name for name in own if name in fields
             or not _same(options.flat()[name], defaults[name])]
    wanted = options.flat()
    differing = [name for name in asked if not _same(wanted[name], own[name])]
    if differing:
        name = differing[0]
        raise ArgumentError(f"{name}={wanted[name]!r} differs from the Explainer's own "
                            f"({own[name]!r}): an Explainer keeps the methods and options it "
                            "was built with (build one with them, or pass the model itself)")


def _same(first, second) -> bool:
    if isinstance(first, np.ndarray) or isinstance(second, np.ndarray):
        return np.array_equal(first, second)
    return first == second
