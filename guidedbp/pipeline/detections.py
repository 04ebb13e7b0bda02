"""A detector's detections as an explain run's targets: ``box:`` specs and ``detections``.

``targets=box:X0,Y0,X1,Y1[:C]`` explains the detection of a box given in the pixels of
each input's image file; ``detections=K`` (``--detections top:K``) the K best detections
the model finds on each clean image (:meth:`guidedbp.engine.explainer.Explainer.detect`),
one set of maps each, named ``STEM.det-1-circle.*`` (rank, then class name or index).

:func:`plan_detections` checks them against the detector before any input is read;
:func:`input_boxes` maps an input's boxes through its resizing
(:meth:`~guidedbp.models.resizing.Placement.box_to_input`), failing that input alone
when a box lies outside it; :func:`engine_box` and :func:`ranked` make what the engine
explains and what the files and manifest name; :func:`describe_detection` and
:func:`detection_record` say what was found.

>>> box_slug(Box((10.0, 20.0, 40.5, 60.0)), None, None)
'box-10-20-40.5-60'
>>> ranked_slug(1, 2, "big circle"), ranked_slug(3, 0, None)
('det-1-big-circle', 'det-3-0')
"""

from __future__ import annotations

import hashlib
import re

import numpy as np

from guidedbp._text import plural
from guidedbp.errors import ArgumentError
from guidedbp.models.labels import resolve_class
from guidedbp.pipeline.boxes import Box, coordinate
from guidedbp.pipeline.model_outputs import ModelOutput
from guidedbp.pipeline.target_plan import PlannedTarget, TargetPlan
from guidedbp.targets import Detection

#: The longest file-name part of a box target (what an output name keeps room for).
MAX_SLUG = 64
#: What a detection target's pictures draw, said after their caption.
BOX_LEGEND = "(white box: the target; dashed magenta: the proposal it matched)"


class BoxOutside(ValueError):
    """A box target that lies wholly outside one input (or the part the model sees): that
    input fails with the message."""


def _name_slug(name: str | None) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", name or "").strip("-").lower()[:48].strip("-")


def box_slug(box: Box, index: int | None, name: str | None) -> str:
    """The file-name part of a ``box:`` target: ``box-10-20-40-60``, then its class
    (``-1-circle``, ``-1`` without names) where it names one; one longer than
    :data:`MAX_SLUG` characters cut, its digest after (as a long input name is).

    >>> box_slug(Box((0.125, 0.25, 999999.5, 999999.75)), 7, "a" * 40)
    'box-0.125-0.25-999999.5-999999.75-7-aaaaaaaaaaaaaaa~5e88e0531c37'
    """
    slug = "box-" + "-".join(coordinate(value) for value in box.corners)
    if index is not None:
        named = _name_slug(name)
        slug = f"{slug}-{index}-{named}" if named else f"{slug}-{index}"
    if len(slug) <= MAX_SLUG:
        return slug
    digest = hashlib.sha256(slug.encode()).hexdigest()[:12]
    return f"{slug[: MAX_SLUG - 13].rstrip('-')}~{digest}"


def ranked_slug(rank: int, index: int, name: str | None) -> str:
    """The file-name part of an image's ``rank``-th detection: ``det-1-circle`` (the class
    name), or ``det-1-2`` (its index) without names."""
    return f"det-{rank}-{_name_slug(name) or index}"


