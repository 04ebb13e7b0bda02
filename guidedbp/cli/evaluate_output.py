"""What ``guidedbp evaluate`` prints and draws: its tables (text fitted to a width, or the
ranking as markdown or CSV: :mod:`guidedbp.cli.evaluate_table`) and its curve figures."""

from __future__ import annotations

import os

import numpy as np

from guidedbp.cli.evaluate_table import (
    WIDTH,
    TextColumn,
    lay_out,
    ranking_csv,
    ranking_markdown,
    ranking_text,
    wrap,
)
from guidedbp.cli.exits import UsageFailure

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


def format_table(result: dict, width: int = WIDTH) -> str:
    """The mask metrics (rows: classes then overall) and the games (rows: images then the
    mean), a column per method; then the ranking (a block per metric family, a row per
    method, each metric's best mean marked: :func:`~guidedbp.cli.evaluate_table.ranking_text`)
    and what was not scored. No line is longer than ``width`` (a table's columns go on in
    further blocks), but for a single word longer than that, such as a long path."""
    lines = [line for text in _title(result) for line in wrap(text, width)]
    if "results" in result:
        lines += _mask_tables(result, width)
    if "segmentation" in result:
        lines += _segmentation_table(result["segmentation"], width)
    if "faithfulness" in result:
        lines += _game_tables(result["faithfulness"], width)
    notes = [line for text in _not_scored(result) for line in wrap(text, width)]
    return "\n".join(lines + ranking_text(result, width) + ([""] + notes if notes else []))


def format_markdown(result: dict) -> str:
    """The ranking as markdown (a table per metric family, the best means in bold) under
    the run's title, then what was not scored, as a list."""
    lines = [f"model `{result['model']}` on {result['data']}"]
    for sentence in _title(result)[1:]:  # what a map explains
        lines += ["", sentence]
    if "segmentation" in result:
        lines += ["", _segmentation_summary(result["segmentation"])]
    notes = _not_scored(result)
    return "\n".join(lines + ranking_markdown(result)
                     + (["", *(f"- {note}" for note in notes)] if notes else []))


def format_csv(result: dict) -> str:
    """The ranking as CSV: a row per method, every metric's mean (with its direction in its
    header) and the count of the method's constant maps."""
    return ranking_csv(result)


def _title(result: dict) -> list[str]:
    """What was evaluated, and what a map explains where that is a region."""
    title = [f"model {result['model']} on {result['data']}"]
    if result.get("target") == "region":
        title.append("each map explains its shape's region: the shape class's logits summed "
                     "over the output pixels of its mask")
    return title


def _score(value) -> str:
    """A score to 3 decimals; ``-`` for none (no map left to score: they were all
    constant)."""
    return "-" if value is None else f"{value:.3f}"


def _blocks(fixed: list[TextColumn], more: list[TextColumn], width: int) -> list[str]:
    """A table's lines, its columns in as many blocks as ``width`` needs (a blank line
    between two)."""
    lines: list[str] = []
    for index, block in enumerate(lay_out(fixed, more, width)):
        lines += ([""] if index else []) + block
    return lines


_MOST_NAMES = 5  # images named in a line of what was not scored


def _not_scored(result: dict) -> list[str]:
    """A line per method with constant maps, then one for the masks with no pixel."""
    lines = [f"{caveat['method']}: {caveat['text']}" for caveat in result.get("caveats", ())]
    empty = result.get("empty_masks", [])
    if empty:
        named = ", ".join(empty[:_MOST_NAMES]) + (", ..." if len(empty) > _MOST_NAMES else "")
        lines.append(f"{len(empty)} image{'s' if len(empty) > 1 else ''} without a mask "
                     f"pixel, not scored: {named}")
    return lines


def _mask_tables(result: dict, width: int) -> list[str]:
    rows = result["results"]
    if not rows:
        return ["", "no mask has a pixel: nothing scored against the masks"]
    methods = list(dict.fromkeys(r["method"] for r in rows))
    classes = list(dict.fromkeys(r["class"] for r in rows))
    cell = {(r["method"], r["class"]): r for r in rows}
    counts = tuple(str(cell[(methods[0], name)]["n"]) if (methods[0], name) in cell else "0"
                   for name in classes)
    tables = [("pointing_game", f"pointing game (within {result['tolerance']:g} px)"),
              ("energy_inside", "share of map energy inside the mask"),
              ("energy_within_reach", f"share of map energy within {result.get('reach')} px "
                                      f"of the mask (the region's receptive field, "
                                      f"{result.get('receptive_field')} px)"),
              ("pointing_game_other", "pointing game on the OTHER object (lower is "
                                      "more class-discriminative)")]
    lines = []
    for key, title in [(key, title) for key, title in tables if key in rows[0]]:
        fixed = [TextColumn(("class",), tuple(classes), least=12),
                 TextColumn(("n",), counts, least=6)]
        scores = [TextColumn((method,), tuple(_score(cell[(method, name)][key])
                                              if (method, name) in cell else ""
                                              for name in classes), least=10)
                  for method in methods]
        lines += ["", *wrap(title, width), *_blocks(fixed, scores, width)]
    return lines


def _segmentation_summary(record: dict) -> str:
    return (f"the model's own segmentation ({record['pixels']} output pixels): pixel "
            f"accuracy {record['pixel_accuracy']:.3f}, mean IoU {record['mean_iou']:.3f}")


def _segmentation_table(record: dict, width: int) -> list[str]:
    """The model's own per-pixel labels against the truth, for reference."""
    ious = [TextColumn((name,), (_score(value),), least=10)
            for name, value in record["iou"].items()]
    return ["", *wrap(_segmentation_summary(record), width),
            *_blocks([TextColumn(("IoU",), ("",), least=4)], ious, width)]


_NAME_WIDTH = 40  # longer image names keep their end
_MOST_ROWS = 20  # images listed one by one in a game's table


def _game_tables(record: dict, width: int) -> list[str]:
    methods = record["methods"]
    names = [image["image"] if len(image["image"]) <= _NAME_WIDTH
             else "..." + image["image"][3 - _NAME_WIDTH:] for image in record["images"]]
    listed = len(names) <= _MOST_ROWS  # hundreds of shapes: the mean says it, --json has all
    lines = []
    for game in next(iter(methods.values())):
        better = "lower" if game == "deletion" else "higher"
        lines += ["", *wrap(f"{game} AUC ({record['baseline']} baseline, {record['steps']} "
                            f"steps; {better} is more faithful)", width)]
        if not listed:
            lines.append(f"({len(names)} images: each image's AUC is in --json)")
        fixed = [TextColumn(("image",), (*(names if listed else ()), "mean"), least=12)]
        aucs = [TextColumn((method,), (*(_score(value) for value in games[game]["auc"]
                                         if listed), _score(games[game]["mean_auc"])),
                           least=10)
                for method, games in methods.items()]
        lines += _blocks(fixed, aucs, width)
    return lines
