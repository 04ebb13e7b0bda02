"""A run's targets checked against the model and resolved: the plan every stage reads.

:func:`plan_targets` checks what a run's options ask of the model (its targets, parsed
by :mod:`guidedbp.pipeline.target_specs`, and the output it reads, chosen by
:mod:`guidedbp.pipeline.model_outputs`) before any input is read, and resolves them into
a :class:`TargetPlan` of :class:`PlannedTarget` records; :func:`describe` names an
explained target as panels, figures and the manifest show it.

>>> ranked_target(1, ["square", "circle"]).slug
'1-circle'
"""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass

from guidedbp._text import plural
from guidedbp.errors import ArgumentError
from guidedbp.io import store
from guidedbp.models.labels import resolve_class
from guidedbp.pipeline.boxes import Box
from guidedbp.pipeline.model_outputs import ModelOutput, select_output, shape_text
from guidedbp.pipeline.naming import class_slug, target_slug
from guidedbp.pipeline.target_specs import TargetSpec


@dataclass(frozen=True)
class PlannedTarget:
    """One target of a run, resolved against the model (picklable).

    Attributes:
        kind: One of :data:`~guidedbp.pipeline.target_specs.KINDS`.
        spec: The spec as manifests record it (``region:circle``).
        index: A class or region class index, a unit's flat index; ``None`` for
            similarities.
        unit: A unit as given (an int or a tuple), for the engine.
        name: The class name, where the labels give one.
        reference: A similarity's reference image as given.
        reference_path: Its absolute path (workers may run elsewhere).
        reference_sha256: The reference file's digest: a resumed run keys on it.
        slug: The part of its output file names (``unit-2``, ``region-1-circle``).
        box: A detection's :class:`Box` (corners in the pixels of the image file and the
            class as given), or ``None``.
        rank: A detection found by ``detections`` (``det:1``): its rank; else ``None``.
    """

    kind: str
    spec: str
    index: int | None = None
    unit: int | tuple | None = None
    name: str | None = None
    reference: str | None = None
    reference_path: str | None = None
    reference_sha256: str | None = None
    slug: str = ""
    box: Box | None = None
    rank: int | None = None


@dataclass(frozen=True)
class TargetPlan:
    """A run's targets (when it names any, or a model output), checked against the model.

    Attributes:
        targets: The explicit targets, in order; empty: each image's ``top_k`` classes.
        top_k: Classes ranked per image when ``targets`` is empty.
        output: The model output read (``model_output``), ``None`` for the only one.
        shape: That output's shape.
        mask_dir: The region masks' folder (absolute, or a URL), or ``None``.
        named: Whether output file names carry the target.
        notes: What a user should know about how the targets were chosen (one line
            each, in option words): a one-unit output's value explained for want of a
            class (:data:`VALUE_NOTE`).
        detections: Explain each image's best detections, at most this many (``targets``
            empty), or ``None``.
        threshold: The class score from which a proposal is a detection (of a box
            target's box, or found by ``detections``).
    """

    targets: tuple[PlannedTarget, ...]
    top_k: int = 1
    output: str | int | None = None
    shape: tuple = ()
    mask_dir: str | None = None
    named: bool = False
    notes: tuple[str, ...] = ()
    detections: int | None = None
    threshold: float = 0.3

    @property
    def has_regions(self) -> bool:
        return any(target.kind == "region" for target in self.targets)

    def identity(self, target: PlannedTarget, mask: str | None = None,
                 mask_sha256: str | None = None) -> dict:
        """The manifest's ``target`` object of ``target`` (``pixels`` added by the caller),
        whose keys (all but ``pixels``) a resumed run must find unchanged."""
        record = {"spec": target.spec, "kind": target.kind, "output": self.output,
                  "index": target.index, "name": target.name}
        if target.kind == "similar":
            record.update(reference=target.reference,
                          reference_sha256=target.reference_sha256)
        if target.kind == "region" and self.mask_dir is not None:
            record.update(mask=mask, mask_sha256=mask_sha256)
        if target.kind == "box":
            record.update(box=list(target.box.corners), label=target.box.label,
                          threshold=self.threshold)
        if target.kind == "detection":  # what it found is added by the caller
            record.update(rank=target.rank, detections=f"top:{self.detections}",
                          threshold=self.threshold)
        return record


#: Said when a run names no target on an output that is a value: one unit, no sigmoid or
#: softmax head (``Explainer.reads_a_value``).
VALUE_NOTE = ("one output unit with no sigmoid or softmax: explaining its value (unit:0), not "
              "a class; targets=unit:0 says so explicitly")


