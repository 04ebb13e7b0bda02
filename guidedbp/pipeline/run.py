"""The pipeline as a library: explain files into a folder.

:func:`explain_files` is exactly what ``guidedbp explain`` runs (the command only
parses flags and prints the summary), so both write the same files byte for byte.
:func:`~guidedbp.pipeline.one_image.explain_image` decodes and preprocesses one file as
the command does and returns the maps together with the picture, for a notebook.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Sequence

from guidedbp._text import plural
from guidedbp.api import Explainer
from guidedbp.engine.targets.detect import NotADetector
from guidedbp.errors import ArgumentError, GuidedbpError
from guidedbp.io import store
from guidedbp.io.manifest import read_earlier
from guidedbp.io.report import write_report
from guidedbp.models.labels import resolve_class
from guidedbp.models.loading import LoadedModel, load_model
from guidedbp.pipeline.detections import detection_layers, plan_detections
from guidedbp.pipeline.family import claim_output
from guidedbp.pipeline.fingerprint import made_by
from guidedbp.pipeline.local import run_local
from guidedbp.pipeline.model_outputs import model_outputs, select_output
from guidedbp.pipeline.options import DEFAULT_OUTPUT, RunOptions
from guidedbp.pipeline.preflight import (  # noqa: F401 (NoImagesError: guidedbp's)
    CheckedRun,
    NoImagesError,
    check_output,
    check_run,
    remove_created,
)
from guidedbp.pipeline.resume import Resumed, carried_over, earlier_outputs
from guidedbp.pipeline.stages import Feed, Plan, Summary
from guidedbp.pipeline.target_plan import TargetPlan, plan_targets
from guidedbp.pipeline.target_specs import DETECTION_KINDS
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
            (:func:`~guidedbp.pipeline.target_plan.plan_targets`), batches that cannot fit in
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


def loaded_model(model, load: dict | None) -> LoadedModel:
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
        loaded = loaded_model(model, load)
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
