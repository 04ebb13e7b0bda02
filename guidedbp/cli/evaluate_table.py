"""``guidedbp evaluate``'s ranking: each metric's mean per method, one block per metric
family (localisation, faithfulness, robustness, complexity, randomisation, cost), the best
mean of each metric marked by its direction; as text fitted to a width, as markdown tables
or as CSV (one row per method). Also the layout of its other text tables: columns that do
not fit the width go on into further blocks.

>>> column = Column("deletion", "faithfulness", LOWER, {"a": 0.2, "b": 0.1, "c": None})
>>> sorted(column.best)
['b']
>>> sorted(Column("pointing-game", "localisation", HIGHER, {"a": 0.9996, "b": 1.0}).best)
['a', 'b']
>>> split_name("average-increase")
('average-', 'increase')
"""

from __future__ import annotations

import csv
import io
import shutil
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

from guidedbp.checks.metrics_catalog import HIGHER, LOWER

__all__ = ["WIDTH", "Column", "TextColumn", "columns", "lay_out", "output_width",
           "ranking_csv", "ranking_markdown", "ranking_text", "split_name", "wrap"]

#: Columns of text where stdout is not a terminal (and a terminal's, where it says none).
WIDTH = 120
_NARROWEST = 40  # a terminal narrower than this still gets 40 columns
_GAP = 2  # spaces before a right-aligned column, after the left-aligned first one

#: The mask metrics' columns: (key of the ``overall`` rows, full name, direction).
_LOCALISATION = (("pointing_game", "pointing-game", HIGHER),
                 ("energy_inside", "energy-inside-mask", HIGHER),
                 ("energy_within_reach", "energy-within-reach", HIGHER),
                 ("pointing_game_other", "pointing-game-other-object", LOWER))
_GAMES = (("deletion", LOWER), ("insertion", HIGHER))

#: Each family's heading, in the order of the blocks: the question its metrics answer.
_HEADINGS = {
    "localisation": "Localisation (with masks): does the map point at the object?",
    "faithfulness": "Faithfulness: does the model need the pixels the map ranks first?",
    "robustness": "Robustness: does the map stay the same under a little noise?",
    "complexity": "Complexity: how few pixels does the map concentrate on?",
    "randomisation": "Randomisation: does the map change with the class explained?",
    "cost": "Cost: time per image relative to {reference}, each method alone on one batch "
            "of {images} images (median of {rounds} runs)",
}


def output_width() -> int:
    """The terminal's width where stdout is one (``COLUMNS`` first, as
    :func:`shutil.get_terminal_size` reads it), else :data:`WIDTH`."""
    try:
        terminal = sys.stdout.isatty()
    except (AttributeError, ValueError):  # no stream, or a closed one
        terminal = False
    if not terminal:
        return WIDTH
    return max(_NARROWEST, shutil.get_terminal_size((WIDTH, 24)).columns)


