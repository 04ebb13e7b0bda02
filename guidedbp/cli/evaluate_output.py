"""What ``guidedbp evaluate`` prints and draws: its tables and its curve figures."""

from __future__ import annotations

import os

import numpy as np

from guidedbp.cli.common import UsageFailure

# -- figures ---------------------------------------------------------------------------


def _figure_path(folder: str, sample, game: str) -> str:
    """Where one image's figure of ``game`` goes: its output stem (``Sample.stem``, else
    the rule of ``guidedbp explain``) under ``folder``."""
    from guidedbp.io.inputs import output_stem

    return os.path.join(folder, f"{sample.stem or output_stem(sample.name)}.{game}.png")


def check_figure_targets(folder: str, samples: list, games) -> None:
    """Refuse to replace a file that is not a figure guidedbp wrote."""
    from guidedbp.plot import is_own_figure

    for sample in samples:
        for game in games:
            path = _figure_path(folder, sample, game)
            if os.path.lexists(path) and not is_own_figure(path):
                raise UsageFailure(f"{path} exists and is not a figure guidedbp wrote: "
                                   "move it, or choose another --plot-curves folder")


def write_curves(folder: str, record: dict, samples: list) -> None:
    """One PNG per image and game: a curve per method, its AUC in the legend."""
    from guidedbp.io.write import atomic_write_bytes
    from guidedbp.plot import figure_bytes, plot_curves

    for index, (sample, image) in enumerate(zip(samples, record["images"])):
        for game in next(iter(record["methods"].values())):
            # A constant map's curve (its pixels in row-major order) is left out.
            curves = {method: np.array(games[game]["curves"][index])
                      for method, games in record["methods"].items()
                      if games[game]["auc"][index] is not None}
            if not curves:
                continue
            title = f"{sample.name}: {image['class']} (class {image['target']})"
            if len(title) > 70:
                title = "..." + title[-67:]
            figure = plot_curves(curves, title, game=game)
            atomic_write_bytes(_figure_path(folder, sample, game), figure_bytes(figure, "png"))


# -- output ----------------------------------------------------------------------------


def format_table(result: dict) -> str:
    """The mask metrics (rows: classes then overall) and the games (rows: images then the
    mean), one column per method; with the metric families, a ranking of every metric
    (rows: methods, the direction under each metric, then the costs)."""
    lines = [f"model {result['model']} on {result['data']}"]
    if result.get("target") == "region":
        lines.append("each map explains its shape's region: the shape class's logits summed "
                     "over the output pixels of its mask")
    if "results" in result:
        lines += _mask_tables(result)
    if "segmentation" in result:
        lines += _segmentation_table(result["segmentation"])
    if "faithfulness" in result:
        lines += _game_tables(result["faithfulness"])
    if "scores" in result:  # the metric families: one ranking of every metric and the costs
        from guidedbp.cli.evaluate_metrics import ranking_table

        return "\n".join(lines + ranking_table(result) + _not_scored(result))
    if "costs" in result:
        costs = result["costs"]
        width = max(10, *(len(m) + 2 for m in costs["relative"]))
        lines += ["", f"cost per image relative to {costs['reference']} (each method alone, "
                      f"one batch of {costs['images']}, median of {costs['rounds']} runs)",
                  "".join(f"{m:>{width}}" for m in costs["relative"]),
                  "".join(f"{v:>{width}.2f}" for v in costs["relative"].values())]
    return "\n".join(lines + _not_scored(result))


def _cell(value, width: int) -> str:
    """A score right-aligned to 3 decimals; ``-`` for none (no map left to score: they
    were all constant)."""
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.3f}"


_MOST_NAMES = 5  # images named in a line of what was not scored


def _not_scored(result: dict) -> list[str]:
    """A line per method with constant maps, then one for the masks with no pixel."""
    lines = [f"{caveat['method']}: {caveat['text']}" for caveat in result.get("caveats", ())]
    empty = result.get("empty_masks", [])
    if empty:
        named = ", ".join(empty[:_MOST_NAMES]) + (", ..." if len(empty) > _MOST_NAMES else "")
        lines.append(f"{len(empty)} image{'s' if len(empty) > 1 else ''} without a mask "
                     f"pixel, not scored: {named}")
    return ["", *lines] if lines else []


def _mask_tables(result: dict) -> list[str]:
    rows = result["results"]
    if not rows:
        return ["", "no mask has a pixel: nothing scored against the masks"]
    methods = list(dict.fromkeys(r["method"] for r in rows))
    classes = list(dict.fromkeys(r["class"] for r in rows))
    cell = {(r["method"], r["class"]): r for r in rows}
    width = max(10, *(len(m) + 2 for m in methods))
    tables = [("pointing_game", f"pointing game (within {result['tolerance']:g} px)"),
              ("energy_inside", "share of map energy inside the mask"),
              ("energy_within_reach", f"share of map energy within {result.get('reach')} px "
                                      f"of the mask (the region's receptive field, "
                                      f"{result.get('receptive_field')} px)"),
              ("pointing_game_other", "pointing game on the OTHER object (lower is "
                                      "more class-discriminative)")]
    lines = []
    for key, title in [(key, title) for key, title in tables if key in rows[0]]:
        lines += ["", title, f"{'class':<12}{'n':>6}" + "".join(f"{m:>{width}}" for m in methods)]
        for name in classes:
            count = cell[(methods[0], name)]["n"] if (methods[0], name) in cell else 0
            values = "".join(
                _cell(cell[(m, name)][key], width) if (m, name) in cell else " " * width
                for m in methods
            )
            lines.append(f"{name:<12}{count:>6}{values}")
    return lines


def _segmentation_table(record: dict) -> list[str]:
    """The model's own per-pixel labels against the truth, for reference."""
    ious = record["iou"]
    width = max(10, *(len(name) + 2 for name in ious))
    return ["", f"the model's own segmentation ({record['pixels']} output pixels): pixel "
                f"accuracy {record['pixel_accuracy']:.3f}, mean IoU {record['mean_iou']:.3f}",
            "IoU " + "".join(f"{name:>{width}}" for name in ious),
            "    " + "".join(" " * (width - 3) + "  -" if value is None else
                             f"{value:>{width}.3f}" for value in ious.values())]


_NAME_WIDTH = 40  # longer image names keep their end
_MOST_ROWS = 20  # images listed one by one in a game's table


def _game_tables(record: dict) -> list[str]:
    methods = record["methods"]
    width = max(10, *(len(m) + 2 for m in methods))
    names = [image["image"] if len(image["image"]) <= _NAME_WIDTH
             else "..." + image["image"][3 - _NAME_WIDTH:] for image in record["images"]]
    column = max(12, *(len(name) + 2 for name in names))
    lines = []
    for game in next(iter(methods.values())):
        better = "lower" if game == "deletion" else "higher"
        lines += ["", f"{game} AUC ({record['baseline']} baseline, {record['steps']} steps; "
                      f"{better} is more faithful)",
                  f"{'image':<{column}}" + "".join(f"{m:>{width}}" for m in methods)]
        if len(names) > _MOST_ROWS:  # hundreds of shapes: the mean says it, --json has all
            lines.append(f"({len(names)} images: each image's AUC is in --json)")
        else:
            for index, name in enumerate(names):
                lines.append(f"{name:<{column}}" + "".join(
                    _cell(methods[m][game]["auc"][index], width) for m in methods))
        lines.append(f"{'mean':<{column}}" + "".join(
            _cell(methods[m][game]["mean_auc"], width) for m in methods))
    return lines
