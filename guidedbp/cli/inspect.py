"""``guidedbp inspect MODEL``: what a user needs to know before trusting a map."""

from __future__ import annotations

import contextlib
import sys

import click

from guidedbp._json import dumps as strict_json
from guidedbp._text import one_line, shown_name
from guidedbp.cli.exits import as_flags, errors_handled
from guidedbp.cli.flags import load_options, model_options
from guidedbp.cli.process import import_tensorflow

#: Class names listed in full up to this many; beyond, the first and last CLASS_ENDS.
CLASS_LINES = 20
CLASS_ENDS = 5


@click.command("inspect")
@click.argument("model")
@model_options
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object instead of text (it holds every class name).")
@click.option("--layer", metavar="NAME",
              help="Check the layer NAME that class activation maps (Grad-CAM and its kin) "
                   "would use, as explain's --layer takes it. Default: show the layer they "
                   "use by default.")
@click.option("--classes", "all_classes", is_flag=True,
              help=f"List every class name (by default, more than {CLASS_LINES} are "
                   f"summarised: their count, the first and the last {CLASS_ENDS}).")
@errors_handled
def inspect_command(model: str, as_json: bool, all_classes: bool, **options) -> None:
    """Show how guidedbp sees MODEL: input, outputs, classes, head, preprocessing, guided ops.

    Each output is described by its name, shape and head activation, with the targets
    that fit it (--target class:C, unit:I, region:C, similar:IMAGE; a score function in
    the Python API).

    Exit codes: 0 success, 2 when the model cannot be loaded.
    """
    from guidedbp.models.loading import check_model_path

    check_model_path(model)  # before TensorFlow is imported: in milliseconds
    import_tensorflow(options["debug"])
    # Keras prints download progress to stdout; stdout is for the description alone.
    with contextlib.redirect_stdout(sys.stderr):
        info = describe(model, options)
    if as_json:
        click.echo(strict_json(info, indent=2))
        return
    click.echo(format_description(info, all_classes=all_classes))


def describe(spec: str, options: dict) -> dict:
    """Everything `inspect` shows, as a JSON-ready dict."""
    import warnings

    from guidedbp.models.loading import load_model

    loaded = load_model(spec, **load_options(options))
    from guidedbp.api import Explainer
    from guidedbp.engine.explainer import NoReluWarning
    from guidedbp.errors import ArgumentError

    layer = options.get("layer")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NoReluWarning)  # reported below, not warned
        try:  # one trace tells both: what is guided, and the class activation maps' layer
            explainer = Explainer(loaded, ("guided", "gradcam"), layer=layer)
            report = explainer.report
            no_cam = None
        except ArgumentError as error:
            if layer is not None:  # the layer asked for: its error is the answer
                raise
            explainer = Explainer(loaded, "guided")  # a model with no feature map (an MLP)
            report = explainer.report
            no_cam = one_line(error)
        value = explainer.reads_a_value()  # one unit, no sigmoid or softmax: not a class
    size = options.get("size")
    height, width, channels = loaded.input_shape
    if height is None or width is None:
        chosen = "%dx%d" % size if size else "each image keeps its own size"
        fitting = f"free spatial size: {chosen}"
    else:
        fitting = f"{options.get('resize', 'stretch')} to {height}x{width}"
    ctx = click.get_current_context(silent=True)  # notes in the command's own words
    notes = list(loaded.notes)
    if report.num_guided == 0:
        notes.append("no activation to guide: guided backprop equals the plain gradient for "
                     "this model")
    from guidedbp.engine import layer_choices
    from guidedbp.models.outputs import model_outputs

    fed = (height, width) if height is not None and width is not None else size or (None, None)
    outputs = model_outputs(loaded.model, (*fed, channels))
    counts = sorted({output.classes for output in outputs if output.classes})
    if loaded.labels is not None and counts and len(loaded.labels) not in counts:
        notes.append(f"{len(loaded.labels)} labels for "
                     f"{' or '.join(map(str, counts))} classes")
    detector = _detector(explainer, (*fed, channels))
    layers = layer_choices(loaded.model, (*fed, channels))
    # Listed for a model with token layers (a vision transformer), 4-D ones beside them.
    cam_layers = {"4-D": layers.maps, "tokens": layers.tokens} if layers.tokens else None
    return {
        "model": loaded.source,
        "format": loaded.format,
        "input_shape": [height, width, channels],
        "input_dtype": loaded.input_dtype,
        "outputs": [output.as_dict() for output in outputs],
        "classes": report.num_classes,
        "head_bypassed": report.head,
        # What explain reads with no --target: each image's top class, the value of a
        # one-unit output with no sigmoid or softmax, or nothing (a target must be named).
        "default_target": "unit:0" if value else "class" if report.num_classes else None,
        "preprocess": loaded.preprocess,
        "preprocess_source": as_flags(loaded.preprocess_source, ctx),
        "resize": fitting,
        "guide": report.guide,
        "guided_activations": report.guided_activations,
        "plain_activations": report.plain_activations,
        "unreached_activations": report.unreached_activations,
        # The layer explain's class activation maps use (the default, or --layer's),
        # named as --layer takes it; None, with why, for a model that has none.
        "cam_layer": _cam_layer(explainer, report, detector, (*fed, channels)),
        **({"cam_layer_error": as_flags(no_cam, ctx)} if no_cam else {}),
        **({"cam_layers": cam_layers} if cam_layers else {}),
        # How a box: target or --detections reads the model, or None: no detector.
        "detector": detector,
        # A two-tower model's text tower (text:PROMPT targets), or None.
        "text_tower": None if loaded.text is None else {
            "tokenizer": None if loaded.text.tokenize is None else loaded.text.tokenizer_source,
            "sequence_length": loaded.text.sequence_length,
            "logit_scale": loaded.text.logit_scale},
        "labels_source": loaded.labels_source,
        "labels": loaded.labels,
        "notes": [as_flags(note, ctx) for note in notes],
    }


