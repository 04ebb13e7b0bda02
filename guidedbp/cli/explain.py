"""``guidedbp explain MODEL INPUT...``: saliency maps for images and whole folders.

The command parses flags into :class:`~guidedbp.pipeline.options.RunOptions` and
runs :func:`guidedbp.explain_files`, the same function the library offers; flags
take their defaults and choices from those options.
"""

from __future__ import annotations

import dataclasses
import os
import sys

import click

from guidedbp._extras import install, needs
from guidedbp._text import one_line, plural, shown_name
from guidedbp.cli.exits import UsageFailure, errors_handled
from guidedbp.cli.flags import (
    Choice,
    FolderOrURL,
    GroupedCommand,
    batch_size_option,
    complete_comma_list,
    described_method_names,
    field_option,
    load_options,
    method_flags,
    model_options,
    parse_comma_list,
    parse_run_methods,
)
from guidedbp.cli.numbers import Number, Whole
from guidedbp.cli.process import import_tensorflow
from guidedbp.cli.progress import Progress, show_progress
from guidedbp.cli.target_options import (
    DETECTIONS_HELP,
    TARGET_HELP,
    complete_target,
    parse_detections,
    parse_targets,
)
from guidedbp.engine.methods.registry import METHODS, REGISTRY
from guidedbp.engine.options import (
    BASELINES,
    MAX_SMOOTH,
    MAX_STEPS,
    STATISTIC_COPIES,
    UPSAMPLING,
    BlackBoxOptions,
)
from guidedbp.io.made_by import REASONS
from guidedbp.pipeline.detections import fewer_phrase
from guidedbp.pipeline.options import DEFAULT_OUTPUT, MAX_CLASSES, MAX_DPI, MIN_DPI, RunOptions
from guidedbp.pipeline.preflight import hidden_phrase
from guidedbp.plot import FIGURE_FORMATS
from guidedbp.render import COLORMAPS, MAX_TILE, MIN_TILE, RENDERS
from guidedbp.render.options import OUTPUT_SIZES

#: The black-box methods' flags (rise, drise, kernelshap, lime, sobol): a --help group of
#: their own.
BLACKBOX_FLAGS = [spec.name for spec in dataclasses.fields(BlackBoxOptions)]

#: --help's option groups, by parameter name.
OPTION_GROUPS = [
    ("Methods", ["methods", *(name for name in dict.fromkeys([
        "layer", "upsample", "smooth", "noise", "seed", "steps", "baseline",
        *described_method_names()])  # precision: with batch_size
        if name not in ("precision", *BLACKBOX_FLAGS))]),
    ("Black-box methods", BLACKBOX_FLAGS),
    ("Classes", ["classes", "top_k"]),
    ("Targets", ["targets", "model_output", "mask_dir", "detections", "detection_threshold"]),
    ("Rendering", ["renders", "output_size", "cmap", "clip", "alpha", "tile"]),
    ("Inputs and model", ["recursive", "size", "resize", "signature", "input_key", "output_key",
                          "weights", "unsafe_deserialization", "custom_objects", "preprocess",
                          "labels"]),
    ("Output", ["output", "raw", "figure", "dpi", "report", "skip_existing", "fail_fast",
                "quiet", "batch_size", "precision", "debug"]),
    ("Scale-out", ["shard", "engine", "workers", "cpus_per_worker", "num_gpus_per_worker",
                   "ray_address"]),
]


def _parse_shard(ctx, param, value: str | None) -> tuple[int, int] | None:
    if value is None:
        return None
    from guidedbp.io.shard import ShardError, parse_shard

    try:
        return parse_shard(value)
    except ShardError as error:
        raise click.BadParameter(str(error), ctx, param) from None


METHODS_HELP = ("Comma list of methods (listed below), or 'all' (every method that explains "
                "the targets: drise only on detections). Several share one forward pass; with "
                "several, --render panel makes one comparison panel.")
METHODS_EPILOG = "\b\nMethods:\n" + "\n".join(
    f"  {m.name:<22}{m.title} ({m.paper})" for m in REGISTRY.values())