def plan_detections(options, outputs: tuple[ModelOutput, ...], labels, detector,
                    reason: str | None = None) -> TargetPlan:
    """Check a run's ``box:`` targets and ``detections`` against the model and resolve them.

    Args:
        options: The run's :class:`~guidedbp.pipeline.options.ClassOptions`.
        outputs: The model's outputs (what the message lists for a model that is no
            detector).
        labels: The class names, or ``None``.
        detector: The engine's :class:`~guidedbp.engine.targets.detect.DetectorInfo`, or ``None``
            for a model that is no detector.
        reason: Why it is none, from the engine.

    Raises:
        ArgumentError: One line: a model that is no detector (or a degenerate one: no
            proposal, or every one inverted), a box target beside targets of other kinds,
            a class out of range or unknown, a box listed twice.
    """
    boxes = [spec for spec in options.targets if spec.kind == "box"]
    given = f"targets={boxes[0].text}" if boxes else f"detections=top:{options.detections}"
    if detector is None:
        listed = ", ".join(map(str, outputs))
        why = f" ({reason})" if reason and "count different" in reason else ""
        raise ArgumentError(f"{given} needs a detector, a model with a boxes output (batch, "
                            "proposals, 4) and a class scores output (batch, proposals, "
                            f"classes); the model's outputs are {listed}{why}")
    if detector.degenerate is not None:
        raise ArgumentError(f"{given}: no detection of this model can be explained: "
                            f"{detector.degenerate}")
    others = [spec for spec in options.targets if spec.kind != "box"]
    if others or options.classes or options.top_k:
        other = (f"targets={others[0].text}" if others else f"top_k={options.top_k}"
                 if options.top_k else f"classes={options.classes[0]}")
        raise ArgumentError(f"{given} explains a detector's detection: it cannot go with "
                            f"{other}")
    planned = []
    seen: dict[str, str] = {}
    for spec in boxes:
        index, name = None, None
        if spec.value.label is not None:
            try:
                index = resolve_class(spec.value.label, labels, detector.classes or 2**31 - 1)
            except ValueError as error:
                raise ArgumentError(f"targets={spec.text}: {error}") from None
            name = labels[index] if labels is not None and index < len(labels) else None
        slug = box_slug(spec.value, index, name)
        if slug.casefold() in seen:
            raise ArgumentError(f"targets={spec.text} is listed twice (as "
                                f"{seen[slug.casefold()]})")
        seen[slug.casefold()] = spec.text
        planned.append(PlannedTarget("box", spec.text, index, name=name, slug=slug,
                                     box=spec.value))
    return TargetPlan(tuple(planned), 1, options.model_output, (), named=True,
                      detections=options.detections, threshold=options.detection_threshold)


def has_boxes(plan) -> bool:
    """Whether a run's :class:`~guidedbp.pipeline.stages.Plan` has ``box:`` targets."""
    return plan.targets is not None and any(t.kind == "box" for t in plan.targets.targets)


def input_boxes(targets: tuple[PlannedTarget, ...], placement) -> dict[str, np.ndarray]:
    """Each ``box:`` target's box on one input's model input: spec -> float64 corners
    ``(x0, y0, x1, y1)``, through ``placement`` (how the image was fitted).

    Raises:
        BoxOutside: A box wholly outside the image, or outside the part of it the model
            sees (``crop`` cuts its sides).
    """
    found = {}
    height, width = placement.original_size
    for target in targets:
        if target.kind != "box":
            continue
        x0, y0, x1, y1 = target.box.corners
        if x1 <= 0 or y1 <= 0 or x0 >= width or y0 >= height:
            raise BoxOutside(f"{target.spec} lies outside the {width}x{height} image")
        corners = placement.box_to_input(target.box.corners)
        size_h, size_w = placement.size
        if corners[2] <= 0 or corners[3] <= 0 or corners[0] >= size_w or corners[1] >= size_h:
            raise BoxOutside(f"{target.spec} lies outside the part of the {width}x{height} "
                             f"image the model sees ({placement.mode} to {size_w}x{size_h} "
                             "keeps its centre)")
        found[target.spec] = corners
    return found


class SpecDetection(Detection):
    """A :class:`~guidedbp.targets.Detection` labelled by the run's spec
    (``box:10,20,40,60``, ``det:1``), which the engine's caveats name: its boxes are each
    image's, in the model input's pixels, which no label of their own would say."""

    def __init__(self, box, spec: str, **fields):
        super().__init__(box, **fields)
        object.__setattr__(self, "spec", spec)

    @property
    def label(self) -> str:
        return self.spec


def engine_box(target: PlannedTarget, boxes: np.ndarray, plan: TargetPlan) -> SpecDetection:
    """What the engine explains for a ``box:`` target: a
    :class:`~guidedbp.targets.Detection` of each image's box ``boxes`` ``(N, 4)`` (model
    input pixels)."""
    return SpecDetection(boxes, target.spec, label=target.index, threshold=plan.threshold,
                         output=plan.output)


def engine_ranked(found, rank: int, plan: TargetPlan) -> SpecDetection:
    """What the engine explains for an image's ``rank``-th detection (``found``, one
    image's :class:`~guidedbp.engine.targets.detect.Detected`): its box and class."""
    row = rank - 1
    return SpecDetection(found.boxes[row], f"det:{rank}", label=int(found.labels[row]),
                         threshold=plan.threshold, output=plan.output)


def ranked(found, placement, labels) -> list[PlannedTarget]:
    """One image's detections (:class:`~guidedbp.engine.targets.detect.Detected`, best first) as
    the run's targets: ``det:1``, ``det:2``... with their class and their box in the
    image file's pixels."""
    planned = []
    for row in range(len(found)):
        index = int(found.labels[row])
        name = labels[index] if labels is not None and index < len(labels) else None
        corners = tuple(float(v) for v in placement.box_to_original(found.boxes[row]))
        planned.append(PlannedTarget("detection", f"det:{row + 1}", index, name=name,
                                     slug=ranked_slug(row + 1, index, name),
                                     box=Box(corners, index), rank=row + 1))
    return planned