def plan_targets(options, outputs: tuple[ModelOutput, ...], labels, value: bool = False,
                 text=None) -> TargetPlan | None:
    """Check what a run's :class:`~guidedbp.pipeline.options.ClassOptions` ask of the
    model and resolve its targets; ``None`` for a plain class run (no targets, no model
    output named), which reads the model's one ``(batch, classes)`` output as ever.

    ``value``: the output read is one unit with no sigmoid or softmax head (the engine's
    ``Explainer.reads_a_value``), a value and not a class: a run that names no target
    explains ``unit:0`` (with :data:`VALUE_NOTE`, its files named as a plain run's), and
    a class or ``top_k`` is refused. ``text``: the model's text tower
    (:attr:`~guidedbp.models.loaded.LoadedModel.text`), which ``text:`` prompts need.

    Raises:
        ArgumentError: One line for each combination that cannot mean anything: an
            unknown output, a class target (or ``top_k``) on an output that is no
            ``(batch, classes)``, or on a model with several outputs and none chosen,
            ``top_k`` beside other targets, a class or ``top_k`` of an output that is a
            value, a region on an output that is no
            ``(batch, H', W', classes)``, a unit out of range, a class or region class
            that does not exist, ``mask_dir`` with no region target, a reference image
            that cannot be read, two targets that would write the same files; a text
            prompt on a model with no ``text`` tower (a two-tower model's
            :class:`~guidedbp.models.two_tower.TextTower`) or one it cannot read.
    """
    _check_prompts([spec for spec in options.targets if spec.kind == "text"], text)
    _check_no_class(options, text)
    boxes = [spec for spec in options.targets if spec.kind == "box"]
    if boxes or options.detections:  # explain runs plan them: pipeline.detections
        given = f"targets={boxes[0].text}" if boxes else f"detections=top:{options.detections}"
        raise ArgumentError(f"{given} explains a detector's detections: only explain runs "
                            "take it")
    chosen = select_output(outputs, options.model_output)
    specs = [TargetSpec("class", value, f"class:{value}") for value in options.classes]
    specs += list(options.targets)
    others = [spec for spec in specs if spec.kind != "class"]
    if options.mask_dir is not None and not any(spec.kind == "region" for spec in specs):
        raise ArgumentError(f"mask_dir={options.mask_dir!r} gives masks to region targets: add "
                            "one with targets=region:CLASS")
    if chosen is None and (specs or options.model_output is None):
        raise ArgumentError(f"the model has {plural(len(outputs), 'output')} "
                            f"({', '.join(map(str, outputs))}): choose one with "
                            "model_output=NAME_OR_INDEX")
    where = f"the model's output {chosen.name!r} has shape {shape_text(chosen.shape)}"
    if value:  # one unit, no sigmoid or softmax head: its value is no class
        refused = (f"top_k={options.top_k}" if options.top_k else
                   next((f"classes={spec.value}" if spec.value in options.classes
                         else f"targets={spec.text}" for spec in specs
                         if spec.kind == "class"), None))
        if refused is not None:
            raise ArgumentError(f"{refused}: the model's output {chosen.name!r} has one unit and "
                                "no sigmoid or softmax head: it is a value, not a class; "
                                "explain it with targets=unit:0")
        if not specs:
            return TargetPlan((PlannedTarget("unit", "unit:0", 0, unit=0,
                                             slug=target_slug("unit", 0)),),
                              1, options.model_output, chosen.shape, named=False,
                              notes=(VALUE_NOTE,))
    if options.top_k and others:
        raise ArgumentError(f"top_k={options.top_k} ranks the classes of a (batch, classes) "
                            f"output: it cannot go with targets={others[0].text} ({where})")
    if options.top_k and specs:
        raise ArgumentError(f"top_k={options.top_k} and targets={specs[0].text} cannot be "
                            "used together")
    if not specs and len(chosen.shape) != 2:
        wanted = (f"top_k={options.top_k} ranks the classes of a (batch, classes) output; "
                  if options.top_k else "")
        raise ArgumentError(f"{wanted}{where}: name a target with "
                            f"targets={_fitting(chosen.shape)}")
    if not options.targets and options.model_output is None:
        if specs and len(chosen.shape) != 2:  # a plain class run: its classes, as ever
            raise ArgumentError(f"classes={specs[0].value} needs a (batch, classes) output; "
                                f"{where}: name a target that fits it with "
                                f"targets={_fitting(chosen.shape)}")
        return None
    resolved = tuple(_resolve(spec, chosen, labels, options.classes) for spec in specs)
    _check_unique(resolved)
    mask_dir = None if options.mask_dir is None else _absolute(options.mask_dir)
    return TargetPlan(resolved, options.top_k or 1, options.model_output, chosen.shape,
                      mask_dir, named=bool(resolved or options.top_k))


