"""``guidedbp evaluate``: how well maps point at the object, against ground-truth masks."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import click
import numpy as np

from guidedbp.cli.common import (
    UsageFailure,
    batch_size_option,
    errors_handled,
    import_tensorflow,
    load_options,
    model_options,
    parse_methods,
)
from guidedbp.engine.methods import REGISTRY

TOLERANCE = 15  # pixels, as in Zhang et al. (2016)
# Methods evaluated by default: all but the path-integrated ones (integrated gradients),
# whose many passes per image make them slow (ask for them with --method).
DEFAULT_METHODS = tuple(m.name for m in REGISTRY.values() if not m.path_integrated)


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
@batch_size_option
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
    from guidedbp.api import Explainer
    from guidedbp.models.loading import load_model

    loaded = load_model(model, **load_options(options))
    if shapes is not None:
        samples = _synthetic(shapes, seed, distractors, explain_distractor)
    else:
        samples = _from_files(images, masks, loaded.channels)
    explainer = Explainer(loaded, methods, batch_size=batch_size)  # one forward pass for all
    rows = score(loaded, explainer, samples, tolerance, options)
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


@dataclass(frozen=True)
class Sample:
    """One image to score: its picture, its object's mask, its true class (or None:
    the model's top-1) and, with distractors, the other object's mask."""

    name: str
    picture: np.ndarray
    mask: np.ndarray
    label: int | None = None
    other_mask: np.ndarray | None = None


@dataclass(frozen=True)
class Scored:
    """One map's localisation scores."""

    target: int
    hit: bool
    energy: float
    other_hit: bool | None


def _synthetic(count: int, seed: int, distractors: bool, explain_distractor: bool = False):
    """One :class:`Sample` per synthetic image."""
    from guidedbp.demo import make_scenes

    scenes = make_scenes(count, seed, distractors=distractors)
    if explain_distractor:
        return [Sample(f"shape{i}", scenes.images[i], scenes.distractor_masks[i],
                       int(scenes.distractor_labels[i]), scenes.masks[i]) for i in range(count)]
    others = scenes.distractor_masks if distractors else [None] * count
    return [Sample(f"shape{i}", scenes.images[i], scenes.masks[i], int(scenes.labels[i]),
                   others[i]) for i in range(count)]


def _from_files(inputs, mask_root: str, channels: int):
    from guidedbp.io.images import IMAGE_EXTENSIONS, ImageError, decode_image
    from guidedbp.io.inputs import collect_inputs

    samples, missing = [], []
    for item in collect_inputs(list(inputs)).items:
        stem = os.path.splitext(item.relative)[0]  # its path below the IMAGES folder
        candidates = [os.path.join(mask_root, stem + ext) for ext in (".png", *IMAGE_EXTENSIONS)]
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
        samples.append(Sample(item.path, picture, mask))
    if missing:
        raise UsageFailure(f"no mask in {mask_root} for {len(missing)} image(s): "
                           + ", ".join(missing[:5]))
    return samples


# -- scoring ---------------------------------------------------------------------------


def score(loaded, explainer, samples: list, tolerance: float, options: dict) -> list[dict]:
    """Per method and class: n, pointing-game hit rate, mean energy inside the mask."""
    from guidedbp.demo.metrics import energy_inside, pointing_game
    from guidedbp.models.preprocess import prepare

    per_method: dict[str, list] = {m: [] for m in explainer.methods}
    for start in range(0, len(samples), explainer.batch_size):
        chunk = samples[start : start + explainer.batch_size]
        prepared = [prepare(sample.picture, loaded.input_shape, loaded.preprocess,
                            options.get("size"), options.get("resize", "stretch"))
                    for sample in chunk]
        inputs = np.stack([model_input for _, _, model_input in prepared])
        truth = [sample.label for sample in chunk]
        targets = None if any(t is None for t in truth) else np.array(truth, np.int32)
        explanation = explainer.explain(inputs, targets)
        for method, maps in explanation.by_method.items():
            for index, sample in enumerate(chunk):
                placement = prepared[index][1]
                magnitude = np.abs(placement.to_original(maps[index], max_side=None)
                                   ).max(axis=-1)[None]  # the mask's own size
                other = sample.other_mask
                per_method[method].append(Scored(
                    target=int(explanation.targets[index]),
                    hit=bool(pointing_game(magnitude, sample.mask[None], tolerance)[0]),
                    energy=float(energy_inside(magnitude, sample.mask[None])[0]),
                    other_hit=None if other is None
                    else bool(pointing_game(magnitude, other[None], tolerance)[0]),
                ))
    labels = loaded.labels
    rows = []
    for method, scores in per_method.items():
        classes = sorted({s.target for s in scores})
        for key in [*classes, None]:
            chosen = [s for s in scores if key is None or s.target == key]
            name = "overall" if key is None else (labels[key] if labels and key < len(labels)
                                                  else str(key))
            row = {
                "method": method,
                "class": name,
                "n": len(chosen),
                "pointing_game": round(float(np.mean([s.hit for s in chosen])), 4),
                "energy_inside": round(float(np.mean([s.energy for s in chosen])), 4),
            }
            if chosen[0].other_hit is not None:
                row["pointing_game_other"] = round(
                    float(np.mean([s.other_hit for s in chosen])), 4)
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