def _cam_layer(explainer, report, detector, image_shape: tuple) -> str | None:
    """The layer explain's class activation maps use: a detection's (the last feature map
    its proposals share) for a detector of a known input size, else the report's."""
    layer = report.cam_layers.get("gradcam")
    if layer is None or detector is None or None in image_shape[:2]:
        return layer
    from guidedbp.pipeline.detections import detection_layers

    return detection_layers(explainer, tuple(image_shape)).get("gradcam", layer)


def _detector(explainer, image_shape: tuple) -> dict | None:
    """What a Detection target reads of the model (its boxes and class scores outputs,
    proposals and classes), or ``None`` for a model that is no detector."""
    import dataclasses

    from guidedbp.engine.targets.detect import NotADetector

    try:
        return dataclasses.asdict(explainer.detector(image_shape))
    except NotADetector:
        return None


def detector_line(detector: dict) -> str:
    """``inspect``'s words for a detector.

    >>> detector_line({"kind": "boxes", "boxes": "boxes", "scores": "scores",
    ...                "proposals": 16, "classes": 2})
    "boxes 'boxes', class scores 'scores': 16 proposals of 2 classes; explain one with \
--target box:X0,Y0,X1,Y1[:C] (its corners in the image's pixels) or --detections top:K"
    """
    kind = {"retinanet": "keras-hub RetinaNet: ", "d-fine": "keras-hub D-FINE: "}.get(
        detector["kind"], "")
    proposals = detector["proposals"] if detector["proposals"] is not None else "?"
    classes = detector["classes"] if detector["classes"] is not None else "?"
    found = (f"{kind}boxes {detector['boxes']!r}, class scores {detector['scores']!r}: "
             f"{proposals} proposals of {classes} classes; ")
    if detector.get("degenerate"):
        return found + f"no detection can be explained: {detector['degenerate']}"
    return found + ("explain one with --target box:X0,Y0,X1,Y1[:C] (its corners in the "
                    "image's pixels) or --detections top:K")