def _check_no_class(options, text) -> None:
    """Refuse a class (or none named: each image's top class) of a two-tower model (``text``
    its text tower): its image tower gives an embedding, whose values are no classes."""
    if text is None:
        return
    classes = [spec.text for spec in options.targets if spec.kind == "class"]
    given = (f"top_k={options.top_k}" if options.top_k else
             f"classes={options.classes[0]}" if options.classes else
             f"targets={classes[0]}" if classes else None)
    if given is None and options.targets:
        return
    raise ArgumentError((f"{given}: " if given else "")
                        + "the model is a two-tower model (CLIP, SigLIP): its image tower "
                        "gives an embedding, not classes: name a target with "
                        "targets=text:PROMPT (or similar:IMAGE)")


def _check_prompts(specs: list[TargetSpec], text) -> None:
    """Refuse ``text:`` specs that ``text`` (the model's text tower, or ``None``) cannot
    embed: no text tower, no tokenizer, a prompt longer than the text encoder reads."""
    for spec in specs:
        shown = spec.as_target().short_label  # a huge prompt named, not copied whole
        if text is None:
            raise ArgumentError(f"targets={shown} needs a two-tower model (a keras-hub "
                                "CLIPBackbone or SigLIPBackbone, e.g. its preset folder); this "
                                "model has no text tower")
        try:
            text.check([spec.value])
        except ArgumentError as error:
            raise ArgumentError(f"targets={shown}: {error}") from None


def _absolute(path: str) -> str:
    """A local path made absolute; an object-store URL as it is (``s3://b/masks`` is no
    folder ``s3:`` of the working directory)."""
    return path if store.is_url(path) else os.path.abspath(path)


def _fitting(shape: tuple) -> str:
    """The target forms that fit an output of ``shape`` (not a classifier's)."""
    return "region:CLASS, unit:I or similar:IMAGE" if len(shape) == 4 else \
        "unit:I or similar:IMAGE"


def _count(side) -> int | None:
    return None if side is None else int(side)


def _resolve(spec: TargetSpec, output: ModelOutput, labels, classes: tuple) -> PlannedTarget:
    """One spec checked against ``output`` and resolved."""
    shape = output.shape
    where = f"the model's output {output.name!r} has shape {shape_text(shape)}"
    given = (f"classes={spec.value}" if spec.kind == "class" and spec.value in classes
             else f"targets={spec.text}")
    if spec.kind == "class":
        if len(shape) != 2:
            raise ArgumentError(f"{given} needs a (batch, classes) output; {where}: name a "
                                f"target that fits it with targets={_fitting(shape)}")
        count = _count(shape[-1])
        index = _class_index(spec, labels, 2 if count == 1 else count, given)
        name = labels[index] if labels is not None and index < len(labels) else None
        return PlannedTarget("class", spec.text, index, name=name,
                             slug=class_slug(index, labels))
    if spec.kind == "region":
        if len(shape) != 4:
            raise ArgumentError(f"{given} needs an output of shape (batch, H', W', classes); "
                                f"{where}")
        index = _class_index(spec, labels, _count(shape[-1]), given)
        name = labels[index] if labels is not None and index < len(labels) else None
        return PlannedTarget("region", spec.text, index, name=name,
                             slug=target_slug("region", index, name))
    if spec.kind == "unit":
        flat = _flat_unit(spec, shape, where, given)
        return PlannedTarget("unit", spec.text, flat, unit=spec.value,
                             slug=target_slug("unit", spec.value))
    if spec.kind == "text":
        return PlannedTarget("text", spec.text, slug=target_slug("text", spec.value))
    path = _absolute(spec.value)
    return PlannedTarget("similar", spec.text, None, reference=spec.value, reference_path=path,
                         reference_sha256=_reference_digest(path, given),
                         slug=target_slug("similar", os.path.basename(spec.value)))


def _class_index(spec: TargetSpec, labels, count: int | None, given: str) -> int:
    try:
        return resolve_class(spec.value, labels, count or 2**31 - 1)
    except ValueError as error:
        raise ArgumentError(f"{given}: {error}") from None