def describe_detection(planned: PlannedTarget, label: int, score: float, overlap: float,
                       labels) -> str:
    """How panels, the report and the manifest name an explained detection:
    ``box:10,20,40,60 matched circle p=0.912, IoU 0.83``, ``det:1 circle p=0.912, IoU
    1.00`` (the class score and IoU of the proposal it matched on the clean image).

    >>> target = PlannedTarget("box", "box:1,2,5,6", slug="box-1-2-5-6")
    >>> describe_detection(target, 1, 0.91234, 0.8, ["square", "circle"])
    'box:1,2,5,6 matched circle p=0.912, IoU 0.80'
    """
    name = labels[label] if labels is not None and 0 <= label < len(labels) else \
        f"class {label}"
    found = f"{name} p={score:.3f}, IoU {overlap:.2f}"
    return f"{planned.spec} matched {found}" if planned.kind == "box" else \
        f"{planned.spec} {found}"


def _corners(values) -> list[float]:
    return [round(float(value), 3) for value in values]


def detection_record(planned: PlannedTarget, target_box: np.ndarray, matched: np.ndarray,
                     placement) -> dict:
    """What a detection target's manifest ``target`` adds to its identity: its box on the
    model's input (``box_input``), and ``matched``: the proposal it matched on the clean
    image, its box in the image file's pixels and on the model's input, its IoU with the
    target box and its class score. A ranked detection's box and class are its own."""
    record = {"box_input": _corners(target_box)}
    if planned.kind == "detection":
        record.update(box=_corners(planned.box.corners))
    record["matched"] = {"box": _corners(placement.box_to_original(matched[:4])),
                         "box_input": _corners(matched[:4]),
                         "iou": round(float(matched[4]), 6), "score": round(float(matched[5]), 6)}
    return record


def fewer_phrase(fewer: int, none: int, top: int, threshold: float) -> str:
    """The summary's words for the inputs with fewer than ``top`` detections (``fewer``,
    of which ``none`` have none) above ``threshold``.

    >>> fewer_phrase(3, 1, 5, 0.3)
    '3 inputs with fewer than 5 detections above 0.3 (1 with none)'
    """
    text = f"{plural(fewer, 'input')} with fewer than {top} detections above {threshold:g}"
    return text + (f" ({none} with none)" if none else "")


def same_ranked(plan, targets: list[dict], record: dict) -> list | None:
    """Resuming a ``detections`` run: the slug of each of an earlier record's targets when
    it was made with the same ``detections`` and threshold (its detections are the
    model's, compared by ``made_by``), else ``None``."""
    wanted = plan.targets
    found = record.get("detections")
    if not isinstance(found, dict) or found.get("top") != wanted.detections \
            or found.get("threshold") != wanted.threshold \
            or found.get("found") != len(targets) or len(targets) > wanted.detections:
        return None
    slugs = []
    for rank, target in enumerate(targets, 1):
        identity = target.get("target")
        if not isinstance(identity, dict) or identity.get("kind") != "detection" \
                or identity.get("spec") != f"det:{rank}" \
                or identity.get("detections") != f"top:{wanted.detections}" \
                or identity.get("threshold") != wanted.threshold \
                or identity.get("output") != wanted.output:
            return None
        index = identity.get("index")
        if isinstance(index, bool) or not isinstance(index, int):
            return None
        labels = plan.feed.labels
        name = labels[index] if labels is not None and index < len(labels) else None
        if identity.get("name") != name:
            return None
        slugs.append(ranked_slug(rank, index, name))
    return slugs


__all__ = ["BOX_LEGEND", "BoxOutside", "box_slug", "describe_detection", "detection_record",
           "engine_box", "engine_ranked", "fewer_phrase", "has_boxes", "input_boxes",
           "plan_detections", "ranked", "ranked_slug", "same_ranked", "SpecDetection"]


def detection_layers(explainer, image_shape: tuple, output=None) -> dict[str, str]:
    """Each class activation map's layer, by method, for a detection of ``output`` on
    images of ``image_shape``."""
    from guidedbp.targets import Detection

    probe = Detection((0.0, 0.0, 1.0, 1.0), label=0, output=output)
    return dict(explainer.report_for(image_shape, [probe]).cam_layers)