def text_tower_line(tower: dict) -> str:
    """``inspect``'s words for a two-tower model's text tower.

    >>> text_tower_line({"tokenizer": "DIR", "sequence_length": 77, "logit_scale": 100.0})
    'prompts of 77 tokens at most (tokenizer: DIR), logit scale 100; explain one with \
--target text:PROMPT'
    """
    if tower["tokenizer"] is None:
        return ("no tokenizer: --target text:PROMPT needs the model as a keras-hub preset "
                "folder holding its tokenizer")
    length = tower["sequence_length"] or "?"
    scale = tower["logit_scale"]
    return (f"prompts of {length} tokens at most (tokenizer: {tower['tokenizer']}), logit "
            f"scale {'none' if scale is None else f'{scale:.3g}'}; explain one with --target "
            "text:PROMPT")


def format_description(info: dict, all_classes: bool = False) -> str:
    """The text description; more than ``CLASS_LINES`` class names are summarised unless
    ``all_classes``."""
    def shape(dims):
        return "x".join("?" if d is None else str(d) for d in dims)

    def output_shape(dims):
        sides = ["batch", *("?" if d is None else str(d) for d in dims[1:])]
        return f"({', '.join(sides)})"

    from guidedbp.engine import format_counts as counts
    from guidedbp.models.outputs import OutputInfo

    head = info["head_bypassed"]
    lines = [
        ("model", f"{shown_name(info['model'])} ({info['format']})"),
        ("input", f"{shape(info['input_shape'])} {info['input_dtype']} (HxWxC)"),
    ]
    for output in info["outputs"]:
        described = OutputInfo(output["name"], tuple(output["shape"]), output["head"])
        lines.append(("output", f"{shown_name(output['name'])} {output_shape(output['shape'])}, "
                                f"{output['head'] or 'no'} head: "
                                f"{described.describe_targets()}"))
    if info.get("detector"):
        lines.append(("detector", detector_line(info["detector"])))
    if info.get("text_tower"):
        lines.append(("text tower", text_tower_line(info["text_tower"])))
    if info["classes"]:  # a classifier: what a class target explains
        lines += [
            ("classes", str(info["classes"])),
            ("head", f"{head} bypassed: maps explain the logit" if head
             else "none: output is a logit"),
        ]
    one_unit = [output["shape"] for output in info["outputs"]] == [[None, 1]]
    if info.get("default_target") == "unit:0":
        lines.append(("target", "unit:0 when none is given: one output unit with no sigmoid "
                                "or softmax is a value, not a class"))
    elif info.get("default_target") == "class" and one_unit:
        lines.append(("target", f"the top class when none is given: a binary classifier (one "
                                f"logit z behind a {head}: class 1 scores z, class 0 scores "
                                "-z)"))
    lines += [
        ("preprocess", f"{info['preprocess']} ({info['preprocess_source']})"),
        ("resize", info["resize"]),
        ("guided", f"{counts(info['guided_activations'])} (--guide {info['guide']})"),
        ("left alone", counts(info["plain_activations"]) + (
            f" (inside functions, out of the rules' reach: "
            f"{counts(info['unreached_activations'])})"
            if info.get("unreached_activations") else "")),
    ]
    lines.append(("cam layer", info["cam_layer"] or f"none: {info.get('cam_layer_error')}"))
    if "cam_layers" in info:  # a transformer's token layers, the --layer a CAM may take
        lines.append(("cam layers", "; ".join(
            f"{kind}: {', '.join(names)}" for kind, names in info["cam_layers"].items() if names)))
    lines.append(("labels", info["labels_source"]))
    lines += [("note", note) for note in info["notes"]]
    text = "\n".join(f"{key:<11} {value}" for key, value in lines)
    labels = info["labels"]
    if labels:
        rows = [f"  {index:>4}  {shown_name(name)}" for index, name in enumerate(labels)]
        if all_classes or len(rows) <= CLASS_LINES:
            text += "\nclass names:\n" + "\n".join(rows)
        else:
            skipped = len(rows) - 2 * CLASS_ENDS
            text += (f"\nclass names ({len(rows)}; --classes lists them all):\n"
                     + "\n".join([*rows[:CLASS_ENDS], f"  ... {skipped} more ...",
                                   *rows[-CLASS_ENDS:]]))
    return text