def _flat_unit(spec: TargetSpec, shape: tuple, where: str, given: str) -> int:
    """A unit's flat index into the output's non-batch axes (C order), checked."""
    axes = shape[1:]
    index = spec.value if isinstance(spec.value, tuple) else None
    if index is not None and len(index) != len(axes):
        raise ArgumentError(f"{given} gives {plural(len(index), 'index', 'indices')}; {where}: "
                            f"{plural(len(axes), 'axis', 'axes')} after the batch")
    if any(side is None for side in axes):
        return spec.value if index is None else -1  # free axes: the engine checks
    if index is None:
        size = math.prod(axes)
        if spec.value >= size:
            raise ArgumentError(f"{given} is out of range: {where}, "
                                f"{plural(size, 'unit')} (0..{size - 1})")
        return spec.value
    for position, (value, side) in enumerate(zip(index, axes)):
        if value >= side:
            raise ArgumentError(f"{given} is out of range: {where}, {side} along axis "
                                f"{position + 1} (0..{side - 1})")
    flat = 0
    for value, side in zip(index, axes):
        flat = flat * side + value
    return flat


def _reference_digest(path: str, given: str) -> str:
    """The reference file's SHA-256 (16 hex digits); one line when it cannot be read."""
    from guidedbp.io.images import ImageError, decode_image

    try:
        decode_image(path, channels=3)
        return file_digest(path)
    except ImageError as error:
        raise ArgumentError(f"{given}: {error.reason}") from None
    except OSError as error:
        raise ArgumentError(f"{given}: cannot read it ({error.strerror or error})") from None


def file_digest(path: str) -> str:
    """The first 16 hex digits of a file's SHA-256."""
    digest = hashlib.sha256()
    if store.is_url(path):
        digest.update(store.read_bytes(path))
        return digest.hexdigest()[:16]
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def _check_unique(targets: tuple[PlannedTarget, ...]) -> None:
    """Refuse a target listed twice, or two whose files would share a name."""
    listed: dict[tuple, PlannedTarget] = {}
    named: dict[str, PlannedTarget] = {}
    for target in targets:
        key = (target.kind, target.index, target.unit, target.reference_path,
               target.spec if target.kind == "text" else None)
        if key in listed:
            raise ArgumentError(f"targets={target.spec} is listed twice (as "
                                f"{listed[key].spec})")
        clash = named.get(target.slug.casefold())
        if clash is not None:
            raise ArgumentError(f"targets={clash.spec} and targets={target.spec} would write "
                                f"the same files (.{target.slug}.*): "
                                + ("their prompts differ only in letter case or punctuation"
                                   if target.kind == "text" else
                                   "give the references different file names"))
        listed[key], named[target.slug.casefold()] = target, target


def ranked_target(index: int, labels) -> PlannedTarget:
    """The target of a class found by rank (each image's top one, or top k)."""
    name = labels[index] if labels is not None and index < len(labels) else None
    return PlannedTarget("class", f"class:{index}", index, name=name,
                         slug=class_slug(index, labels))


def describe(target: PlannedTarget, value: float, probability: float,
             pixels: int | None = None) -> str:
    """How panels, figures and the manifest name an explained target:
    ``class:3 tabby p=0.912``, ``unit:2 = 0.73``, ``region:circle (1,234 px)``,
    ``similar:ref.jpg = 0.91``.

    >>> describe(PlannedTarget("region", "region:1", 1, name="circle"), 3.5, 0.8, 1234)
    'region:circle (1,234 px)'
    >>> describe(PlannedTarget("unit", "unit:2", 2), 0.7304, float("nan"))
    'unit:2 = 0.73'
    """
    if target.kind == "class":
        name = f" {target.name}" if target.name else ""
        return f"class:{target.index}{name} p={probability:.3f}"
    if target.kind == "region":
        return f"region:{target.name or target.index} ({pixels or 0:,} px)"
    if target.kind == "similar":
        return f"similar:{os.path.basename(target.reference)} = {short_number(value)}"
    return f"{target.spec} = {short_number(value)}"


def short_number(value: float) -> str:
    """A score as a person reads it: three significant digits, whole numbers from 1,000.

    >>> short_number(0.7304), short_number(-12.345), short_number(123456.7), short_number(0.0)
    ('0.73', '-12.3', '123,457', '0')
    """
    if not math.isfinite(value):
        return str(value)
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}" if value else "0"