@click.command("explain", cls=GroupedCommand, option_groups=OPTION_GROUPS, epilog=METHODS_EPILOG
               + """\n\n\b
Exit codes: 0 every input explained (or skipped), 1 some inputs failed,
2 usage or model errors, 3 an internal error (a bug: rerun with --debug and
report it), 130 interrupted (Ctrl-C stops at once; what was written is whole).

\b
Each INPUT's outputs go under OUT at its own last path component, whatever else
the run names: a file under its name (../cat.jpg gives OUT/cat.jpg.*), a folder
under its name and the path below it (/data/photos gives OUT/photos/a/cat.jpg.*;
'.' and '..' add no name), a glob likewise from its folder part before the first
wildcard. Two INPUTs that would share a name are refused. Hidden files and folders
(names starting with '.') inside folders are skipped and counted:
  PATH[.CLASS].METHOD.RENDER.png  one per render (CLASS with --class/--top-k/--target)
  PATH[.CLASS].panel.png          with several methods and --render panel
  PATH[.CLASS].METHOD.npy         with --raw: float32 map at model resolution
  PATH[.CLASS].figure.FORMAT      with --figure pdf|svg|png: all methods, colorbars
  manifest.jsonl                  one JSON object per input
  index.html                      the run as a web page: filter, sort, click through
                                  (manifest-K-of-N.jsonl with --shard K/N)
CLASS is 281-tabby (index-name) or 281 for a class; for --target, unit-2 (unit-4-7-1),
region-1-circle (region-1 without class names), similar-ref.jpg (the reference's
file name; characters other than letters, digits, '.', '_' and '-' become '-') or
box-10-20-40-60 (box-10-20-40-60-1-circle with a class); for --detections, det-1-circle
(rank, class name or index).
With --target or --model-output, each manifest target also has "target" (spec, kind,
output, index, name; a region's pixels and mask, a similarity's reference; a box's or
detection's box in the file's pixels, box_input on the model's input and the proposal it
matched: box, iou, score), "value" (the score explained) and "description" (the
panels' caption); with --detections each record has "detections" (top, found,
threshold).
One run writes to an OUT at a time; guidedbp never writes through a link or over a
file it did not write.""")
@click.argument("model")
@click.argument("inputs", nargs=-1, required=True, metavar="INPUT...")
@click.option("-o", "--output", default=DEFAULT_OUTPUT, show_default=True, metavar="OUT",
              type=FolderOrURL(file_okay=False),
              help="Folder (or object-store URL, s3://bucket/prefix/) for maps and "
                   "manifest.jsonl.")
@field_option("recursive", "--recursive/--no-recursive", help="Walk INPUT folders recursively.")
@field_option("methods", "--method", metavar="LIST", callback=parse_run_methods,
              help=METHODS_HELP,
              shell_complete=complete_comma_list(METHODS, extra=("all",)))
@field_option("layer", "--layer",
              help="Layer of the class activation maps ("
                   + ", ".join(m.name for m in REGISTRY.values() if "gradcam" in m.options)
                   + "). Default: the last 4-D layer before pooling, inside nested models "
                   "too.")
@field_option("upsample", "--upsample", type=Choice(UPSAMPLING),
              help="Grad-CAM upsampling to the input size.")
@field_option("smooth", "--smooth", type=Whole(0, MAX_SMOOTH), metavar="N",
              help="SmoothGrad: average each method over N noisy copies (0: off); also "
                   f"the copies of squaregrad and vargrad [{STATISTIC_COPIES} when off].")
@field_option("noise", "--noise", type=Number(min=0),
              help="SmoothGrad noise, relative to each image's value range.")
@field_option("seed", "--seed", type=Whole(),
              help="Seed of SmoothGrad's noise and of the random masks and coalitions of "
                   "rise, drise, kernelshap and lime (per image).")
@field_option("steps", "--steps", type=Whole(1, MAX_STEPS),
              help="Integrated-gradients steps.")
@field_option("baseline", "--baseline", type=Choice(BASELINES),
              help="Integrated-gradients baseline.")
@method_flags
@field_option("renders", "--render", metavar="LIST", callback=parse_comma_list(RENDERS),
              shell_complete=complete_comma_list(RENDERS),
              help=f"Comma list of renders: {', '.join(RENDERS)}.")
@field_option("classes", "--class", multiple=True, metavar="CLASS",
              help="Class to explain, by index or name (repeatable). Default: the top-1 class.")
@field_option("top_k", "--top-k", type=Whole(1, MAX_CLASSES),
              help="Explain the K most probable classes of each image.")
@field_option("targets", "--target", multiple=True, metavar="SPEC", callback=parse_targets,
              shell_complete=complete_target, help=TARGET_HELP)
@field_option("model_output", "--model-output", metavar="NAME|INDEX",
              help="The model output to explain, for models with several (by name or "
                   "position; guidedbp inspect lists them). Default: the only one.")
@field_option("mask_dir", "--mask-dir", metavar="DIR",
              type=FolderOrURL(exists=True, file_okay=False),
              help="With --target region:C: one mask per input, at the input's path below "
                   "its INPUT folder, any image format (photos/a/cat.jpg from INPUT photos: "
                   "DIR/a/cat.png); nonzero pixels are the region. Fitted to the model's "
                   "input as the image is.")
