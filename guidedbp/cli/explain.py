"""``guidedbp explain MODEL INPUT...``: saliency maps for images and whole folders."""

from __future__ import annotations

import os
import sys
import time

import click

from guidedbp import METHODS
from guidedbp.cli.common import (
    UsageFailure,
    errors_handled,
    import_tensorflow,
    load_options,
    model_options,
    parse_methods,
)
from guidedbp.render import COLORMAPS, DEFAULT_ALPHA, DEFAULT_CLIP, DEFAULT_RENDERS, RENDERS

DEFAULT_OUTPUT = "guidedbp-out"
DEFAULT_BATCH_SIZE = 16


def _parse_renders(ctx, param, value: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(n.strip() for n in value.split(",") if n.strip()))
    unknown = [n for n in names if n not in RENDERS]
    if unknown or not names:
        raise click.BadParameter(
            f"{', '.join(unknown) or 'nothing'}: choose from {', '.join(RENDERS)}", ctx, param
        )
    return names


def _parse_shard(ctx, param, value: str | None) -> tuple[int, int] | None:
    if value is None:
        return None
    from guidedbp.io.shard import ShardError, parse_shard

    try:
        return parse_shard(value)
    except ShardError as error:
        raise click.BadParameter(str(error), ctx, param) from None


@click.command("explain", epilog="""\b
Exit codes: 0 every input explained (or skipped), 1 some inputs failed,
2 usage or model errors, 130 interrupted (Ctrl-C finishes the current batch).

\b
Outputs, under OUT mirroring each input's path below the folder it was found in:
  NAME[.CLASS].METHOD.RENDER.png  one per render (CLASS with --class/--top-k)
  NAME[.CLASS].METHOD.npy         with --raw: float32 map at model resolution
  manifest.jsonl                  one JSON object per input
                                  (manifest-K-of-N.jsonl with --shard K/N)""")
@click.argument("model")
@click.argument("inputs", nargs=-1, required=True, metavar="INPUT...")
@click.option("-o", "--output", default=DEFAULT_OUTPUT, show_default=True, metavar="OUT",
              type=click.Path(file_okay=False), help="Folder for maps and manifest.jsonl.")
@click.option("--recursive/--no-recursive", default=True, show_default=True,
              help="Walk INPUT folders recursively.")
@click.option("--method", "methods", default="guided", show_default=True, metavar="LIST",
              callback=parse_methods,
              help=f"Comma list of methods, or 'all': {', '.join(METHODS)}. With several, "
                   "--render panel makes one comparison panel.")
@click.option("--layer", default=None,
              help="Grad-CAM layer name (default: the last 4-D layer before pooling, "
                   "inside nested models too).")
@click.option("--upsample", type=click.Choice(["bilinear", "nearest"]), default="bilinear",
              show_default=True, help="Grad-CAM upsampling to the input size.")
@click.option("--smooth", type=click.IntRange(min=0), default=0, show_default=True, metavar="N",
              help="SmoothGrad: average each method over N noisy copies (0: off).")
@click.option("--noise", type=click.FloatRange(min=0), default=0.15, show_default=True,
              help="SmoothGrad noise, relative to each image's value range.")
@click.option("--seed", type=int, default=0, show_default=True, help="SmoothGrad noise seed.")
@click.option("--steps", type=click.IntRange(min=1), default=32, show_default=True,
              help="Integrated-gradients steps.")
@click.option("--baseline", type=click.Choice(["black", "white", "blur"]), default="black",
              show_default=True, help="Integrated-gradients baseline.")
@click.option("--render", "renders", default=",".join(DEFAULT_RENDERS), show_default=True,
              callback=_parse_renders, metavar="LIST",
              help=f"Comma list of renders: {', '.join(RENDERS)}.")
@click.option("--class", "classes", multiple=True, metavar="CLASS",
              help="Class to explain, by index or name (repeatable). Default: the top-1 class.")
@click.option("--top-k", type=click.IntRange(min=1), default=None,
              help="Explain the K most probable classes of each image.")
