"""``guidedbp evaluate``: how well maps point at the object, against ground-truth masks."""

from __future__ import annotations

import json
import os

import click
import numpy as np

from guidedbp.cli.common import (
    UsageFailure,
    errors_handled,
    import_tensorflow,
    load_options,
    model_options,
    parse_methods,
)

TOLERANCE = 15  # pixels, as in Zhang et al. (2016)
# Methods evaluated by default: all but integrated gradients, whose 32 passes per image
# make it the slow one (ask for it with --method).
DEFAULT_METHODS = ("guided", "vanilla", "deconvnet", "gradcam", "guided-gradcam")


@click.command("evaluate")
@click.argument("model")
@click.argument("images", nargs=-1, metavar="[IMAGES]...")
@click.option("--masks", type=click.Path(exists=True, file_okay=False), default=None,
              help="Folder of mask PNGs (white = object) matching IMAGES by relative path "
                   "and stem.")
@click.option("--shapes", type=click.IntRange(min=1), default=None, metavar="N",
              help="Evaluate on N synthetic shapes (guidedbp.demo.make_shapes) instead.")
@click.option("--seed", type=int, default=1000, show_default=True, help="Seed of --shapes.")
@click.option("--distractors", is_flag=True,
              help="With --shapes: add a smaller object of another class to each image.")
@click.option("--explain-distractor", is_flag=True,
              help="With --distractors: explain the distractor's class and score against its "
                   "mask; the table also shows how often the map points at the target instead.")
@click.option("--method", "methods", default=",".join(DEFAULT_METHODS), show_default=True,
              callback=parse_methods, metavar="LIST", help="Comma list of methods, or 'all'.")
@click.option("--tolerance", type=click.FloatRange(min=0), default=TOLERANCE,
              show_default=True, help="Pointing-game tolerance in pixels.")
