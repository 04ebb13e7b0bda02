"""``guidedbp evaluate``'s ranking (issue 34): one block per metric family fitted to 120
columns (the terminal's width on a terminal), full metric names, each metric's best mean
marked by its direction, and the same columns as markdown tables and as CSV.

The cells are read back from the printed text by their right edges, and the best value of
each metric is worked out here from the JSON record and the metric's direction.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import sys

import pytest

from guidedbp.checks.metrics_catalog import CATALOG, HIGHER, LOWER, METRIC_NAMES

from .helpers import assert_one_line_error, run_cli

#: Where each column's mean is in the JSON record, and its direction (the metric families'
#: come from the record itself): name -> (how to read it, direction).
LOCALISATION = {"pointing-game": "pointing_game", "energy-inside-mask": "energy_inside",
                "pointing-game-other-object": "pointing_game_other"}
DIRECTIONS = {"pointing-game": HIGHER, "energy-inside-mask": HIGHER,
              "pointing-game-other-object": LOWER, "deletion": LOWER, "insertion": HIGHER,
              "relative-cost": LOWER}
EVERY_COLUMN = {*LOCALISATION, "deletion", "insertion", *METRIC_NAMES, "relative-cost"}
ALL = ("--shapes", "3", "--method", "all", "--metric", "all", "--costs", "--distractors",
       "--steps", "4")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """16x16 RGB -> Conv2D(4, 3, relu) -> global average -> Dense(6, softmax), seeded: six
    classes, as many as the synthetic shapes, and a conv layer for the CAMs."""
    from tests.models import shapes_cnn

    path = tmp_path_factory.mktemp("table") / "m.keras"
    shapes_cnn(4).save(path)
    return path


@pytest.fixture(scope="module")
def every(model):
    """``--method all --metric all --costs`` on 3 shapes with distractors: the JSON record
    and the table the command prints for it. One run (each costs seconds of CPU): the
    command prints ``format_table`` of the record it would write as JSON, as
    :func:`test_format_chooses_the_output_and_json_is_an_alias` checks on a small run
    (the costs are timings, so another run's table would show other costs)."""
    from guidedbp.cli.evaluate_output import format_table

    top = json.loads(run_cli("evaluate", model, *ALL, "--json", code=0).stdout)
    return top, format_table(top) + "\n"


def means(top: dict) -> dict[str, dict[str, float | None]]:
    """Every column's mean per method, from the JSON record."""
    overall = [row for row in top["results"] if row["class"] == "overall"]
    found = {name: {row["method"]: row[key] for row in overall}
             for name, key in LOCALISATION.items()}
    for game in ("deletion", "insertion"):
        found[game] = {method: record[game]["mean_auc"]
                       for method, record in top["faithfulness"]["methods"].items()}
    for name, entry in top["scores"]["metrics"].items():
        found[name] = {method: value["mean"] for method, value in entry["methods"].items()}
    found["relative-cost"] = dict(top["costs"]["relative"])
    return found


def direction(top: dict, name: str) -> str:
    return DIRECTIONS.get(name) or top["scores"]["metrics"][name]["direction"]


def best(top: dict, name: str) -> set[str]:
    """The methods of the best mean by the metric's direction, at the decimals shown (every
    one of a tie), none where fewer than two methods have a mean."""
    decimals = 2 if name == "relative-cost" else 3
    scored = {method: float(f"{value:.{decimals}f}") for method, value in means(top)[name].items()
              if value is not None}
    if len(scored) < 2:
        return set()
    top_value = (max if direction(top, name) == HIGHER else min)(scored.values())
    return {method for method, value in scored.items() if value == top_value}


def read_ranking(text: str) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """The ranking's cells read back from the text: metric -> method -> cell (its mark
    kept), and metric -> the heading of its family's block. A column's name may be on two
    header lines: the parts that end at the same column are one name."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("ranking: "))
    cells: dict[str, dict[str, str]] = {}
    families: dict[str, str] = {}
    family = None
    index = start + 1
    while index < len(lines):
        line = lines[index]
        if not line.startswith("method "):
            if line and not line.startswith(" ") and (index + 1 < len(lines)) and (
                    lines[index + 1].startswith(("method ", " "))):
                family = line
            index += 1
            continue
        heads = [lines[index - 1]] if lines[index - 1].startswith(" ") else []
        heads.append(line[len("method"):].rjust(len(line)))
        names: dict[int, str] = {}
        for head in heads:
            for part in re.finditer(r"\S+", head):
                names[part.end()] = names.get(part.end(), "") + part.group()
        assert lines[index + 1].startswith("better ")
        ends = [part.end() for part in re.finditer(r"\S+", lines[index + 1])][1:]
        assert sorted(names) == ends, (heads, lines[index + 1])
        index += 2
        while index < len(lines) and lines[index].strip():
            method, *_ = lines[index].split()
            for part in list(re.finditer(r"\S+", lines[index]))[1:]:
                end = part.start() + len(part.group().rstrip("*"))
                cells.setdefault(names[end], {})[method] = part.group()
            index += 1
        for name in names.values():
            families[name] = family
    return cells, families


def test_metric_all_with_every_method_fits_120_columns(every):
    top, printed = every
    assert len(top["faithfulness"]["methods"]) >= 20  # every method ran
    too_wide = [line for line in printed.splitlines() if len(line) > 120]
    assert not too_wide, too_wide  # before: 480 columns
    cells, families = read_ranking(printed)
    assert set(cells) == EVERY_COLUMN  # before: avg-drop, rand-logit, ...
    for name in METRIC_NAMES:
        assert families[name].startswith(f"{CATALOG[name].family.capitalize()}: ")
    for name in (*LOCALISATION, "deletion", "insertion", "relative-cost"):
        expected = ("Localisation" if name in LOCALISATION else
                    "Cost" if name == "relative-cost" else "Faithfulness")
        assert families[name].startswith(expected)


@pytest.mark.parametrize("width", [120, 80])
def test_the_best_mean_of_each_metric_is_marked_by_its_direction(every, width):
    from guidedbp.cli.evaluate_output import format_table

    top, _ = every
    printed = format_table(top) if width == 120 else format_table(top, width=width)
    assert max(len(line) for line in printed.splitlines()) <= width
    cells, _ = read_ranking(printed)
    found = means(top)
    marked = 0
    for name in EVERY_COLUMN:
        decimals = 2 if name == "relative-cost" else 3
        assert set(cells[name]) == set(found[name]), name
        for method, value in found[name].items():
            cell = cells[name][method]
            assert cell.endswith("*") == (method in best(top, name)), (name, method, cell)
            shown = cell.rstrip("*")
            assert shown == ("-" if value is None else f"{value:.{decimals}f}"), (name, method)
            marked += cell.endswith("*")
    assert marked >= len(EVERY_COLUMN)  # every column has a best one
    legend = [line for line in printed.splitlines() if line.startswith("* ")]
    assert legend and "direction" in legend[0]
    assert "docs: Metrics" in " ".join(printed.splitlines()[printed.splitlines().index(legend[0]):])


def test_constant_maps_are_never_best_and_still_named(every):
    from guidedbp.cli.evaluate_output import format_table

    top, _ = every
    printed = format_table(top)
    constant = [method for method, names in top["constant_maps"].items() if names]
    assert constant  # this model's CAMs are all zero on one shape
    cells, _ = read_ranking(printed)
    assert "-" not in {cell.rstrip("*") for cell in cells["relative-cost"].values()}
    assert all(cell != "-*" for column in cells.values() for cell in column.values())
    for method in constant:
        count = len(top["constant_maps"][method])
        assert f"{method}: {count} of 3 maps constant (max_c |map| the same at every pixel), " \
               "not scored" in printed.splitlines()


def markdown_tables(text: str) -> list[list[list[str]]]:
    """Each run of lines starting with ``|``, as rows of cells."""
    tables, current = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            assert line.endswith("|"), line
            current.append([cell.strip() for cell in line[1:-1].split("|")])
        elif current:
            tables.append(current)
            current = []
    return tables


def test_markdown_is_a_table_per_family_with_the_best_in_bold(every):
    from guidedbp.cli.evaluate_output import format_markdown

    top, _ = every
    tables = markdown_tables(format_markdown(top))
    assert len(tables) == 6  # localisation ... cost
    found, seen = means(top), set()
    for header, rule, *rows in tables:
        assert all(len(row) == len(header) for row in (rule, *rows))
        assert all(re.fullmatch(r":?-{3,}:?", cell) for cell in rule)
        assert header[0] == "method"
        for column, title in enumerate(header[1:], 1):
            name, said = re.fullmatch(r"(\S+) \((higher is better|lower is better)\)",
                                      title).groups()
            assert said == direction(top, name)
            seen.add(name)
            decimals = 2 if name == "relative-cost" else 3
            for row in rows:
                method, cell = row[0], row[column]
                value = found[name][method]
                bold = cell.startswith("**") and cell.endswith("**")
                assert bold == (method in best(top, name)), (name, method, cell)
                assert cell.strip("*") == ("-" if value is None else f"{value:.{decimals}f}")
    assert seen == EVERY_COLUMN


def test_csv_is_one_row_per_method_with_every_metric(every):
    from guidedbp.cli.evaluate_output import format_csv

    top, _ = every
    rows = list(csv.DictReader(io.StringIO(format_csv(top))))
    found = means(top)
    methods = list(dict.fromkeys(m for column in found.values() for m in column))
    assert [row["method"] for row in rows] == methods
    headers = list(rows[0])
    assert headers[0] == "method" and headers[-1] == "constant-maps"
    named = {}
    for header in headers[1:-1]:
        name, said = re.fullmatch(r"(\S+) \((higher is better|lower is better)\)",
                                  header).groups()
        assert said == direction(top, name)
        named[name] = header
    assert set(named) == EVERY_COLUMN
    for row in rows:
        method = row["method"]
        for name, header in named.items():
            value = found[name].get(method)
            assert (None if row[header] == "" else float(row[header])) == value, (name, method)
        constant = top["constant_maps"].get(method)
        assert row["constant-maps"] == ("" if constant is None else str(len(constant)))


# -- the command's --format --------------------------------------------------------------


SMALL = ("--shapes", "2", "--method", "guided,gradcam", "--metric",
         "pointing,deletion,sparseness,complexity", "--steps", "3")


def test_format_chooses_the_output_and_json_is_an_alias(model):
    from guidedbp.cli.evaluate_output import format_csv, format_markdown, format_table

    as_json = run_cli("evaluate", model, *SMALL, "--json", code=0).stdout
    assert run_cli("evaluate", model, *SMALL, "--format", "json", code=0).stdout == as_json
    top = json.loads(as_json)
    assert {"results", "faithfulness", "scores", "constant_maps"} <= set(top)
    assert run_cli("evaluate", model, *SMALL, "--format", "csv", code=0).stdout == \
        format_csv(top)
    assert run_cli("evaluate", model, *SMALL, "--format", "markdown", code=0).stdout == \
        format_markdown(top) + "\n"
    text = run_cli("evaluate", model, *SMALL, code=0).stdout
    assert run_cli("evaluate", model, *SMALL, "--format", "text", code=0).stdout == text
    assert text == format_table(top) + "\n"


def test_json_and_another_format_are_refused_in_one_line(model):
    result = run_cli("evaluate", model, *SMALL, "--json", "--format", "csv")
    assert_one_line_error(result, "--json", "--format csv")


@pytest.mark.skipif(sys.platform == "win32", reason="a pseudo-terminal")
def test_the_width_is_the_terminal_s_on_a_terminal_and_120_elsewhere(monkeypatch):
    import pty

    from guidedbp.cli.evaluate_table import output_width

    monkeypatch.setenv("COLUMNS", "150")
    assert output_width() == 120  # pytest's captured stdout is no terminal
    main, follower = pty.openpty()
    try:
        with os.fdopen(follower, "w") as terminal:
            monkeypatch.setattr(sys, "stdout", terminal)
            assert output_width() == 150
            monkeypatch.setenv("COLUMNS", "90")
            assert output_width() == 90
    finally:
        os.close(main)


def test_the_module_examples_hold():
    import doctest

    from guidedbp.cli import evaluate_table

    result = doctest.testmod(evaluate_table)
    assert result.attempted > 0 and result.failed == 0
