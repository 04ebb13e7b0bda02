"""``guidedbp evaluate``: how well maps point at the object (against ground-truth masks)
and how faithful they are to the model (deletion and insertion, no masks needed), with
the metric families of :mod:`guidedbp.checks.metrics_catalog` (faithfulness,
robustness, complexity, randomisation; :mod:`guidedbp.cli.evaluate_metrics`)."""

from __future__ import annotations

from dataclasses import dataclass

import click

from guidedbp._json import dumps as strict_json
from guidedbp.checks.faithfulness import (
    BASELINES,
    BLUR_SIGMA,
    DEFAULT_STEPS,
    GAMES,
    MAX_STEPS,
)
from guidedbp.checks.metrics_catalog import METRIC_NAMES
from guidedbp.cli.exits import UsageFailure, errors_handled
from guidedbp.cli.flags import (
    FolderOrURL,
    batch_size_option,
    complete_comma_list,
    guide_option,
    load_options,
    model_options,
    parse_comma_list,
    parse_methods,
    precision_option,
)
from guidedbp.cli.numbers import Number, Whole
from guidedbp.cli.process import import_tensorflow
from guidedbp.cli.progress import Progress, show_progress
from guidedbp.engine.methods.registry import GRADIENT, METHODS, REGISTRY

TOLERANCE = 15  # pixels, as in Zhang et al. (2016)
#: Synthetic shapes at most (--shapes): each is drawn, held and explained.
MAX_SHAPES = 10000
# Methods evaluated by default: those of one traced pass per image. The others (integrated
# gradients, SquareGrad and VarGrad, Score-CAM, occlusion, the black-box methods) make it
# slow: ask for them with --method.
DEFAULT_METHODS = tuple(m.name for m in REGISTRY.values() if m.runner == GRADIENT)
#: Metrics that score a map against an object's mask (--masks or --shapes).
MASK_METRICS = ("pointing", "energy")
#: Every --metric: the mask metrics, the deletion and insertion games, then the metric
#: families (faithfulness, robustness, complexity, randomisation), none of which needs masks.
METRICS = (*MASK_METRICS, *GAMES, *METRIC_NAMES)
#: What --format prints: the tables, the ranking as markdown or CSV, or the JSON record.
FORMATS = ("text", "markdown", "csv", "json")


def _parse_metrics(ctx, param, value: str) -> tuple[str, ...]:
    """A --metric value: a comma list of METRICS, or ``all`` (resolved by the command:
    the mask metrics only where there are masks)."""
    if value.strip().lower() == "all":
        return ("all",)
    return parse_comma_list(METRICS)(ctx, param, value)


def _resolve_metrics(metrics: tuple[str, ...], masked: bool, segmentation: bool
                     ) -> tuple[str, ...]:
    """``all`` as the metrics the data and model allow; any other list as it is."""
    if metrics != ("all",):
        return metrics
    if segmentation:
        return MASK_METRICS
    return METRICS if masked else METRICS[len(MASK_METRICS):]


@click.command("evaluate")
@click.argument("model")
@click.argument("images", nargs=-1, metavar="[IMAGES]...")
@click.option("--masks", type=FolderOrURL(exists=True, file_okay=False), default=None,
              help="Folder of mask PNGs (white = object) matching IMAGES by relative path "
                   "and stem.")
@click.option("--shapes", type=Whole(1, MAX_SHAPES), default=None, metavar="N",
              help="Evaluate on N synthetic shapes (guidedbp.demo.make_shapes) instead.")
@click.option("--seed", type=Whole(), default=1000, show_default=True,
              help="Seed of --shapes and of the random metrics (mufidelity's subsets, the "
                   "sensitivity noise, random-logit's class, ROAD's imputation noise).")
@click.option("--distractors", is_flag=True,
              help="With --shapes: add a smaller object of another class to each image.")
@click.option("--explain-distractor", is_flag=True,
              help="With --distractors: explain the distractor's class and score against its "
                   "mask; the table also shows how often the map points at the target instead.")
@click.option("--method", "methods", default=",".join(DEFAULT_METHODS), show_default=True,
              shell_complete=complete_comma_list(METHODS, extra=("all",)),
              callback=parse_methods, metavar="LIST", help="Comma list of methods, or 'all'.")
@click.option("--metric", "metrics", default=",".join(MASK_METRICS), show_default=True,
              shell_complete=complete_comma_list(METRICS, extra=("all",)),
              callback=_parse_metrics, metavar="LIST",
              help=f"Comma list of {', '.join(METRICS)}, or 'all'. pointing and energy "
                   "need --masks or --shapes; the others need no masks ('all' takes them "
                   "all, the mask metrics only where there are masks).")
@click.option("--costs", is_flag=True,
              help="Also time each method alone on the first batch (after a warm-up run) "
                   "and print its cost per image relative to guided.")
@click.option("--tolerance", type=Number(min=0), default=TOLERANCE,
              show_default=True, help="Pointing-game tolerance in pixels.")
