"""``guidedbp check MODEL [IMAGES...]``: saliency smoke checks and regression tests for CI."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time

import click

from guidedbp._text import plural, shown_name
from guidedbp.checks.suite import CHECK_NAMES, CHECKS, NEEDS_OPTION
from guidedbp.cli.exits import UsageFailure, as_flags, errors_handled
from guidedbp.cli.flags import load_options, model_options, parse_comma_list
from guidedbp.cli.numbers import Number, Whole
from guidedbp.cli.process import import_tensorflow
from guidedbp.cli.target_options import complete_target, parse_targets
from guidedbp.engine.options import MAX_BATCH_SIZE

DEFAULT_MIN_SIMILARITY = 0.9
DEFAULT_RANDOMIZATION_STEPS = 5
DEFAULT_GENERATED = 4
#: Generated images at most (--generated): each is held and explained by every check.
MAX_GENERATED = 1000


def _parse_target(ctx, param, value):
    """One ``--target`` spec, parsed (``None`` when not given)."""
    return None if value is None else parse_targets(ctx, param, (value,))[0]


def _parse_checks(ctx, param, value):
    if value is None:
        return None
    if value.strip().lower() == "all":
        return ("all",)  # every check that applies
    return parse_comma_list(CHECK_NAMES)(ctx, param, value.lower())


_CHECK_LIST = "\n".join(f"  {check.name:<17} {check.summary}" for check in CHECKS)


@click.command("check", epilog=f"""\b
Checks (default: all that apply; expected-classes needs --expect,
baseline needs --baseline):
{_CHECK_LIST}

\b
Map similarity (randomization, baseline) is the Spearman rank correlation
of the two maps' magnitudes (per pixel, max over channels of |map|): 1 for
the same ordering of pixels by importance, whatever the scale; about 0 for
unrelated maps.