@field_option("detections", "--detections", metavar="top:K", callback=parse_detections,
              help=DETECTIONS_HELP)
@field_option("detection_threshold", "--detection-threshold", type=Number(0, 1),
              help="For a detector: the class score from which a proposal is a detection "
                   "(--detections finds those; a box: target whose match scores less, or "
                   "overlaps it by an IoU under 0.5, carries the no-detection caveat).")
@field_option("output_size", "--output-size", type=Choice(OUTPUT_SIZES),
              help="Write maps at the image's size or the model's input size.")
@field_option("raw", "--raw", is_flag=True,
              help="Also save the float32 map (model resolution) as .npy.")
@field_option("figure", "--figure", type=Choice(FIGURE_FORMATS),
              help="Also draw each explanation as a figure (the picture, then each method "
                   "with a colorbar): vector PDF or SVG, or PNG. Needs matplotlib: "
                   f"{install('plot')}.")
@field_option("dpi", "--dpi", type=Whole(MIN_DPI, MAX_DPI),
              help="Figure resolution, dots per inch.")
@field_option("report", "--report/--no-report",
              help="Write OUT/index.html to browse the run (not with --shard: run "
                   "guidedbp report OUT after merge-manifests).")
@field_option("cmap", "--cmap", type=Choice(COLORMAPS),
              help="Colormap for heatmap and overlay.")
@field_option("clip", "--clip", type=Number(0, 100, min_open=True),
              help="Magnitude percentile shown as full intensity.")
@field_option("alpha", "--alpha", type=Number(0, 1),
              help="Heatmap weight in the overlay.")
@field_option("tile", "--tile", type=Whole(MIN_TILE, MAX_TILE), metavar="PX",
              help="Panels: pixels on the longer side of each picture (small images are "
                   "enlarged, nearest-neighbour; large ones reduced).")
@batch_size_option
@field_option("skip_existing", "--skip-existing", is_flag=True,
              help="Resume: an input whose record in OUT's manifest and whose outputs are "
                   "all still there and whole is carried over, not recomputed.")
@field_option("fail_fast", "--fail-fast", is_flag=True,
              help="Stop at the first input that fails.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar and no summary line.")
@field_option("shard", "--shard", callback=_parse_shard, metavar="K/N",
              help="Explain only shard K of N (K from 0, e.g. $SLURM_ARRAY_TASK_ID/"
                   "$SLURM_ARRAY_TASK_COUNT), chosen by a stable hash of each input's path; "
                   "writes manifest-K-of-N.jsonl. Join with guidedbp merge-manifests OUT.")
@click.option("--engine", type=Choice(["local", "ray"]), default="local",
              show_default=True,
              help="local: this process. ray: a Ray Data pipeline, decode tasks and "
                   f"--workers explainer actors ({install('ray')}).")
@click.option("--workers", type=Whole(min=1), default=2, show_default=True,
              help="With --engine ray: explainer actors, each with its own model copy.")
@click.option("--cpus-per-worker", type=Whole(min=1), default=1, show_default=True,
              help="With --engine ray: CPUs each worker reserves, and its TensorFlow threads.")
@click.option("--num-gpus-per-worker", type=Number(min=0), default=0,
              show_default=True, help="With --engine ray: GPUs each worker reserves.")
@click.option("--ray-address", default=None, metavar="ADDRESS",
              help="With --engine ray: 'auto' or ray://HOST:PORT joins a running cluster. "
                   "Default: start a local Ray instance for this run.")