@click.option("--batch-size", type=click.IntRange(min=1), default=32, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
@model_options
@errors_handled
def evaluate_command(model, images, masks, shapes, seed, distractors, explain_distractor, methods,
                     tolerance, batch_size, as_json, **options) -> None:
    """Localisation of MODEL's maps against ground-truth object masks.

    \b
    For each method: the pointing game (Zhang et al. 2016: is the map's maximum within
    --tolerance pixels of the object?) and the share of the map's energy inside the
    mask, per class and overall. Classes are the true labels with --shapes, else
    the model's top-1 predictions.

    \b
    Examples:
      guidedbp evaluate demo --shapes 500 --seed 1000
      guidedbp evaluate demo sample_images/shapes --masks sample_images/masks/shapes
    """
    if (shapes is None) == (not images):
        raise click.UsageError("give IMAGES with --masks, or --shapes N")
    if images and masks is None:
        raise click.UsageError("IMAGES need --masks DIR")
    if explain_distractor and not distractors:
        raise click.UsageError("--explain-distractor needs --shapes N --distractors")
    import_tensorflow(options["debug"])
    from guidedbp.engine.explainer import Explainer
    from guidedbp.models.loading import load_model

    loaded = load_model(model, **load_options(options))
    if shapes is not None:
        samples = _synthetic(shapes, seed, distractors, explain_distractor)
    else:
        samples = _from_files(images, masks, loaded.channels)
    explainers = {m: Explainer(loaded, m, batch_size=batch_size) for m in methods}
    rows = score(loaded, explainers, samples, tolerance, options)
    result = {
        "model": model,
        "data": (f"{shapes} synthetic shapes, seed {seed}"
                 + (", with distractors" if distractors else "")
                 + (", explaining the distractor's class" if explain_distractor else ""))
        if shapes else masks,
        "tolerance": tolerance,
        "results": rows,
    }
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        click.echo(format_table(result))


# -- data ------------------------------------------------------------------------------


def _synthetic(count: int, seed: int, distractors: bool, explain_distractor: bool = False):
    """(name, picture, mask, class, other object's mask or None) per synthetic image."""
    from guidedbp.demo import make_scenes

    scenes = make_scenes(count, seed, distractors=distractors)
    if explain_distractor:
        return [(f"shape{i}", scenes.images[i], scenes.distractor_masks[i],
                 int(scenes.distractor_labels[i]), scenes.masks[i]) for i in range(count)]
    others = scenes.distractor_masks if distractors else [None] * count
    return [(f"shape{i}", scenes.images[i], scenes.masks[i], int(scenes.labels[i]), others[i])
            for i in range(count)]


def _from_files(inputs, mask_root: str, channels: int):
    from guidedbp.io.images import IMAGE_EXTENSIONS, ImageError, decode_image
    from guidedbp.io.inputs import collect_inputs

    samples, missing = [], []
    for item in collect_inputs(list(inputs)).items:
        candidates = [os.path.join(mask_root, item.output_stem + ext)
                      for ext in (".png", *IMAGE_EXTENSIONS)]
        mask_path = next((c for c in candidates if os.path.isfile(c)), None)
        if mask_path is None:
            missing.append(item.path)
            continue
        try:
            picture = decode_image(item.path, channels=channels)
            mask = decode_image(mask_path, channels=1)[..., 0] > 127
        except ImageError as error:
            raise UsageFailure(str(error)) from None
        if mask.shape != picture.shape[:2]:
            raise UsageFailure(f"{mask_path}: mask is {mask.shape[1]}x{mask.shape[0]}, "
                               f"image is {picture.shape[1]}x{picture.shape[0]}")
        samples.append((item.path, picture, mask, None, None))
    if missing:
        raise UsageFailure(f"no mask in {mask_root} for {len(missing)} image(s): "
                           + ", ".join(missing[:5]))
    return samples


# -- scoring ---------------------------------------------------------------------------


def score(loaded, explainers: dict, samples: list, tolerance: float, options: dict) -> list[dict]:
    """Per method and class: n, pointing-game hit rate, mean energy inside the mask."""
    from guidedbp.demo.metrics import energy_inside, pointing_game
    from guidedbp.models.preprocess import prepare

    per_method: dict[str, list] = {m: [] for m in explainers}
    batch = next(iter(explainers.values())).batch_size
    for start in range(0, len(samples), batch):
        chunk = samples[start : start + batch]
        prepared = [prepare(picture, loaded.input_shape, loaded.preprocess, options.get("size"),
                            options.get("resize", "stretch")) for _, picture, *_ in chunk]
        inputs = np.stack([model_input for _, _, model_input in prepared])
        truth = [label for _, _, _, label, _ in chunk]
        targets = None if any(t is None for t in truth) else np.array(truth, np.int32)
        for method, explainer in explainers.items():
            explanation = explainer.explain(inputs, targets)
            for index, (_, _, mask, _, other) in enumerate(chunk):
                placement = prepared[index][1]
                magnitude = np.abs(placement.to_original(explanation.maps[index])).max(axis=-1)
                hit = pointing_game(magnitude[None], mask[None], tolerance)[0]
                energy = energy_inside(magnitude[None], mask[None])[0]
                other_hit = (None if other is None
                             else bool(pointing_game(magnitude[None], other[None], tolerance)[0]))
                per_method[method].append((int(explanation.targets[index]), bool(hit),
                                           float(energy), other_hit))
    labels = loaded.labels
    rows = []
    for method, scores in per_method.items():
        classes = sorted({s[0] for s in scores})
        for key in [*classes, None]:
            chosen = [s for s in scores if key is None or s[0] == key]
            name = "overall" if key is None else (labels[key] if labels and key < len(labels)
                                                  else str(key))
            row = {
                "method": method,
                "class": name,
                "n": len(chosen),
                "pointing_game": round(float(np.mean([s[1] for s in chosen])), 4),
                "energy_inside": round(float(np.mean([s[2] for s in chosen])), 4),
            }
            if chosen[0][3] is not None:
                row["pointing_game_other"] = round(float(np.mean([s[3] for s in chosen])), 4)
            rows.append(row)
    return rows


def format_table(result: dict) -> str:
    """Two tables, rows = classes then overall, one column per method."""
    rows = result["results"]
    methods = list(dict.fromkeys(r["method"] for r in rows))
    classes = list(dict.fromkeys(r["class"] for r in rows))
    cell = {(r["method"], r["class"]): r for r in rows}
    width = max(10, *(len(m) + 2 for m in methods))
    lines = [f"model {result['model']} on {result['data']}"]
    tables = [("pointing_game", f"pointing game (within {result['tolerance']:g} px)"),
              ("energy_inside", "share of map energy inside the mask")]
    if "pointing_game_other" in rows[0]:
        tables.append(("pointing_game_other", "pointing game on the OTHER object (lower is "
                                              "more class-discriminative)"))
    for key, title in tables:
        lines += ["", title, f"{'class':<12}{'n':>6}" + "".join(f"{m:>{width}}" for m in methods)]
        for name in classes:
            count = cell[(methods[0], name)]["n"] if (methods[0], name) in cell else 0
            values = "".join(
                f"{cell[(m, name)][key]:>{width}.3f}" if (m, name) in cell else " " * width
                for m in methods
            )
            lines.append(f"{name:<12}{count:>6}{values}")
    return "\n".join(lines)