\b
Exit codes: 0 every check passed (info and skip do not fail),
1 some check failed, 2 usage, model or load errors.""")
@click.argument("model")
@click.argument("images", nargs=-1, metavar="[IMAGES]...")
@click.option("--checks", "check_names", default=None, metavar="LIST", callback=_parse_checks,
              help=f"Comma list of checks to run, or 'all': {', '.join(CHECK_NAMES)}.")
@click.option("--expect", type=click.Path(exists=True, dir_okay=False), metavar="FILE",
              help="CSV 'image,class' (class: index or name; image: path or file name): "
                   "adds the expected-classes check.")
@click.option("--baseline", type=click.Path(file_okay=False), metavar="DIR",
              help="Compare maps with those saved by --save-baseline DIR: adds the "
                   "baseline check.")
@click.option("--save-baseline", type=click.Path(file_okay=False), metavar="DIR",
              help="Save each image's guided map (.npy) and baseline.json into DIR, if no "
                   "check fails.")
@click.option("--diff-dir", type=click.Path(file_okay=False), metavar="DIR",
              help="Baseline check: write a picture baseline | current | |difference| of "
                   "each drifted map into DIR as KEY-diff.png (default: a new temporary "
                   "folder); the console line and the JUnit XML name each file.")
@click.option("--min-similarity", type=Number(-1, 1), default=DEFAULT_MIN_SIMILARITY,
              show_default=True,
              help="Baseline check: an image fails when the Spearman rank correlation of its "
                   "map's magnitude with the stored one is below this.")
@click.option("--randomization-steps", type=Whole(min=1),
              default=DEFAULT_RANDOMIZATION_STEPS, show_default=True, metavar="N",
              help="Randomization check: re-draw at most N weighted layers, top first.")
@click.option("--max-randomized-similarity", type=Number(-1, 1), default=None,
              metavar="X",
              help="Make randomization a gate: fail when the maps' Spearman correlation "
                   "with the original at the last step is above X.")
@click.option("--generated", type=Whole(1, MAX_GENERATED), default=DEFAULT_GENERATED,
              show_default=True, metavar="N",
              help="Without IMAGES: check on N seeded smooth random images of the model's "
                   "input size (64x64 for free sizes unless --size).")
@click.option("--seed", type=Whole(), default=0, show_default=True,
              help="Seed of the generated images and of the randomized weights.")
@click.option("--recursive/--no-recursive", default=True, show_default=True,
              help="Walk IMAGES folders recursively.")
@click.option("--batch-size", type=Whole(1, MAX_BATCH_SIZE), default=16,
              show_default=True,
              help="Images per engine pass.")
@click.option("--target", "targets", default=None, metavar="SPEC", callback=_parse_target,
              shell_complete=complete_target,
              help="Check the maps of this target instead of each image's top class: "
                   "class:C, unit:I (a regression), region:C (a segmentation map's class C "
                   "over the pixels the model gives it), similar:IMAGE (an embedding's "
                   "similarity to IMAGE's). Every check names it.")
@click.option("--model-output", default=None, metavar="NAME|INDEX",
              help="The model output to check, for models with several (by name or "
                   "position; guidedbp inspect lists them).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the table.")
@click.option("--junit-xml", type=click.Path(dir_okay=False), metavar="PATH",
              help="Also write a JUnit XML report (one testcase per check) to PATH.")
@model_options
@errors_handled
def check_command(model: str, images: tuple[str, ...], **options) -> None:
    """Run saliency sanity checks on MODEL, on IMAGES (files, folders, globs) or,
    without IMAGES, on generated images.

    \b
    Examples:
      guidedbp check model.keras
      guidedbp check model.keras photos/ --expect expected.csv --junit-xml check.xml
      guidedbp check model.keras photos/ --save-baseline tests/baseline
      guidedbp check model.keras photos/ --baseline tests/baseline
      guidedbp check unet.keras photos/ --target region:road
      guidedbp check heads.keras --model-output age --target unit:0
    """
    started = time.perf_counter()
    names = _chosen_checks(options)
    items = _collect(images, options["recursive"])
    expectations = _read_expect(options["expect"])
    baseline = _read_baseline(options["baseline"])
    if not options["junit_xml"]:  # with it, a model that does not load is a reported check
        from guidedbp.models.loading import check_model_path

        check_model_path(model)  # before TensorFlow is imported: in milliseconds
    import_tensorflow(options["debug"])
    from guidedbp.checks.expected import resolve_expectations
    from guidedbp.checks.report import format_table, junit_xml, summary_line, to_document, to_json
    from guidedbp.checks.results import FAIL, CheckResult
    from guidedbp.checks.session import CheckSession, CheckSettings
    from guidedbp.checks.suite import run_checks
    from guidedbp.io.write import atomic_write_bytes
    from guidedbp.models.loading import ModelLoadError, load_model

    # Keras prints download progress to stdout; stdout is for the report alone.
    with contextlib.redirect_stdout(sys.stderr):
        try:
            loaded = load_model(model, **load_options(options))
        except ModelLoadError as error:
            if options["junit_xml"]:  # CI shows why, though the exit code is 2
                failed_load = CheckResult("loads", FAIL, str(error))
                atomic_write_bytes(options["junit_xml"], junit_xml(
                    model, [failed_load], time.perf_counter() - started))
            raise
        check_images, inputs = _images(loaded, items, options)
        target = _plan_target(loaded, check_images, options)
        settings = CheckSettings(
            randomization_steps=options["randomization_steps"],
            max_randomized_similarity=options["max_randomized_similarity"],
            min_similarity=options["min_similarity"], seed=options["seed"],
            batch_size=options["batch_size"], baseline=baseline,
            run_options=_run_options(loaded, check_images, inputs, options),
            diff_folder=_diff_folder(options),
            target=target,
        )
        session = CheckSession(loaded, check_images, settings)
        try:  # traces once: a model guidedbp cannot explain is a usage error, not a failure
            report = session.report
        except ValueError as error:
            raise UsageFailure(str(error)) from None
        if expectations and target is not None and not target.by_class:
            raise click.UsageError(f"--expect lists classes: it cannot go with --target "
                                   f"{target.planned.spec}")
        if expectations:
            settings.expectations = resolve_expectations(expectations, loaded.labels,
                                                         report.num_classes)
        ctx = click.get_current_context()  # details in the command's own words
        results = [dataclasses.replace(result, detail=as_flags(result.detail, ctx))
                   for result in run_checks(session, names)]
        _remove_if_empty(settings.diff_folder, options["diff_dir"])
        saved = None
        failed = [result.name for result in results if result.failed]
        if options["save_baseline"] and not failed:
            saved = _save(options["save_baseline"], model, session)

    seconds = time.perf_counter() - started
    keys = [image.key for image in check_images]
    if options["junit_xml"]:
        atomic_write_bytes(options["junit_xml"], junit_xml(model, results, seconds))
    if options["as_json"]:
        named = {} if target is None else {"target": {
            "spec": None if target.planned is None else target.planned.spec,
            "output": target.output}}
        click.echo(to_json(to_document(model, keys, results, seconds, inputs=inputs,
                                       baseline_saved=saved, **named)))
    else:
        click.echo(f"guidedbp check {shown_name(model)}: {inputs}")
        if target is not None:
            click.echo(f"target: {shown_name(target.spec)}")
        click.echo(format_table(results))
        click.echo(summary_line(results, seconds))
    if saved:
        click.echo(f"baseline saved: {shown_name(saved)}", err=True)
    elif options["save_baseline"]:
        click.echo(f"baseline not saved: {plural(len(failed), 'check')} failed "
                   f"({', '.join(failed)})",
                   err=True)
    sys.exit(1 if failed else 0)


def _chosen_checks(options: dict) -> tuple[str, ...]:
    from guidedbp.checks.suite import default_checks

    if options["baseline"] and options["save_baseline"]:
        raise click.UsageError("--baseline and --save-baseline cannot be used together")
    if options["diff_dir"] and not options["baseline"]:
        raise click.UsageError("--diff-dir holds the baseline check's pictures: it needs "
                               "--baseline")
    names = options["check_names"]
    if names is None or names == ("all",):
        return default_checks(expect=bool(options["expect"]), baseline=bool(options["baseline"]))
    given = {"expected-classes": options["expect"], "baseline": options["baseline"]}
    for name, option in NEEDS_OPTION.items():
        if name in names and not given[name]:
            raise click.UsageError(f"the {name} check needs {option}")
    return names


def _collect(images: tuple[str, ...], recursive: bool):
    if not images:
        return None
    from guidedbp.io.inputs import InputError, collect_inputs

    try:
        # check names images its own way (image_keys): a/cat.jpg and b/cat.jpg are fine
        collected = collect_inputs(list(images), recursive, unique_names=False)
    except InputError as error:
        raise click.BadParameter(str(error), param_hint="IMAGES") from None
    if not collected.items:
        raise UsageFailure(f"no images found in {', '.join(images)} "
                           f"({plural(collected.passed_over, 'other file')} passed over)")
    return collected.items


def _read_expect(path: str | None):
    if not path:
        return None
    from guidedbp.checks.expected import read_expectations

    try:
        return read_expectations(path)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--expect") from None


def _read_baseline(folder: str | None):
    if not folder:
        return None
    from guidedbp.checks.baseline import BaselineError, load_baseline

    try:
        return load_baseline(folder)
    except BaselineError as error:
        raise click.BadParameter(str(error), param_hint="--baseline") from None


def _diff_folder(options: dict) -> str | None:
    """Where the baseline check's diff pictures go: --diff-dir, or a new temporary
    folder (removed again when no map drifted); ``None`` without --baseline."""
    if not options["baseline"]:
        return None
    if options["diff_dir"]:
        return options["diff_dir"]
    import tempfile

    return tempfile.mkdtemp(prefix="guidedbp-check-diffs-")


def _remove_if_empty(folder: str | None, given: str | None) -> None:
    """Remove the temporary diff folder if nothing was written into it."""
    import os

    if folder is not None and not given:
        with contextlib.suppress(OSError):
            os.rmdir(folder)


def _images(loaded, items, options):
    """The run's CheckImage list and a phrase saying what they are."""
    from guidedbp.checks.images import generated_images, image_files

    if items is not None:
        found = image_files(items, loaded.input_shape, loaded.channels, loaded.preprocess,
                            options["size"], options["resize"])
        return found, f"{len(found)} images"
    count, seed = options["generated"], options["seed"]
    made = generated_images(loaded.input_shape, loaded.preprocess, count, seed,
                            options["size"])
    height, width = made[0].pixels.shape[:2]
    return made, f"{count} generated {height}x{width} images (seed {seed})"