@model_options
@errors_handled
def explain_command(model: str, inputs: tuple[str, ...], **options) -> None:
    """Write saliency maps of MODEL's decisions for images, folders or globs.

    \b
    Examples:
      guidedbp explain model.h5 cat.jpg
      guidedbp explain keras:ResNet50 photos/ -o maps --render panel --top-k 3
      guidedbp explain demo sample_images/shapes --method guided,gradcam --render panel
      guidedbp explain unet.keras photos/ --target region:road --target region:car
      guidedbp explain heads.keras photos/ --model-output age --target unit:0
      guidedbp explain model.keras s3://bucket/photos/ -o s3://bucket/maps/

    INPUT, -o OUT and --mask-dir may be object-store URLs (s3://, gs://, az://: pip
    install 'guidedbp[s3]', [gcs] or [azure]), with credentials and endpoints from the
    store library's own environment and config (AWS_ENDPOINT_URL, AWS_PROFILE,
    GOOGLE_APPLICATION_CREDENTIALS...). Every object is written whole; the manifest goes
    to one part object per batch, joined into OUT/manifest.jsonl at the end
    (--skip-existing resumes a killed run from its parts); a lock object keeps one
    writer per OUT.
    """
    from guidedbp.io.inputs import InputError

    if options["classes"] and options["top_k"]:
        raise click.UsageError("--class and --top-k cannot be used together")
    ray_engine = options["engine"] == "ray"
    if ray_engine and options["fail_fast"]:
        raise click.UsageError("--fail-fast works with --engine local only")
    cluster = None
    if ray_engine:
        from guidedbp.pipeline.ray_runner import Cluster, import_ray

        try:
            import_ray()
        except ImportError:
            raise UsageFailure(needs("--engine ray", "ray")) from None
        cluster = Cluster(address=options["ray_address"], workers=options["workers"],
                          cpus_per_worker=options["cpus_per_worker"],
                          gpus_per_worker=options["num_gpus_per_worker"])
    run_options = RunOptions.of(**{name: options[name] for name in RunOptions().flat()})
    from guidedbp.pipeline.preflight import NoImagesError, check_run

    try:  # what needs no TensorFlow is checked before it is imported: in milliseconds
        checked = check_run(model, inputs, options["output"], options=run_options,
                            runner=options["engine"])
    except (NoImagesError, InputError) as error:
        raise UsageFailure(one_line(error)) from None
    import_tensorflow(options["debug"])
    from guidedbp.pipeline.run import explain_files

    progress = Progress() if show_progress(options["quiet"]) else None
    if progress is not None:
        progress.note("loading the model...")
    summary = explain_files(model, checked, options["output"], options=run_options,
                            load=load_options(options), runner=options["engine"],
                            cluster=cluster, progress=progress)
    if progress is not None:
        progress.close()
    print_summary(summary, quiet=options["quiet"])
    sys.exit(summary.exit_code)


def print_summary(summary, quiet: bool = False) -> None:
    """The run's one-line summary (with ``quiet``, only if it was interrupted), the objects
    it skipped with their reasons (without ``quiet``) and its failures, on stderr."""
    shown = not quiet or summary.interrupted
    if shown:
        working = max(summary.seconds - summary.loading, 1e-9)
        parts = [f"{summary.done} explained"]
        if summary.skipped:
            parts.append(f"{summary.skipped} skipped (outputs exist)")
        if summary.failures:
            parts.append(f"{len(summary.failures)} failed")
        if summary.recomputed:
            parts.append(recomputed_phrase(summary.recomputed))
        if summary.unusable:
            parts.append(f"{plural(len(summary.unusable), 'object')} skipped (see below)")
        if summary.fewer_detections:
            parts.append(fewer_phrase(summary.fewer_detections, summary.no_detections,
                                      *summary.detections))
        if summary.passed_over:
            parts.append(f"{plural(summary.passed_over, 'other file')} passed over")
        if summary.hidden:
            parts.append(f"{hidden_phrase(summary.hidden)} skipped")
        state = "interrupted: " if summary.interrupted else ""
        written = f"maps, {summary.manifest} and {os.path.basename(summary.report)}" \
            if summary.report else f"maps and {summary.manifest}"
        click.echo(f"{state}{', '.join(parts)} in {summary.seconds:.1f} s ("
                   f"{summary.loading:.1f} s loading the model, {summary.done / working:.1f} "
                   f"images/s); {written} in {shown_name(summary.output.rstrip('/') + '/')}",
                   err=True)
    for path, reason in summary.unusable[:20] if shown else ():
        click.echo(f"  skipped: {shown_name(path)}: {reason}", err=True)
    if shown and len(summary.unusable) > 20:
        click.echo(f"  ... and {len(summary.unusable) - 20} more (see {summary.manifest})",
                   err=True)
    for path, reason in summary.failures[:20]:
        click.echo(f"  failed: {shown_name(path)}: {reason}", err=True)
    if len(summary.failures) > 20:
        click.echo(f"  ... and {len(summary.failures) - 20} more (see {summary.manifest})",
                   err=True)


def recomputed_phrase(recomputed: dict[str, int]) -> str:
    """``N recomputed (why)`` for a resumed run's earlier records that no longer describe
    its maps, by reason, the most frequent first: ``4 recomputed (made by another model)``,
    ``5 recomputed (4 made by another model, 1 written before fingerprints)``."""
    order = list(REASONS)
    counted = sorted(recomputed.items(), key=lambda pair: (
        -pair[1], order.index(pair[0]) if pair[0] in order else len(order)))
    if len(counted) == 1:
        return f"{counted[0][1]} recomputed ({REASONS.get(counted[0][0], counted[0][0])})"
    reasons = ", ".join(f"{count} {REASONS.get(code, code)}" for code, count in counted)
    return f"{sum(recomputed.values())} recomputed ({reasons})"