@click.option("--output-size", type=click.Choice(["original", "model"]), default="original",
              show_default=True, help="Write maps at the image's size or the model's input size.")
@click.option("--raw", is_flag=True, help="Also save the float32 map (model resolution) as .npy.")
@click.option("--cmap", type=click.Choice(COLORMAPS), default="inferno", show_default=True,
              help="Colormap for heatmap and overlay.")
@click.option("--clip", type=click.FloatRange(0, 100, min_open=True), default=DEFAULT_CLIP,
              show_default=True, help="Magnitude percentile shown as full intensity.")
@click.option("--alpha", type=click.FloatRange(0, 1), default=DEFAULT_ALPHA, show_default=True,
              help="Heatmap weight in the overlay.")
@click.option("--batch-size", type=click.IntRange(min=1), default=DEFAULT_BATCH_SIZE,
              show_default=True, help="Images per engine pass; bounds memory.")
@click.option("--skip-existing", is_flag=True,
              help="Resume: inputs whose outputs all exist are not recomputed. (With "
                   "--top-k every input is: its file names depend on the prediction.)")
@click.option("--fail-fast", is_flag=True, help="Stop at the first input that fails.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar and no summary line.")
@click.option("--shard", callback=_parse_shard, default=None, metavar="K/N",
              help="Explain only shard K of N (K from 0, e.g. $SLURM_ARRAY_TASK_ID/"
                   "$SLURM_ARRAY_TASK_COUNT), chosen by a stable hash of each input's path; "
                   "writes manifest-K-of-N.jsonl. Join with guidedbp merge-manifests OUT.")
@click.option("--engine", type=click.Choice(["local", "ray"]), default="local",
              show_default=True,
              help="local: this process. ray: a Ray Data pipeline, decode tasks and "
                   "--workers explainer actors (pip install guidedbp[ray]).")
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True,
              help="With --engine ray: explainer actors, each with its own model copy.")
@click.option("--cpus-per-worker", type=click.IntRange(min=1), default=1, show_default=True,
              help="With --engine ray: CPUs each worker reserves, and its TensorFlow threads.")