def _plan_target(loaded, images, options: dict):
    """The run's :class:`~guidedbp.checks.check_target.CheckTarget` (``None`` without
    --target and --model-output, but for a one-unit output with no sigmoid or softmax:
    unit:0); one line, exit 2, for one that cannot fit the model."""
    from guidedbp.checks.check_target import plan_check_target
    from guidedbp.errors import ArgumentError

    decoded = [image.pixels.shape for image in images if image.pixels is not None]
    image_shape = decoded[0] if decoded else loaded.input_shape
    try:
        return plan_check_target(loaded, options["targets"], options["model_output"],
                                 tuple(image_shape))
    except ArgumentError as error:
        raise UsageFailure(as_flags(str(error), click.get_current_context())) from None


def _run_options(loaded, images, inputs: str, options: dict) -> dict:
    """What made this run's maps: a baseline is comparable only where these agree."""
    height, width, _ = loaded.input_shape
    if height is not None and width is not None:
        size = [height, width]
    elif options["size"]:
        size = list(options["size"])
    elif images and images[0].path is None:
        size = list(images[0].pixels.shape[:2])
    else:
        size = None  # each image's own size
    generated = images[0].path is None if images else False
    chosen = {
        "method": "guided",
        "preprocess": loaded.preprocess,
        "resize": options["resize"],
        "size": size,
        "inputs": (f"generated: {len(images)}, seed {options['seed']}" if generated else "files"),
    }
    target = _target_option(options)
    if target is not None:  # a class run's baseline stays as it was: no target key
        chosen["target"] = target
    return chosen


def _target_option(options: dict) -> str | None:
    """What the maps explain, as a baseline records it: ``None`` for each image's top
    class; the spec, and the output where one is named (``unit:0 of output 'age'``)."""
    spec = None if options["targets"] is None else options["targets"].text
    output = options["model_output"]
    if output is None:
        return spec
    return f"{spec or 'top class'} of output {output!r}"


def _save(folder: str, model: str, session) -> str:
    from guidedbp.checks.baseline import save_baseline

    explained = session.explained
    entries = [{"key": image.key, "path": image.path, "class": explained[image.key].target,
                "map": explained[image.key].map} for image in session.usable]
    return save_baseline(folder, model, session.settings.run_options, entries)
