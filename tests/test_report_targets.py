"""OUT/index.html for a run that named its targets (``--target``): each row shows the
target's description where a class run shows the class, and the page filters and sorts
by target; a class run's page is unchanged. Driven in headless Chromium (tests/browser.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from guidedbp.io.report import report_data, write_report
from guidedbp.io.write import save_png

from .browser import browser_fixture, page_fixture  # noqa: F401 (fixtures)
from .test_report import choose, make_out, open_report, record, rows, sample_records

METHODS = ("guided",)


def named_target(stem: str, spec: str, kind: str, description: str, score: float, *,
                 index: int | None = None, label: str | None = None, **extra) -> dict:
    """A manifest target entry of a --target run (the format of tmp/i21/API.md)."""
    slug = re.sub(r"[^\w.-]", "-", spec)
    named = {"spec": spec, "kind": kind, "output": None, "index": index, "name": label,
             **extra}
    return {"class": index, "label": label, "score": score,
            "outputs": {"color": f"{stem}.{slug}.guided.color.png"}, "raw": None,
            "caveats": [], "target": named, "value": score, "description": description}


def region(stem, pixels, value):
    return named_target(stem, "region:circle", "region", f"region:circle ({pixels:,} px)",
                        value, index=1, label="circle", pixels=pixels)


def unit(stem, value):
    return named_target(stem, "unit:2", "unit", f"unit:2 = {value:.2f}", value, index=2)


def similar(stem, value):
    return named_target(stem, "similar:ref.jpg", "similar", f"similar:ref.jpg = {value:.2f}",
                        value, reference="ref.jpg")


def target_records() -> list[dict]:
    return [
        record("a.png", targets=[region("a.png", 1234, 812.5), unit("a.png", 0.73),
                                 similar("a.png", 0.91)], methods=METHODS),
        record("b.png", targets=[region("b.png", 56, 40.25), unit("b.png", 2.5),
                                 similar("b.png", -0.2)], methods=METHODS),
        record("c.png", targets=[unit("c.png", -1.0)], methods=METHODS),
        record("d.png", "error", "not a readable image", methods=METHODS),
    ]


def write_out(folder: Path, records: list[dict]) -> Path:
    """OUT with ``records``' manifest, a small PNG for every output, and its report."""
    folder.mkdir(parents=True, exist_ok=True)
    picture = (np.linspace(0, 255, 24)[None, :, None] * np.ones((24, 1, 3))).astype(np.uint8)
    for item in records:
        for entry in item["targets"]:
            for relative in entry["outputs"].values():
                save_png(folder / relative, picture)
    (folder / "manifest.jsonl").write_text("".join(json.dumps(item) + "\n" for item in records))
    write_report(folder)
    return folder


@pytest.fixture(scope="module")
def target_out(tmp_path_factory) -> Path:
    return write_out(tmp_path_factory.mktemp("targets") / "out", target_records())


TARGET_CELLS = """[...document.querySelectorAll('#rows tbody.record')].map(b =>
    [...b.rows].map(r => [r.querySelector('td.class') ? r.querySelector('td.class').innerText
                                                      : null,
                          r.querySelector('td.score') ? r.querySelector('td.score').innerText
                                                      : null]))"""


def test_the_data_carries_each_targets_spec_and_description():
    data = report_data(target_records())
    first = data["records"][0][3]
    assert [entry[4] for entry in first] == [
        ["region:circle", "region:circle (1,234 px)", "region"],
        ["unit:2", "unit:2 = 0.73", "unit"],
        ["similar:ref.jpg", "similar:ref.jpg = 0.91", "similar"]]
    # a region's class is the model's class; a unit's index and a similarity are none
    assert [entry[:3] for entry in first] == [[1, "circle", 812.5], [None, None, 0.73],
                                              [None, None, 0.91]]
    assert data["classes"] == [[1, "circle"]]
    assert data["targets"] == [["region:circle", 2], ["unit:2", 3], ["similar:ref.jpg", 2]]
    # a class run's data is as it was: four items per target, no targets
    plain = report_data(sample_records())
    assert plain["targets"] == []
    assert {len(entry) for row in plain["records"] for entry in row[3]} == {4}


def test_named_targets_show_their_descriptions(page, target_out):
    open_report(page, target_out)
    assert page.evaluate("[...document.querySelectorAll('#rows th')].map(t => t.textContent)") \
        == ["#", "input", "status", "target", "score", "maps"]
    cells = page.evaluate(TARGET_CELLS)
    assert cells[0] == [["region:circle (1,234 px)", "812.500"], ["unit:2 = 0.73", "0.730"],
                        ["similar:ref.jpg = 0.91", "0.910"]]
    assert cells[1] == [["region:circle (56 px)", "40.250"], ["unit:2 = 2.50", "2.500"],
                        ["similar:ref.jpg = -0.20", "-0.200"]]
    assert cells[2] == [["unit:2 = -1.00", "-1.000"]]
    # a value that is no probability gets no bar
    assert page.evaluate("document.querySelectorAll('#rows td.score .bar').length") == 0
    assert page.evaluate("document.querySelector('#rows td.class').title") == "region:circle"
    assert page.evaluate("document.getElementById('summary').textContent") == (
        "4 inputs: 3 ok, 1 failed, 0 skipped \u00b7 methods guided \u00b7 1 class"
        " \u00b7 3 targets \u00b7 from manifest.jsonl")
    assert page.evaluate("document.querySelectorAll('#rows .thumb img').length") == 7