def wrap(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` (a word longer than that, e.g. a path, whole)."""
    return textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False) or [""]


# -- the columns -----------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    """One metric of the ranking.

    Attributes:
        name: Its full name (the ``--metric`` name of a metric family's metric).
        family: The block it goes in (a key of the headings).
        direction: :data:`~guidedbp.checks.metrics_catalog.HIGHER` or ``LOWER``.
        means: Per method its mean; None where no map was scored (all constant).
        decimals: What the tables show.
    """

    name: str
    family: str
    direction: str
    means: dict
    decimals: int = 3

    @property
    def best(self) -> set[str]:
        """The methods of the best mean by the direction, at the precision shown (all of a
        tie: a table does not mark one of two equal numbers); none where fewer than two
        methods have a mean (a lone value beats nothing)."""
        scored = {method: round(value, self.decimals) for method, value in self.means.items()
                  if value is not None}
        if len(scored) < 2:
            return set()
        top = (max if self.direction == HIGHER else min)(scored.values())
        return {method for method, value in scored.items() if value == top}

    def title(self) -> str:
        """Its name and direction in one header: ``deletion (lower is better)``."""
        return f"{self.name} ({self.direction})"


def columns(result: dict) -> list[Column]:
    """Every metric of an ``evaluate`` record with a mean per method, block by block."""
    found: list[Column] = []
    overall = [row for row in result.get("results", ()) if row.get("class") == "overall"]
    for key, name, direction in _LOCALISATION:
        means = {row["method"]: row[key] for row in overall if key in row}
        if means:
            found.append(Column(name, "localisation", direction, means))
    games = result.get("faithfulness", {}).get("methods", {})
    for game, direction in _GAMES:
        means = {method: record[game]["mean_auc"] for method, record in games.items()
                 if game in record}
        if means:
            found.append(Column(game, "faithfulness", direction, means))
    for name, entry in result.get("scores", {}).get("metrics", {}).items():
        found.append(Column(name, entry["family"], entry["direction"],
                            {method: value["mean"] for method, value in entry["methods"].items()}))
    if "costs" in result:
        found.append(Column("relative-cost", "cost", LOWER, dict(result["costs"]["relative"]),
                            decimals=2))
    order = list(_HEADINGS)
    return sorted(found, key=lambda column: order.index(column.family))  # a stable sort


def _methods(found: Sequence[Column]) -> list[str]:
    """The methods of ``found``, each where it first appears."""
    return list(dict.fromkeys(method for column in found for method in column.means))


def _families(found: list[Column]) -> list[tuple[str, list[Column]]]:
    families: dict[str, list[Column]] = {}
    for column in found:
        families.setdefault(column.family, []).append(column)
    return list(families.items())


def _heading(family: str, result: dict) -> str:
    return _HEADINGS[family].format(**result.get("costs", {}))


def _intro(result: dict) -> str:
    scores, games = result.get("scores", {}), result.get("faithfulness", {})
    images = scores.get("images", len(games.get("images", ())) or None)
    said = [f"over {images} images"] if images else []
    if "seed" in scores:
        said.append(f"seed {scores['seed']}")
    return ("ranking: each metric's mean per method" + (f" ({', '.join(said)})" if said else "")
            + (f"; cost per image relative to {result['costs']['reference']}"
               if "costs" in result else ""))


def _legend(found: list[Column], mark: str) -> str:
    """One sentence: what is marked, and how to read metrics that disagree."""
    constant = any(value is None for column in found for value in column.means.values())
    several = len({column.family for column in found} - {"cost"}) > 1
    return (f"{mark} marks each metric's best mean by its direction, as shown, every one of "
            "a tie" + ("; - means no map was scored (all constant)" if constant else "")
            + ("; the families answer the different questions of their headings and "
               "disagree by design (a map can point at the object without the model "
               "needing those pixels), so rank by the family of your question"
               if several else "")
            + " (docs: Metrics).")


def _cell(column: Column, method: str, bold: bool = False) -> str:
    """A mean as the tables show it ("" where the method has none, ``-`` where no map was
    scored), marked where it is the best."""
    if method not in column.means:
        return ""
    value = column.means[method]
    shown = "-" if value is None else f"{value:.{column.decimals}f}"
    if bold:
        return f"**{shown}**" if method in column.best else shown
    return shown + ("*" if method in column.best else " ")


# -- text --------------------------------------------------------------------------------


@dataclass(frozen=True)
class TextColumn:
    """A column of a text table: its header (one line or more, bottom-aligned), its cells
    (one per row) and its narrowest width, the spaces before it included."""

    head: tuple[str, ...]
    cells: tuple[str, ...]
    least: int = 0

    @property
    def width(self) -> int:
        return max([self.least, *(len(text) + _GAP for text in (*self.head, *self.cells))])


def lay_out(fixed: Sequence[TextColumn], more: Sequence[TextColumn], width: int
            ) -> list[list[str]]:
    """A table in blocks of at most ``width`` columns: each block the ``fixed`` columns
    (the first left-aligned: the rows' names), then as many of ``more`` (right-aligned)
    as fit, the rest in the next blocks (one column at least per block)."""
    room = width - sum(column.width for column in fixed)
    groups: list[list[TextColumn]] = [[]]
    used = 0
    for column in more:
        if groups[-1] and used + column.width > room:
            groups.append([])
            used = 0
        groups[-1].append(column)
        used += column.width
    return [_render([*fixed, *group]) for group in groups]


def _render(table: list[TextColumn]) -> list[str]:
    height = max(len(column.head) for column in table)
    heads = [[""] * (height - len(column.head)) + list(column.head) for column in table]
    rows = [*zip(*heads), *zip(*(column.cells for column in table))]
    widths = [column.width for column in table]
    return [(row[0].ljust(widths[0]) + "".join(
        text.rjust(size) for text, size in zip(row[1:], widths[1:]))).rstrip() for row in rows]


def split_name(name: str) -> tuple[str, ...]:
    """A long name on two lines, cut after the hyphen that leaves the shorter longest line
    (a name without a hyphen stays whole)."""
    cuts = [index + 1 for index, char in enumerate(name) if char == "-"]
    if not cuts:
        return (name,)
    cut = min(cuts, key=lambda at: max(at, len(name) - at))
    return name[:cut], name[cut:]


def _block(found: list[Column], methods: list[str], two_lines: bool) -> list[TextColumn]:
    """The text columns of one family; a name's lines and the direction end one character
    before the mark."""
    return [TextColumn(tuple(part + " " for part in (split_name(column.name) if two_lines
                                                     else (column.name,))),
                       ("higher " if column.direction == HIGHER else "lower ",
                        *(_cell(column, method) for method in methods)), least=10)
            for column in found]


def ranking_text(result: dict, width: int = WIDTH) -> list[str]:
    """The ranking as text lines of at most ``width`` columns: per family its heading,
    then a row per method and a column per metric (its full name, on two lines where that
    saves a block; ``better`` says its direction), split into further blocks where the
    family does not fit; then the legend. No lines where nothing has a mean per method."""
    found = columns(result)
    if not found:
        return []
    lines = ["", *wrap(_intro(result), width)]
    for family, members in _families(found):
        methods = [method for method in _methods(found) if method in _methods(members)]
        names = TextColumn(("method",), ("better", *methods), least=12)
        blocks = lay_out([names], _block(members, methods, False), width)
        if len(blocks) > 1:
            wrapped = lay_out([names], _block(members, methods, True), width)
            blocks = wrapped if len(wrapped) < len(blocks) else blocks
        lines += ["", *wrap(_heading(family, result), width)]
        for index, block in enumerate(blocks):
            lines += ([""] if index else []) + block
    return [*lines, "", *wrap(_legend(found, "*"), width)]


# -- markdown and CSV --------------------------------------------------------------------


def _markdown_cell(text: str) -> str:
    return text.replace("|", "\\|")


def ranking_markdown(result: dict) -> list[str]:
    """The ranking as markdown: per family a heading and a table (a row per method, a
    column per metric titled with its direction, the best mean in bold), then the legend."""
    found = columns(result)
    if not found:
        return []
    lines = ["", _intro(result) + "."]
    for family, members in _families(found):
        methods = [method for method in _methods(found) if method in _methods(members)]
        lines += ["", f"### {_markdown_cell(_heading(family, result))}", "",
                  "| method | " + " | ".join(column.title() for column in members) + " |",
                  "| --- |" + " ---: |" * len(members)]
        lines += [f"| {method} | " + " | ".join(_cell(column, method, bold=True)
                                               for column in members) + " |"
                  for method in methods]
    return [*lines, "", _legend(found, "**Bold**")]


def ranking_csv(result: dict) -> str:
    """The ranking as CSV: a row per method, a column per metric titled with its direction
    (``deletion (lower is better)``), each mean as the JSON has it (empty where none), and
    the count of the method's constant maps (not scored; empty for a method only timed)."""
    found = columns(result)
    constant = result.get("constant_maps", {})
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["method", *(column.title() for column in found), "constant-maps"])
    for method in _methods(found):
        writer.writerow([method, *("" if column.means.get(method) is None
                                   else repr(float(column.means[method])) for column in found),
                         len(constant[method]) if method in constant else ""])
    return buffer.getvalue()