@click.option("--steps", type=Whole(1, MAX_STEPS), default=DEFAULT_STEPS,
              show_default=True,
              help="Deletion/insertion: steps per curve; step i perturbs the top i/steps of "
                   "the pixels.")
@click.option("--baseline", type=click.Choice(BASELINES), default=BASELINES[0],
              show_default=True,
              help=f"Deletion/insertion: what a removed pixel becomes: the image blurred "
                   f"(Gaussian, sigma {BLUR_SIGMA:g} x its shorter side) or black (pixel 0).")
@click.option("--plot-curves", type=click.Path(file_okay=False), default=None,
              metavar="FOLDER",
              help="Write each image's deletion/insertion curves there as PNG figures "
                   "(needs matplotlib: the plot extra).")
@batch_size_option
@precision_option
@guide_option
@click.option("--format", "output_format", type=click.Choice(FORMATS), default=None,
              help="text: the tables, fitted to the terminal's width (120 columns when "
                   "not a terminal); markdown: the ranking, a table per metric family; "
                   "csv: the ranking, a row per method and a column per metric; json: "
                   "everything, each image's values included.  [default: text]")
@click.option("--json", "as_json", is_flag=True, help="The same as --format json.")
@model_options
@errors_handled
def evaluate_command(model, images, masks, shapes, seed, distractors, explain_distractor, methods,
                     metrics, costs, tolerance, steps, baseline, plot_curves, batch_size,
                     precision, guide, output_format, as_json, **options) -> None:
    """How well MODEL's maps localise objects, and how faithful they are to the model.

    \b
    Localisation, against ground-truth object masks (--masks or --shapes):
      pointing  the pointing game (Zhang et al. 2016): is the map's maximum within
                --tolerance pixels of the object?
      energy    the share of the map's energy inside the mask
    Both per class and overall.

    \b
    Faithfulness, on any images (Petsiuk et al. 2018, RISE), no masks needed:
      deletion   replace the most salient pixels by --baseline, --steps at a time;
                 area under the class probability (lower is more faithful)
      insertion  put them back into the baseline (higher is more faithful)
    Per image and averaged per method.

    \b
    Metric families, on any images, no masks needed (direction in brackets):
      faithfulness   mufidelity (higher), average-drop (lower),
                     average-increase (higher), average-gain (higher),
                     road-morf (lower), road-lerf (higher)
      robustness     max-sensitivity, avg-sensitivity (lower)
      complexity     sparseness (higher), complexity (lower)
      randomisation  random-logit (lower)
    Means per method; each image's value in --json.

    \b
    The table ends with a ranking: a block per metric family, a row per
    method, each metric's best mean marked '*' by its direction (--format
    markdown: in bold; csv: the means alone, as the JSON has them).

    \b
    Classes are the true labels with --shapes, else the model's top-1 predictions.

    \b
    A constant map (max_c |map| the same at every pixel, e.g. all zero) singles
    out no pixel: no metric scores it ('-' where a method has no other map), and
    the table names how many each method gave; an image whose mask has no pixel
    is left out of pointing and energy (not a miss) and named.

    \b
    A segmentation model (output (batch, H', W', classes), e.g. demo-seg) is
    evaluated on --shapes: each map explains its shape's region (the class's
    logits over the mask), and the energy table gains the share within the
    region's receptive field; the model's own IoU per class follows.

    \b
    Examples:
      guidedbp evaluate demo --shapes 500 --seed 1000
      guidedbp evaluate demo-seg --shapes 200 --method guided,vanilla,gradcam
      guidedbp evaluate demo sample_images/shapes --masks sample_images/masks/shapes
      guidedbp evaluate keras:ResNet50 photos --metric deletion,insertion --json
      guidedbp evaluate demo --shapes 50 --method guided,gradcam --metric all
      guidedbp evaluate demo --shapes 50 --method guided,gradcam --metric all \\
        --format csv > ranking.csv
    """
    if as_json and output_format not in (None, "json"):
        raise UsageFailure(f"--json is --format json: give --json or --format "
                           f"{output_format}, not both")
    output_format = "json" if as_json else output_format or "text"
    bound = [name for name in methods if REGISTRY[name].target is not None]
    if bound:  # evaluate explains classes and regions: never a detector's detections
        raise UsageFailure(f"--method {bound[0]} explains a detector's detections alone "
                           "(guidedbp explain --target box:X0,Y0,X1,Y1 or --detections "
                           "top:K); evaluate explains classes and segmentation regions")
    every = metrics == ("all",)
    metrics = _resolve_metrics(metrics, shapes is not None or masks is not None, False)
    settings = Settings(metrics, tolerance, steps, baseline, seed)
    if plot_curves is not None and not settings.games:
        raise click.UsageError("--plot-curves needs --metric deletion or insertion")
    if (shapes is None) == (not images):
        raise click.UsageError("give IMAGES with --masks, or --shapes N" if settings.masked
                               else "give IMAGES, or --shapes N")
    if images and masks is None and settings.masked:
        raise click.UsageError(f"IMAGES need --masks DIR for --metric "
                               f"{','.join(settings.masked)} (the other metrics need none)")
    if masks is not None and not settings.masked:
        raise click.UsageError("--masks is only used by --metric pointing and energy")
    if explain_distractor and not distractors:
        raise click.UsageError("--explain-distractor needs --shapes N --distractors")
    if plot_curves is not None:
        from guidedbp.plot import require_matplotlib

        require_matplotlib()  # before the model loads
    from guidedbp.models.loading import check_model_path

    check_model_path(model)  # before TensorFlow is imported: in milliseconds
    import_tensorflow(options["debug"])
    from guidedbp.api import Explainer
    from guidedbp.models.loading import load_model

    loaded = load_model(model, **load_options(options))
    from guidedbp.cli.evaluate_regions import is_segmentation, refuse_for_segmentation

    if every and is_segmentation(loaded):
        metrics = _resolve_metrics(("all",), True, True)
        settings = Settings(metrics, tolerance, steps, baseline, seed)
    if is_segmentation(loaded):
        refuse_for_segmentation(shapes, settings.games + settings.families, costs)
    from guidedbp.cli.evaluate_samples import file_samples, synthetic_samples

    if shapes is not None:
        samples = synthetic_samples(shapes, seed, distractors, explain_distractor)
    else:
        samples = file_samples(images, masks, loaded.channels)
    if plot_curves is not None:
        from guidedbp.cli.evaluate_output import check_figure_targets

        check_figure_targets(plot_curves, samples, settings.games)
    # One forward pass for all methods.
    segmentation = is_segmentation(loaded)
    progress = Progress() if show_progress() and not segmentation else None
    explainer = Explainer(loaded, methods, batch_size=batch_size, guide=guide,
                          precision=precision,
                          progress=None if progress is None else progress.passes)
    from guidedbp.cli.evaluate_scoring import Measured, measure, method_costs

    extra = {}
    if segmentation:
        from guidedbp.cli.evaluate_regions import measure_segmentation

        scored, extra = measure_segmentation(loaded, explainer, samples, tolerance, options)
        measured = Measured(scored, {}, None,
                            {m: [s.constant for s in found] for m, found in scored.items()})
    else:
        measured = measure(loaded, explainer, samples, settings, options, progress)
    from guidedbp.cli.evaluate_records import faithfulness_record, mask_rows, not_scored

    result = {
        "model": model,
        "data": (f"{shapes} synthetic shapes, seed {seed}"
                 + (", with distractors" if distractors else "")
                 + (", explaining the distractor's class" if explain_distractor else ""))
        if shapes else masks or f"{len(samples)} images",
        "metrics": list(metrics),
        "guide": explainer.report.as_dict()["by_rule"],
    }
    if settings.masked:
        result["tolerance"] = tolerance
        result["results"] = mask_rows(measured.scored, loaded.labels, settings.masked)
    result.update(extra)
    if settings.games:
        result["faithfulness"] = faithfulness_record(measured, samples, loaded.labels)
    if measured.families is not None:
        from guidedbp.cli.evaluate_metrics import family_record

        result["scores"] = family_record(measured.families, measured.constant)
    if costs:
        result["costs"] = method_costs(loaded, samples, methods, batch_size, options, guide,
                                 precision)
    result.update(not_scored(measured, samples, bool(settings.masked)))
    if plot_curves is not None:
        from guidedbp.cli.evaluate_output import write_curves

        write_curves(plot_curves, result["faithfulness"], samples)
    _print(result, output_format)


def _print(result: dict, output_format: str) -> None:
    """The record in one of :data:`FORMATS`."""
    if output_format == "json":
        click.echo(strict_json(result, indent=2))  # NaN (no region found) as null
        return
    from guidedbp.cli.evaluate_output import format_csv, format_markdown, format_table
    from guidedbp.cli.evaluate_table import output_width

    if output_format == "markdown":
        click.echo(format_markdown(result))
    elif output_format == "csv":
        click.echo(format_csv(result), nl=False)
    else:
        click.echo(format_table(result, width=output_width()))


@dataclass(frozen=True)
class Settings:
    """What to measure: the --metric list and the metrics' own options."""

    metrics: tuple[str, ...]
    tolerance: float
    steps: int
    baseline: str
    seed: int = 0

    @property
    def masked(self) -> tuple[str, ...]:
        """The mask metrics asked."""
        return tuple(m for m in self.metrics if m in MASK_METRICS)

    @property
    def games(self) -> tuple[str, ...]:
        """The games asked."""
        return tuple(m for m in self.metrics if m in GAMES)

    @property
    def families(self) -> tuple[str, ...]:
        """The metric families' metrics asked."""
        return tuple(m for m in self.metrics if m in METRIC_NAMES)
