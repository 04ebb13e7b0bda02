"""The pipeline as a library: explain files into a folder, or one image for a notebook.

:func:`explain_files` is exactly what ``guidedbp explain`` runs (the command only
parses flags and prints the summary), so both write the same files byte for byte.
:func:`explain_image` decodes and preprocesses one file as the command does and
returns the maps together with the picture.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from guidedbp._text import did_you_mean, plural
from guidedbp.api import Explainer
from guidedbp.caveats import Caveat, unique
from guidedbp.engine.explainer import Explanation
from guidedbp.engine.targets.detect import NotADetector
from guidedbp.errors import ArgumentError, GuidedbpError
from guidedbp.io import store
from guidedbp.io.images import decode_image
from guidedbp.io.manifest import read_earlier
from guidedbp.io.report import write_report
from guidedbp.models.labels import resolve_class
from guidedbp.models.loading import LoadedModel, load_model
from guidedbp.models.preprocess import prepare
from guidedbp.pipeline.detections import detection_layers, plan_detections
from guidedbp.pipeline.family import claim_output
from guidedbp.pipeline.fingerprint import made_by
from guidedbp.pipeline.local import run_local
from guidedbp.pipeline.naming import label_of
from guidedbp.pipeline.options import DEFAULT_OUTPUT, IMAGE_OPTIONS, RunOptions
from guidedbp.pipeline.preflight import (  # noqa: F401 (NoImagesError: guidedbp's)
    CheckedRun,
    NoImagesError,
    check_output,
    check_run,
    remove_created,
)
from guidedbp.pipeline.resume import Resumed, carried_over, earlier_outputs
from guidedbp.pipeline.stages import Feed, Plan, Summary
from guidedbp.pipeline.targets import (
    DETECTION_KINDS,
    TargetPlan,
    model_outputs,
    plan_targets,
    select_output,
)
from guidedbp.pipeline.writing import record


def explain_files(
    model,
    inputs: str | os.PathLike | Sequence[str | os.PathLike] | CheckedRun,
    output: str | os.PathLike = DEFAULT_OUTPUT,
    *,
    options: RunOptions | None = None,
    load: dict | None = None,
    runner: str = "local",
    cluster=None,
    progress=None,
    **fields,
) -> Summary:
    """Explain image files, folders and globs into ``output``, with a manifest.

    This is what ``guidedbp explain`` runs: the same inputs, names, renders and
    manifest (see the command's help for the naming rule).

    Args:
        model: A model spec (``model.keras``, ``model.h5``, a SavedModel folder,
            ``keras:NAME``, ``demo``), a :class:`~guidedbp.models.loading.LoadedModel`
            or a ``keras.Model``.
        inputs: Image files, folders and glob patterns, or the
            :class:`~guidedbp.pipeline.preflight.CheckedRun` that
            :func:`~guidedbp.pipeline.preflight.check_run` made of them for this
            ``output`` and these options (the CLI checks them before it imports
            TensorFlow; they are not listed twice).
        output: The folder for maps and ``manifest.jsonl``.
        options: :class:`~guidedbp.pipeline.options.RunOptions`.
        load: Keyword arguments of :func:`guidedbp.load_model` for a spec.
        runner: ``"local"`` (this process) or ``"ray"`` (a Ray Data pipeline; needs
            ``model`` as a spec, which each worker loads).
        cluster: :class:`~guidedbp.pipeline.ray_runner.Cluster` for the Ray runner.
        progress: An object with ``advance()``, called once per input (and
            ``begin(total)``, if it has one, called once before the first;
            ``passes(method, done, total)``, if it has one, as the explainer's
            ``progress``: the perturbation methods' forward passes, local runner only;
            ``note(text)``, if it has one, once the model is loaded and before it is traced;
            ``decode(count)``, ``explaining()`` and ``explained(count)``, if it has them,
            as the local runner decodes each input, sends a batch into the engine and
            has it back).
        **fields: Options by their flat names (``methods="guided,gradcam"``,
            ``top_k=3``, ``renders=("panel",)``, ``classes=("tabby",)``,
            ``targets=("region:circle", "unit:2")``, ``model_output="seg"``,
            ``mask_dir="masks"``, ...), replacing those of ``options``.

    Returns:
        The run's :class:`~guidedbp.pipeline.stages.Summary`; its ``exit_code`` is the
        command's.

    Raises:
        GuidedbpError: Bad options, inputs that name nothing, an output folder that
            cannot be written (:func:`~guidedbp.pipeline.preflight.check_run`), a model
            that does not load (or ``load`` with a model already loaded), a class that
            does not exist, targets that do not fit the model's output
            (:func:`~guidedbp.pipeline.targets.plan_targets`), batches that cannot fit in
            the free memory. Failing inputs do
            not raise: they are counted in the summary and recorded in the manifest.

    >>> summary = explain_files("demo", "sample_images/shapes", "maps",
    ...                         methods="guided,gradcam", renders="panel")  # doctest: +SKIP
    >>> summary.done, summary.failures  # doctest: +SKIP
    (6, [])
    """
    started = time.perf_counter()
    options = RunOptions.of(options, **fields)
    output = os.fspath(output)
    if isinstance(inputs, CheckedRun):  # checked before TensorFlow was imported
        if inputs.output != output or (inputs.options is not options
                                       and repr(inputs.options) != repr(options)):
            raise GuidedbpError("these inputs were checked for another output folder or "
                                "other options: pass them to check_run again")
        checked = inputs
    else:  # before anything is written or loaded: fail fast
        checked = check_run(model, inputs, output, options=options, runner=runner)
    items = list(checked.items)
    manifest = store.join(output, options.manifest) if store.is_url(output) else \
        os.path.join(output, options.manifest)
    created = check_output(output, options.manifest)
    try:
        summary, loading = _run(model, load, options, output, manifest, items, runner,
                                cluster, progress, started)
    except BaseException:
        remove_created(created)  # a run that wrote nothing leaves nothing behind
        raise
    summary.passed_over = checked.passed_over
    summary.hidden = checked.hidden
    summary.loading = loading
    summary.seconds = time.perf_counter() - started
    return summary


class ReportWarning(UserWarning):
    """The run's maps and manifest are written, but its ``index.html`` could not be."""


def _report(output: str, manifest: str) -> str | None:
    """Write OUT/index.html from the manifest; a page that cannot be written is a warning
    (the run's own files are all there), not a failed run."""
    try:
        return write_report(output, manifest)
    except (GuidedbpError, OSError) as error:
        warnings.warn(f"no report written: {error}", ReportWarning, stacklevel=4)
        return None


def _loaded(model, load: dict | None) -> LoadedModel:
    """``model`` loaded (with ``load``'s keywords), or as it is when it is loaded already."""
    if not isinstance(model, LoadedModel):
        return load_model(model, **(load or {}))
    if load:
        raise ArgumentError("load= applies to a model spec: this LoadedModel is already "
                            "loaded (pass its options to guidedbp.load_model)")
    return model


def _run(model, load, options, output, manifest, items, runner, cluster, progress, started):
    with claim_output(output, options.manifest) as claim:
        earlier = read_earlier(manifest)
        if runner == "ray":
            from guidedbp.pipeline.ray_runner import draw_as_workers

            draw_as_workers(load or {})  # the very network the workers build: its digest
        loaded = _loaded(model, load)
        if hasattr(progress, "note"):
            progress.note("tracing the model...")
        wanted = options.classes
        outputs = model_outputs(loaded.model)
        if outputs is not None:  # before the engine traces a missing output
            select_output(outputs, wanted.model_output)
        explainer = Explainer(loaded, options.methods, options=options.method,
                              output=wanted.model_output,
                              progress=getattr(progress, "passes", None))
        report = explainer.report  # traces once: a bad layer fails here
        fallback = tuple(report.output_shape) or (None, report.num_classes)
        value = explainer.reads_a_value()  # one unit, no sigmoid or softmax: no class
        described = outputs or model_outputs(loaded.model, fallback)
        if wanted.detections or any(spec.kind == "box" for spec in wanted.targets):
            targets = _detection_plan(wanted, explainer, described, loaded, options.inputs.size)
        else:
            targets = plan_targets(wanted, described, loaded.labels, value, text=loaded.text)
        num_classes = (report.num_classes if targets is None
                       else 0 if value else _classes_of(targets.shape))
        for note in [*_notes(loaded, num_classes), *(targets.notes if targets else ())]:
            warnings.warn(note, ModelWarning, stacklevel=3)
        classes = () if targets is not None else tuple(
            resolve_class(spec, loaded.labels, num_classes) for spec in wanted.classes)
        columns = len(classes) if targets is None else \
            targets.detections or len(targets.targets)
        _check_memory(explainer, loaded, options, columns, num_classes)
        previous = earlier_outputs(earlier)  # input -> the files its record names
        owned = frozenset(path for paths in previous.values() for path in paths)
        named = os.fspath(model) if isinstance(model, (str, os.PathLike)) else None
        plan = Plan(output, options, Feed.of(loaded), classes, num_classes, owned,
                    guided=report.as_dict()["by_rule"],
                    layers=_cam_layers(explainer, report, targets, options.inputs.size),
                    targets=targets,
                    conditional=getattr(claim.lock, "conditional", None) is True,
                    made_by=made_by(loaded, options, load, named))
        resumed = carried_over(plan, items, earlier) if options.output.skip_existing \
            else Resumed()
        carried = {**resumed.carried, **_clashes(plan, items)}
        if hasattr(progress, "begin"):
            progress.begin(len(items))
        loading = time.perf_counter() - started
        claim.take_over()  # the shard manifests of a merged OUT, before anything is written
        if runner == "ray" and items:
            from guidedbp.pipeline.ray_runner import Cluster, Recipe, run_on_ray

            recipe = Recipe(os.fspath(model), dict(load or {}))
            summary = run_on_ray(plan, recipe, items, cluster or Cluster(), progress, carried,
                                 previous)
        else:
            summary = run_local(plan, explainer, items, progress, carried, previous)
        summary.recomputed = resumed.recomputed
        if options.output.report and options.inputs.shard is None:
            # Under the lock: a second run must not start while the page is written.
            summary.report = _report(output, options.manifest)
    return summary, loading


def _detection_plan(wanted, explainer, outputs, loaded, size) -> TargetPlan:
    """A run's ``box:`` targets or ``detections`` checked against the model, which must be
    a detector (:func:`~guidedbp.pipeline.detections.plan_detections`), before any input
    is read."""
    shape = explainer.image_shape or (None, None, loaded.channels)
    if size is not None and None in tuple(shape[:2]):
        shape = (*size, shape[2])
    try:
        detector, reason = explainer.detector(tuple(shape)), None
    except NotADetector as error:
        detector, reason = None, str(error)
    return plan_detections(wanted, outputs, loaded.labels, detector, reason)


def _cam_layers(explainer, report, targets, size) -> dict[str, str]:
    """Each class activation map's layer, by method: a detection's (the last feature map
    its proposals share) where the run explains detections, else the report's."""
    layers = dict(report.cam_layers)
    if not layers or targets is None or not (
            targets.detections or any(target.kind in DETECTION_KINDS
                                      for target in targets.targets)):
        return layers
    shape = explainer.image_shape
    if shape is None or None in tuple(shape[:2]):
        if size is None:
            return layers  # traced per image size: the layer of a class stands
        shape = (*size, explainer.image_shape[2] if explainer.image_shape else 3)
    return detection_layers(explainer, tuple(shape), targets.output)


def _check_memory(explainer, loaded, options: RunOptions, classes: int, num_classes: int
                  ) -> None:
    """Refuse at once a run whose batches cannot fit in memory, where the size of the model's
    input is known before the images are read."""
    height, width = loaded.input_shape[:2]
    if (height is None or width is None) and options.inputs.size is not None:
        height, width = options.inputs.size
    if height is None or width is None:
        return  # each image's own size: the engine checks each batch
    columns = classes or min(options.classes.top_k or 1, num_classes)
    explainer.check_memory((height, width, loaded.channels), columns)


def _clashes(plan: Plan, items: list) -> dict[str, dict]:
    """Failed records for inputs whose output names differ from an earlier input's only in
    letter case (``A.PNG``, ``a.png``): on a case-insensitive disk they would be one file."""
    seen: dict[str, str] = {}
    failed = {}
    for item in items:
        key = item.output_stem.casefold()
        if item.skipped is not None:  # writes nothing
            continue
        if key in seen:
            failed[item.path] = record(plan, item, "error", (
                f"its output names differ from those of {seen[key]!r} only in letter case, "
                "which a case-insensitive disk cannot keep apart: rename one of them"), [])
        else:
            seen[key] = item.path
    return failed


class ModelWarning(UserWarning):
    """Something to know about the model before trusting its maps (what ``guidedbp
    inspect`` notes): random weights, no preprocessing found, labels that do not
    match the classes."""


def _classes_of(shape: tuple) -> int:
    """How many classes an output of ``shape`` scores: ``(batch, classes)`` or a map's
    ``(batch, H', W', classes)`` (two for a single logit); 0 for other outputs."""
    if len(shape) not in (2, 4) or shape[-1] is None:
        return 0
    return 2 if len(shape) == 2 and shape[-1] == 1 else int(shape[-1])


def _notes(loaded, num_classes: int) -> list[str]:
    notes = list(loaded.notes)
    if loaded.labels is not None and num_classes and len(loaded.labels) != num_classes:
        notes.append(f"{plural(len(loaded.labels), 'class name')} for "
                     f"{plural(num_classes, 'class')}: names may be wrong")
    return notes


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

    Every option means what it means to :func:`explain_files`: the methods and their
    options, ``size`` and ``resize`` give the same maps as its ``raw`` ones. The
    options of what it writes (renders, figures, ...), of which files it reads
    (``recursive``, ``shard``) and of several classes (``classes``, ``top_k``) are
    refused, not ignored: one image explains one ``target``.

    Args:
        model: What :func:`explain_files` takes, or a :class:`guidedbp.Explainer`
            (reused as it is: build one once to explain many images in a notebook; its
            method options are its own, so others given here are refused, and
            ``methods`` may only choose some of its methods).
        path: The image file.
        target: ``None`` (top-1), a class index or a class name.
        methods: Method names; ``None``: ``options``' (default ``guided``).
        options: :class:`~guidedbp.pipeline.options.RunOptions`, as
            :func:`explain_files` takes.
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
        loaded = _loaded(model, load)
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