def test_the_target_filter_and_sort_by_its_value(page, target_out):
    open_report(page, target_out)
    assert page.evaluate("[!document.getElementById('target-control').hidden, "
                         "[...document.getElementById('target-filter').options]"
                         ".map(o => [o.value, o.textContent])]") == [True, [
        ["", "all targets"], ["region:circle", "region:circle (2)"], ["unit:2", "unit:2 (3)"],
        ["similar:ref.jpg", "similar:ref.jpg (2)"]]]
    # the class filter lists the region's class alone, not the unit's index
    assert page.evaluate("[...document.getElementById('class-filter').options]"
                         ".map(o => o.value)") == ["", "1"]
    choose(page, "target-filter", "unit:2")
    assert page.evaluate("location.hash") == "#target=unit%3A2"
    shown = rows(page)
    assert [row["input"] for row in shown] == ["a.png", "b.png", "c.png"]
    assert [row["score"] for row in shown] == ["0.73", "2.5", "-1"]
    assert page.evaluate("[...document.querySelectorAll('#rows tr.match td.class')]"
                         ".map(c => c.textContent)") == ["unit:2 = 0.73", "unit:2 = 2.50"]
    choose(page, "sort", "score-desc")
    assert [row["input"] for row in rows(page)] == ["b.png", "a.png", "c.png"]
    choose(page, "target-filter", "similar:ref.jpg")
    assert [(row["input"], row["score"]) for row in rows(page)] == [("a.png", "0.91"),
                                                                    ("b.png", "-0.2")]
    # a shared view: the controls follow the hash; an unknown target is ignored
    open_report(page, target_out, "#target=region%3Acircle&sort=score-asc")
    assert [row["input"] for row in rows(page)] == ["b.png", "a.png"]
    assert page.evaluate("document.getElementById('target-filter').value") == "region:circle"
    open_report(page, target_out, "#target=unit%3A9")
    assert len(rows(page)) == 4


def test_a_class_run_renders_as_before(page, tmp_path):
    out = make_out(tmp_path / "out", sample_records())
    write_report(out)
    open_report(page, out)
    assert page.evaluate("[...document.querySelectorAll('#rows th')].map(t => t.textContent)") \
        == ["#", "input", "status", "class", "score", "maps"]
    assert page.evaluate("[document.getElementById('target-control').hidden, "
                         "getComputedStyle(document.getElementById('target-control')).display]"
                         ) == [True, "none"]
    assert page.evaluate("document.getElementById('summary').textContent") == (
        "7 inputs: 4 ok, 2 failed, 1 skipped \u00b7 methods guided, gradcam \u00b7 4 classes"
        " \u00b7 from manifest.jsonl")
    cells = page.evaluate(TARGET_CELLS)
    assert cells[0] == [["circle#3", "0.910"], ["square#1", "0.050"]]
    assert page.evaluate("document.querySelectorAll('#rows td.score .bar').length") == 6
    assert page.evaluate("[...document.querySelectorAll('#rows tr.row')]"
                         ".every(r => !('target' in r.dataset))")


def test_every_score_has_one_format(page, tmp_path):
    """A detection's score was shown as JSON wrote it (``1``, ``0.998501``) beside a class's
    ``1.000``: every score has three decimals (powers of ten when tiny or huge), its full
    value in the tooltip; only a probability has a bar."""
    def detection(stem, rank, label, score):
        return named_target(stem, f"det:{rank}", "detection",
                            f"det:{rank} {label} p={score:.3f}, IoU 1.00", score, index=rank,
                            label=label)

    items = [record("scene.png", targets=[detection("scene.png", 1, "ring", 1.0),
                                          detection("scene.png", 2, "star", 0.998501)],
                    methods=METHODS),
             record("tiny.png", targets=[unit("tiny.png", 0.000412),
                                         unit("tiny.png", 2.5e7)], methods=METHODS)]
    classes = [record("shape.png", targets=[
        {"class": 0, "label": "circle", "score": 0.998501, "raw": None,
         "outputs": {"color": "shape.png.guided.color.png"}}], methods=METHODS)]
    texts = []
    for name, records_ in (("det", items), ("classes", classes)):
        open_report(page, write_out(tmp_path / name, records_))
        texts.append(page.evaluate("[...document.querySelectorAll('#rows td.score')]"
                                   ".map(c => [c.firstChild.textContent, c.title, "
                                   "c.querySelectorAll('.bar').length])"))
    assert texts[0] == [["1.000", "1", 0], ["0.999", "0.998501", 0],
                        ["4.1e-4", "0.000412", 0], ["2.500e+7", "25000000", 0]]
    assert texts[1] == [["0.999", "0.998501", 1]]