@click.option("--num-gpus-per-worker", type=click.FloatRange(min=0), default=0,
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
    """
    from guidedbp.io.inputs import InputError, collect_inputs

    if options["classes"] and options["top_k"]:
        raise click.UsageError("--class and --top-k cannot be used together")
    ray_engine = options["engine"] == "ray"
    if ray_engine and options["fail_fast"]:
        raise click.UsageError("--fail-fast works with --engine local only")
    if ray_engine:
        from guidedbp.cli.ray_job import import_ray

        try:
            import_ray()
        except ImportError as error:
            raise UsageFailure(str(error)) from None
    output = options["output"]
    try:
        collected = collect_inputs(list(inputs), options["recursive"], exclude=output)
    except InputError as error:
        raise click.BadParameter(str(error), param_hint="INPUT") from None
    if not collected.items:
        raise UsageFailure(
            f"no images found in {', '.join(inputs)} "
            f"({collected.passed_over} other files passed over)"
        )
    items, manifest = collected.items, "manifest.jsonl"
    if options["shard"] is not None:  # an empty shard still writes its (empty) manifest
        from guidedbp.io.shard import manifest_name, select_shard

        items, manifest = select_shard(items, *options["shard"]), manifest_name(*options["shard"])

    import_tensorflow(options["debug"])
    from guidedbp.cli.job import ExplainJob, Settings
    from guidedbp.models.labels import resolve_class
    from guidedbp.models.loading import load_model

    loaded = load_model(model, **load_options(options))
    explainers = build_explainers(loaded, options)
    try:  # traces each method once, so a bad --layer is reported before any work
        num_classes = [e.report for e in explainers.values()][0].num_classes
    except ValueError as error:
        raise UsageFailure(str(error)) from None
    classes = tuple(resolve_class(spec, loaded.labels, num_classes) for spec in options["classes"])
    settings = Settings(
        output=output, methods=options["methods"], renders=options["renders"], classes=classes,
        top_k=options["top_k"], output_size=options["output_size"], raw=options["raw"],
        cmap=options["cmap"], clip=options["clip"], alpha=options["alpha"],
        batch_size=options["batch_size"], size=options["size"], resize=options["resize"],
        skip_existing=options["skip_existing"], fail_fast=options["fail_fast"],
        manifest=manifest,
    )
    os.makedirs(output, exist_ok=True)
    progress = Progress(len(items)) if _show_progress(options["quiet"]) else None
    try:
        if ray_engine and items:
            summary = _run_on_ray(model, options, loaded, settings, items, progress)
        else:
            summary = ExplainJob(loaded, explainers, settings, progress).run(items)
    except KeyboardInterrupt:  # a second Ctrl-C: the manifest was flushed on the way out
        click.echo("\naborted", err=True)
        sys.exit(130)
    if progress is not None:
        progress.close()
    if not options["quiet"]:
        _print_summary(summary, collected.passed_over, output, manifest)
    sys.exit(summary.exit_code)


#: The command's options that shape the explainers, as a Ray worker rebuilds them.
EXPLAINER_OPTIONS = ("methods", "batch_size", "upsample", "layer", "smooth", "noise", "seed",
                     "steps", "baseline")


def build_explainers(loaded, options: dict) -> dict:
    """One Explainer per method in ``options["methods"]``, from the command's options."""
    from guidedbp.engine.explainer import Explainer

    return {
        method: Explainer(
            loaded, method, batch_size=options["batch_size"], upsample=options["upsample"],
            layer=options["layer"] if method in ("gradcam", "guided-gradcam") else None,
            smooth=options["smooth"], noise=options["noise"], seed=options["seed"],
            steps=options["steps"], baseline=options["baseline"],
        )
        for method in options["methods"]
    }


def _run_on_ray(model: str, options: dict, loaded, settings, items, progress):
    from guidedbp.cli.ray_job import Cluster, Recipe, run_on_ray

    recipe = Recipe(model=model, load=load_options(options),
                    explain={key: options[key] for key in EXPLAINER_OPTIONS})
    cluster = Cluster(address=options["ray_address"], workers=options["workers"],
                      cpus_per_worker=options["cpus_per_worker"],
                      gpus_per_worker=options["num_gpus_per_worker"])
    return run_on_ray(recipe, loaded, settings, items, cluster, progress)


def _show_progress(quiet: bool) -> bool:
    return not quiet and sys.stderr.isatty()


def _print_summary(summary, passed_over: int, output: str, manifest: str = "manifest.jsonl"
                   ) -> None:
    rate = (summary.done / summary.seconds) if summary.seconds > 0 else 0.0
    parts = [f"{summary.done} explained"]
    if summary.skipped:
        parts.append(f"{summary.skipped} skipped (outputs exist)")
    if summary.failures:
        parts.append(f"{len(summary.failures)} failed")
    if passed_over:
        parts.append(f"{passed_over} other files passed over")
    state = "interrupted: " if summary.interrupted else ""
    click.echo(f"{state}{', '.join(parts)} in {summary.seconds:.1f} s ({rate:.1f} images/s); "
               f"maps and {manifest} in {output}/", err=True)
    for path, reason in summary.failures[:20]:
        click.echo(f"  failed: {path}: {reason}", err=True)
    if len(summary.failures) > 20:
        click.echo(f"  ... and {len(summary.failures) - 20} more (see {manifest})", err=True)


class Progress:
    """A one-line progress bar with images/s, on stderr, for terminals only."""

    def __init__(self, total: int):
        self.total, self.count, self.start = total, 0, time.perf_counter()

    def advance(self) -> None:
        self.count += 1
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        width = 30
        filled = int(width * self.count / max(self.total, 1))
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.count}/{self.total} "
                         f"{self.count / elapsed:.1f} images/s")
        sys.stderr.flush()

    def close(self) -> None:
        sys.stderr.write("\n")
        sys.stderr.flush()
