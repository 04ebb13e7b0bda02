"""OUT/index.html: the report page, its data block, the file's safety, and the page itself
driven in a headless Chromium (tests/browser.py).

OUT folders are built by hand (a manifest and tiny PNGs), so no TensorFlow is needed. The
browser tests share one Chromium for the module; each gets a fresh tab.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

import numpy as np
import pytest
from PIL import Image

from guidedbp.io.report import (
    GENERATOR_MARK,
    REPORT,
    ReportError,
    is_own_report,
    report_data,
    report_html,
    write_report,
)
from guidedbp.io.write import save_png

from .browser import WINDOW, browser_fixture, page_fixture  # noqa: F401 (fixtures)
from .helpers import assert_one_line_error, run_cli

METHODS = ("guided", "gradcam")
RENDERS = ("color", "overlay")
COLUMNS = [f"{method}.{render}" for method in METHODS for render in RENDERS]
HOSTILE = "<script>alert(1)</script>\"&'.png"
MARKUP_REASON = "cannot read it: <img src=x onerror=\"window.pwned=1\"> & more"


def target(stem: str, number: int, label: str | None, score: float,
           methods=METHODS, renders=RENDERS, named: bool = False) -> dict:
    """A manifest target whose outputs follow guidedbp's naming (pipeline/naming.py)."""
    if named:
        stem = f"{stem}.{number}"
    if len(methods) == 1:
        outputs = {name: f"{stem}.{methods[0]}.{name}.png" for name in renders}
    else:
        outputs = {f"{m}.{name}": f"{stem}.{m}.{name}.png" for m in methods for name in renders}
    return {"class": number, "label": label, "score": score, "outputs": outputs, "raw": None}


def record(name: str, status: str = "ok", error: str | None = None, targets=(),
           methods=METHODS) -> dict:
    """A manifest record as stages.record() writes it."""
    first = targets[0] if targets else {}
    return {"input": name, "status": status, "error": error, "class": first.get("class"),
            "label": first.get("label"), "score": first.get("score"),
            "method": ",".join(methods), "outputs": first.get("outputs", {}),
            "raw": first.get("raw"), "targets": list(targets)}


def make_out(folder: Path, records: list[dict], pictures: bool = True) -> Path:
    """OUT with ``records`` as manifest.jsonl and, with ``pictures``, a small PNG for every
    output: a colour per class, a gradient so thumbnails are not flat."""
    folder.mkdir(parents=True, exist_ok=True)
    ramp = np.linspace(0, 1, 24)[None, :, None] * np.linspace(0.3, 1, 24)[:, None, None]
    for item in records if pictures else ():
        for entry in item["targets"]:
            colour = np.array([(entry["class"] * 97) % 256, 120 + entry["class"] * 40 % 136, 200])
            picture = (ramp * colour).astype(np.uint8)
            for relative in entry["outputs"].values():
                save_png(folder / relative, picture)
    (folder / "manifest.jsonl").write_text(
        "".join(json.dumps(item) + "\n" for item in records), encoding="utf-8")
    return folder


def sample_records() -> list[dict]:
    cat = "photos/cat 1.jpg"  # top-2: class names in the output names
    return [
        record(cat, targets=[target(cat, 3, "circle", 0.91, named=True),
                             target(cat, 1, "square", 0.05, named=True)]),
        record("photos/a#b%c?d.jpg", targets=[target("photos/a#b%c?d.jpg", 1, "square", 0.62)]),
        record(HOSTILE, targets=[target(HOSTILE, 2, "star <b>", 0.33)]),
        record("broken.png", "error", "not a readable image (cannot identify image file)"),
        record("huge.png", "error", MARKUP_REASON),
        record("old.png", "skipped", targets=[target("old.png", 0, None, 0.4)]),
        record("zeta.png", targets=[target("zeta.png", 3, "circle", 0.99)]),
    ]


# -- the data block ----------------------------------------------------------------------------


def data_block(page: str) -> str:
    match = re.search(r'<script type="application/json" id="records">(.*?)</script>', page,
                      re.S)
    assert match, "no records block"
    return match.group(1)


def test_report_data_is_compact_and_complete():
    data = report_data(sample_records())
    assert data["columns"] == COLUMNS
    assert data["classes"] == [[0, None], [1, "square"], [2, "star <b>"], [3, "circle"]]
    assert data["summary"] == {"inputs": 7, "statuses": {"ok": 4, "error": 2, "skipped": 1},
                               "methods": ["guided", "gradcam"], "classes": 4,
                               "source": "manifest.jsonl", "caveats": []}
    cat = data["records"][0]
    assert cat[:3] == ["photos/cat 1.jpg", "ok", None]
    assert [entry[:3] for entry in cat[3]] == [[3, "circle", 0.91], [1, "square", 0.05]]
    assert cat[3][0][3][0] == "photos/cat%201.jpg.3.guided.color.png"
    assert data["records"][1][3][0][3][0] == "photos/a%23b%25c%3Fd.jpg.guided.color.png"
    assert data["records"][3] == ["broken.png", "error",
                                  "not a readable image (cannot identify image file)", [], []]


def test_one_method_outputs_are_named_by_method_and_render():
    item = record("a.png", targets=[target("a.png", 0, "x", 0.5, methods=("guided",),
                                           renders=("color", "panel"))], methods=("guided",))
    data = report_data([item])
    assert data["columns"] == ["guided.color", "guided.panel"]
    assert data["records"][0][3][0][3] == ["a.png.guided.color.png", "a.png.guided.panel.png"]


def test_paths_that_leave_out_get_no_link():
    outputs = {"a": "/etc/passwd", "b": "../up.png", "c": "x//y.png", "d": "javascript:x()",
               "e": "ok.png"}
    item = {"input": "a.png", "status": "ok", "method": "guided,gradcam",
            "targets": [{"class": 0, "label": None, "score": 0.5, "outputs": outputs}]}
    assert report_data([item])["records"][0][3][0][3] == [None, None, None, "javascript%3Ax%28%29",
                                                          "ok.png"]


def test_records_of_other_shapes_still_show():
    items = [{"input": "a.png", "status": "ok", "class": 2, "score": 0.5, "method": "guided",
              "outputs": {"color": "a.png.guided.color.png"}},  # no "targets"
             {"input": 7, "status": "ok", "targets": [{"class": True, "score": float("nan")}]},
             {"status": "error"}]
    data = report_data(items)
    assert data["records"] == [
        ["a.png", "ok", None, [[2, None, 0.5, ["a.png.guided.color.png"]]], []],
        ["7", "ok", None, [[None, None, None, [None]]], []],
        ["", "error", None, [], []]]
    json.dumps(data, allow_nan=False)


def test_the_data_block_cannot_end_the_script_and_parses_back():
    names = ["</script><script>alert(1)</script>", "<!-- x", "a&amp;b", "line\u2028sep\u2029",
             "caf\u00e9 \u732b.png", "\udcff-not-utf8.png", "]]></script >"]
    records = [record(name, targets=[target(name, 0, "<label>", 0.5)]) for name in names]
    page = report_html(records)
    block = data_block(page)
    assert not set("<>&\u2028\u2029") & set(block)
    assert block.isascii()
    assert json.loads(block) == report_data(records)
    assert page.count("<script") == 2 and page.count("</script>") == 2
    page.encode("utf-8")  # no lone surrogate left in the page


# -- the file ------------------------------------------------------------------------------------


def listing(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


def test_write_report_writes_a_marked_page(tmp_path):
    out = make_out(tmp_path / "out", sample_records(), pictures=False)
    path = write_report(out)
    assert path == os.path.join(out, REPORT)
    text = Path(path).read_text(encoding="utf-8")
    assert GENERATOR_MARK in text[:2000] and is_own_report(path)
    assert "<title>guidedbp report</title>" in text  # the page adds its folder's name
    assert "cdn" not in text.lower() and "http://" not in text and "https://" not in text
    assert listing(out) == [REPORT, "manifest.jsonl"]


def test_same_manifest_same_bytes_and_a_new_manifest_replaces_our_page(tmp_path):
    out = make_out(tmp_path / "out", sample_records(), pictures=False)
    first = Path(write_report(out)).read_bytes()
    assert Path(write_report(out)).read_bytes() == first
    make_out(out, sample_records()[:2], pictures=False)
    second = Path(write_report(out)).read_bytes()
    assert second != first
    assert json.loads(data_block(second.decode()))["summary"]["inputs"] == 2
    assert listing(out) == [REPORT, "manifest.jsonl"]  # no temporary file left


def test_title_is_text(tmp_path):
    out = make_out(tmp_path / "out", [], pictures=False)
    text = Path(write_report(out, title="<b>run</b> & co")).read_text()
    assert "<title>&lt;b&gt;run&lt;/b&gt; &amp; co</title>" in text


def test_a_foreign_index_html_is_refused_and_kept(tmp_path):
    out = make_out(tmp_path / "out", sample_records(), pictures=False)
    mine = b"<!DOCTYPE html><title>my own page</title><p>keep me</p>\n"
    (out / REPORT).write_bytes(mine)
    with pytest.raises(ReportError, match="not written by guidedbp"):
        write_report(out)
    assert (out / REPORT).read_bytes() == mine
    assert listing(out) == [REPORT, "manifest.jsonl"]


def test_a_symlink_index_html_is_refused_and_not_followed(tmp_path):
    out = make_out(tmp_path / "out", sample_records(), pictures=False)
    elsewhere = tmp_path / "elsewhere.html"
    elsewhere.write_text(GENERATOR_MARK)  # even one that looks like ours
    (out / REPORT).symlink_to(elsewhere)
    with pytest.raises(ReportError, match="symbolic link"):
        write_report(out)
    assert (out / REPORT).is_symlink() and elsewhere.read_text() == GENERATOR_MARK


def test_a_folder_named_index_html_is_refused(tmp_path):
    out = make_out(tmp_path / "out", sample_records(), pictures=False)
    (out / REPORT).mkdir()
    with pytest.raises(ReportError, match="not a regular file"):
        write_report(out)


@pytest.mark.parametrize("contents, manifest, fragment", [
    (None, "manifest.jsonl", "no manifest"),
    (b'{"input": "a"}\nnot json\n', "manifest.jsonl", "not a manifest"),
    (b"[1]\n", "manifest.jsonl", "not a manifest"),
    (b"", "../manifest.jsonl", "expected a file name inside"),
])
def test_a_missing_or_bad_manifest_is_refused(tmp_path, contents, manifest, fragment):
    out = tmp_path / "out"
    out.mkdir()
    if contents is not None:
        (out / "manifest.jsonl").write_bytes(contents)
    with pytest.raises(ReportError, match=fragment):
        write_report(out, manifest)
    assert not (out / REPORT).exists()


# -- the commands --------------------------------------------------------------------------------


def test_report_command_writes_the_page(tmp_path):
    out = make_out(tmp_path / "out", sample_records(), pictures=False)
    result = run_cli("report", out, code=0)
    assert result.stdout == ""
    assert result.stderr == f"report: {out / REPORT} (7 inputs)\n"
    assert is_own_report(out / REPORT)


def test_report_command_reads_another_manifest(tmp_path):
    out = make_out(tmp_path / "out", sample_records(), pictures=False)
    os.rename(out / "manifest.jsonl", out / "manifest-0-of-2.jsonl")
    result = run_cli("report", out, "--manifest", "manifest-0-of-2.jsonl", code=0)
    assert result.stderr.endswith("(7 inputs)\n")
    assert "from manifest-0-of-2.jsonl" not in (out / REPORT).read_text()  # drawn by the script
    assert '"source":"manifest-0-of-2.jsonl"' in (out / REPORT).read_text()


def test_report_command_errors_are_one_line(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    assert_one_line_error(run_cli("report", out), "no manifest to report on")
    make_out(out, sample_records(), pictures=False)
    (out / REPORT).write_text("mine")
    assert_one_line_error(run_cli("report", out), "not written by guidedbp")
    assert (out / REPORT).read_text() == "mine"


def test_merge_manifests_rebuilds_the_report(tmp_path):
    out = tmp_path / "out"
    items = sample_records()
    make_out(out, items, pictures=False)
    (out / "manifest.jsonl").unlink()
    for index, part in enumerate((items[:3], items[3:])):
        (out / f"manifest-{index}-of-2.jsonl").write_text(
            "".join(json.dumps(item) + "\n" for item in part))
    result = run_cli("merge-manifests", out, code=0)
    assert result.stderr.splitlines()[-1] == f"report: {out / REPORT} (7 inputs)"
    assert json.loads(data_block((out / REPORT).read_text())) == report_data(items)
    (out / REPORT).write_text("mine")  # a refused report does not fail the merge
    result = run_cli("merge-manifests", out, code=0)
    assert result.stderr.splitlines()[-1].startswith("warning: no report: ")
    assert (out / REPORT).read_text() == "mine"


# -- the page in a browser -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def sample_out(tmp_path_factory) -> Path:
    out = make_out(tmp_path_factory.mktemp("sample") / "out", sample_records())
    write_report(out)
    return out


def open_report(page, out: Path, hash_: str = "") -> None:
    """Load OUT's report afresh (not as a same-document hash change) at view ``hash_``."""
    page.navigate("about:blank")
    page.navigate((out / REPORT).as_uri() + hash_)
    page.wait_for("document.body.dataset.ready === 'true'")


def act(page, script: str) -> None:
    """Run ``script`` in the page and wait until the page has drawn its rows again."""
    page.evaluate("delete document.body.dataset.ready")
    page.evaluate(script)
    page.wait_for("document.body.dataset.ready === 'true'")


def choose(page, control: str, value: str) -> None:
    """Pick ``value`` in the select ``#control``, as a user would (a change event)."""
    act(page, f"(() => {{ const s = document.getElementById({json.dumps(control)});"
              f" s.value = {json.dumps(value)};"
              " s.dispatchEvent(new Event('change', {bubbles: true})); })()")


ROWS = """[...document.querySelectorAll('#rows tr.row')].map(r => ({
    input: r.querySelector('td.input .name').textContent, status: r.dataset.status,
    cls: r.dataset.class, classes: r.dataset.classes, score: r.dataset.score,
    reason: r.querySelector('td.reason') ? r.querySelector('td.reason').textContent : null}))"""


def rows(page) -> list[dict]:
    return page.evaluate(ROWS)


def test_the_page_lists_every_record(page, sample_out):
    open_report(page, sample_out)
    # The default title names the folder the page is opened from (read from its address).
    assert page.evaluate("[document.title, document.getElementById('title').textContent]") \
        == ["guidedbp report: out", "guidedbp report: out"]
    shown = rows(page)
    items = sample_records()
    assert [row["input"] for row in shown] == [item["input"] for item in items]
    assert [row["status"] for row in shown] == [item["status"] for item in items]
    assert shown[0]["classes"] == "3 1" and shown[0]["score"] == "0.91"
    assert page.evaluate("[...document.querySelectorAll('#rows th')].map(t => t.textContent)") \
        == ["#", "input", "status", "class", "score", "maps"]
    # each row's maps: grouped by method, each thumbnail captioned with its render
    assert page.evaluate("[...document.querySelector('#rows td.maps').querySelectorAll('.group')]"
                         ".map(g => [g.querySelector('.method').textContent, [...g.querySelectorAll"
                         "('.render')].map(r => r.textContent)])") \
        == [[method, list(RENDERS)] for method in METHODS]
    assert page.evaluate("document.getElementById('summary').textContent") == (
        "7 inputs: 4 ok, 2 failed, 1 skipped \u00b7 methods guided, gradcam \u00b7 4 classes"
        " \u00b7 from manifest.jsonl")
    assert page.evaluate("document.querySelector('#pager .count').textContent") \
        == "rows 1\u20137 of 7"
    # the first record has two classes: two table rows, 4 thumbnails each
    assert page.evaluate("document.querySelector('#rows tbody.record').rows.length") == 2
    assert page.evaluate("document.querySelectorAll('#rows tbody.record')[0]"
                         ".querySelectorAll('.thumb img').length") == 8
    assert page.evaluate("document.querySelector('#rows tr.target td.class').textContent") \
        == "square#1"


def test_status_filter_shows_the_errors_and_their_reasons(page, sample_out):
    open_report(page, sample_out)
    choose(page, "status-filter", "error")
    assert page.evaluate("location.hash") == "#status=error"
    shown = rows(page)
    assert [(row["input"], row["status"], row["reason"]) for row in shown] == [
        ("broken.png", "error", "not a readable image (cannot identify image file)"),
        ("huge.png", "error", MARKUP_REASON)]
    assert page.evaluate("document.querySelector('#pager .count').textContent") \
        == "rows 1\u20132 of 2 (7 in all)"
    choose(page, "status-filter", "all")
    assert len(rows(page)) == 7 and page.evaluate("location.hash") in ("", "#")


def test_class_filter_keeps_records_with_that_class(page, sample_out):
    open_report(page, sample_out)
    options = page.evaluate("[...document.getElementById('class-filter').options]"
                            ".map(o => [o.value, o.textContent])")
    assert options == [["", "all classes"], ["0", "class 0"], ["1", "square (1)"],
                       ["2", "star <b> (2)"], ["3", "circle (3)"]]
    choose(page, "class-filter", "1")
    assert page.evaluate("location.hash") == "#class=1"
    shown = rows(page)
    assert [row["input"] for row in shown] == ["photos/cat 1.jpg", "photos/a#b%c?d.jpg"]
    assert [row["cls"] for row in shown] == ["1", "1"]  # the filtered class's target
    assert [row["score"] for row in shown] == ["0.05", "0.62"]
    # of several classes, the filtered one is marked
    assert page.evaluate("[...document.querySelectorAll('#rows tr.match')].map(r => "
                         "r.querySelector('td.class').textContent)") == ["square#1"]


def test_sort_by_score_and_by_name(page, sample_out):
    open_report(page, sample_out)
    choose(page, "sort", "score-desc")
    scores = [row["score"] for row in rows(page)]
    assert scores == ["0.99", "0.91", "0.62", "0.4", "0.33", "", ""]  # no score: last
    assert rows(page)[0]["input"] == "zeta.png"
    choose(page, "sort", "score-asc")
    assert [row["score"] for row in rows(page)] == ["0.33", "0.4", "0.62", "0.91", "0.99", "",
                                                    ""]
    choose(page, "sort", "name")
    assert [row["input"] for row in rows(page)] == sorted(
        (item["input"] for item in sample_records()), key=lambda name: name.lower())
    assert page.evaluate("location.hash") == "#sort=name"


def test_search_and_a_shared_view_from_the_hash(page, sample_out):
    open_report(page, sample_out)
    act(page, "(() => { const s = document.getElementById('search'); s.value = 'PHOTOS';"
              " s.dispatchEvent(new Event('input', {bubbles: true})); })()")
    assert [row["input"] for row in rows(page)] == ["photos/cat 1.jpg", "photos/a#b%c?d.jpg"]
    assert page.evaluate("location.hash") == "#q=PHOTOS"
    # a view opened from its URL: the controls follow the hash
    open_report(page, sample_out, "#status=ok&class=3&sort=score-asc&q=.")
    assert [row["input"] for row in rows(page)] == ["photos/cat 1.jpg", "zeta.png"]
    assert page.evaluate("['status-filter', 'class-filter', 'sort', 'search']"
                         ".map(id => document.getElementById(id).value)") \
        == ["ok", "3", "score-asc", "."]
    act(page, "location.hash = '#status=skipped'")  # back/forward and edits: hashchange
    assert [row["input"] for row in rows(page)] == ["old.png"]
    open_report(page, sample_out, "#status=bogus&class=99&page=-3&sort=x")
    assert len(rows(page)) == 7


def test_thumbnails_link_to_their_files_and_load(page, sample_out):
    open_report(page, sample_out)
    page.wait_for("[...document.querySelectorAll('#rows img')].every(i => i.complete)")
    links = page.evaluate("[...document.querySelectorAll('#rows .thumb a')].map(a => "
                          "[new URL(a.getAttribute('href'), location).href, "
                          "a.querySelector('img').naturalWidth, a.title])")
    expected = [path for item in sample_records() for entry in item["targets"]
                for path in entry["outputs"].values()]
    assert len(links) == len(expected) == 24
    for (url, width, title), relative in zip(links, expected):
        parts = urlsplit(url)
        assert parts.scheme == "file" and not parts.query and not parts.fragment, url
        assert Path(unquote(parts.path)) == sample_out / relative, url
        assert (sample_out / relative).is_file() and width == 24, (url, width)
        assert title in COLUMNS
    assert page.evaluate("document.querySelectorAll('#rows a.missing').length") == 0


SVG_SCRIPT = ('<svg xmlns="http://www.w3.org/2000/svg" width="40" height="20" '
              'onload="alert(\'onload\')"><rect width="40" height="20" fill="#2f6fde"/>'
              '<script>alert("svg script")</script></svg>\n')


def test_a_pdf_figure_is_a_link(page, tmp_path):
    item = record("shape.png", targets=[target("shape.png", 3, "circle", 0.9)])
    item["targets"][0]["outputs"]["figure"] = "shape.png.figure.pdf"
    out = make_out(tmp_path / "out", [item])
    (out / "shape.png.figure.pdf").write_bytes(b"%PDF-1.4\n%%EOF\n")
    write_report(out)
    open_report(page, out)
    cells = page.evaluate("[...document.querySelectorAll('#rows .thumb a')].map(a => "
                          "[a.getAttribute('href'), a.title, a.textContent, "
                          "a.querySelectorAll('img').length])")
    assert cells[-1] == ["shape.png.figure.pdf", "figure", "PDF", 0]
    assert [cell[3] for cell in cells[:-1]] == [1] * len(COLUMNS)
    assert page.evaluate("[...document.querySelectorAll('.group .method')]"
                         ".map(m => m.textContent)") == [*METHODS, "figure"]


def test_a_planted_svg_figure_is_a_picture_and_its_script_never_runs(page, tmp_path):
    """An SVG with a script, planted in OUT under a figure's name (and under a PNG's):
    the page shows it only as an <img>, links to no SVG and no other kind of file, and
    every link on the page, opened, runs nothing."""
    planted = record("shape.png", targets=[target("shape.png", 3, "circle", 0.9)])
    planted["targets"][0]["outputs"]["figure"] = "shape.png.figure.svg"
    other = record("page.png", targets=[target("page.png", 1, "square", 0.5)])
    other["targets"][0]["outputs"]["figure"] = "page.png.figure.html"
    out = make_out(tmp_path / "out", [planted, other])
    (out / "shape.png.figure.svg").write_text(SVG_SCRIPT)
    (out / "page.png.figure.html").write_text("<script>alert('html')</script>")
    (out / "shape.png.guided.color.png").write_text(SVG_SCRIPT)  # a PNG's name, SVG inside
    write_report(out)
    open_report(page, out)
    assert page.evaluate("[...document.querySelectorAll('a[href]')].filter(a => "
                         "!/\\.png$/.test(a.getAttribute('href'))).map(a => a.href)") \
        == [f"{(out / REPORT).as_uri()}#status={status}" for status in ("ok", "error", "skipped")]
    figure = "document.querySelector('#rows .thumb button.figure img')"
    page.wait_for(f"{figure}.complete")
    assert page.evaluate(f"[{figure}.getAttribute('src'), {figure}.naturalWidth]") \
        == ["shape.png.figure.svg", 40]  # drawn, as a picture
    assert page.evaluate("[...document.querySelectorAll('#rows .thumb .file')]"
                         ".map(f => [f.tagName, f.textContent])") == [["SPAN", "HTML"]]
    # a person clicks the figure: it opens in the page's own viewer, still a picture
    page.evaluate(f"{figure}.parentNode.click()")
    page.wait_for("document.getElementById('viewer').open && "
                  "document.getElementById('viewer-image').complete")
    assert page.evaluate("[document.getElementById('viewer-image').naturalWidth, "
                         "document.getElementById('viewer-name').textContent]") \
        == [40, "figure \u00b7 shape.png.figure.svg"]
    assert page.evaluate("location.pathname.endsWith('/index.html')")
    page.evaluate("document.getElementById('viewer-close').click()")
    assert page.evaluate("document.getElementById('viewer').open") is False
    # ... and every link on the page, followed, shows a picture and runs no script
    links = page.evaluate("[...new Set([...document.querySelectorAll('#rows a[href]')]"
                          ".map(a => a.href))]")
    assert len(links) == 2 * len(COLUMNS)
    for link in links:
        page.navigate(link)
    assert page.events("Page.javascriptDialogOpening") == []
    # the same SVG opened as a page of its own does run (what the page must never link)
    page.navigate((out / "shape.png.figure.svg").as_uri())
    page.browser.wait_event("Page.javascriptDialogOpening", page.session)


def test_hostile_names_are_text_and_run_nothing(page, sample_out, browser):
    open_report(page, sample_out)
    assert page.evaluate("document.querySelectorAll('script').length") == 2
    assert page.evaluate("document.querySelectorAll('#rows script, #rows b, img[src=x]')"
                         ".length") == 0
    names = [row["input"] for row in rows(page)]
    assert HOSTILE in names and rows(page)[4]["reason"] == MARKUP_REASON
    assert page.evaluate("window.pwned === undefined")
    assert page.evaluate("document.querySelectorAll('#rows tr.row')[2]"
                         ".querySelector('td.class').textContent") == "star <b>#2"
    assert page.events("Page.javascriptDialogOpening") == []
    assert page.events("Runtime.exceptionThrown") == []


def test_the_page_makes_no_network_request(page, sample_out):
    open_report(page, sample_out)
    page.wait_for("[...document.querySelectorAll('#rows img')].every(i => i.complete)")
    requested = [event["params"]["request"]["url"]
                 for event in page.events("Network.requestWillBeSent")]
    # Chromium keeps no resource timing for file: pages; the list is checked all the same.
    resources = page.evaluate("performance.getEntriesByType('resource').map(e => e.name)")
    assert len(requested) > 24  # the page and its thumbnails
    assert all(url.startswith("file:") for url in requested + resources), requested + resources


def test_a_screenshot_shows_the_page(page, sample_out, tmp_path):
    open_report(page, sample_out)
    page.wait_for("[...document.querySelectorAll('#rows img')].every(i => i.complete)")
    path = page.screenshot(tmp_path / "report.png")
    with Image.open(path) as image:
        image.load()
        assert image.size == WINDOW
        colours = image.convert("RGB").getcolors(maxcolors=1 << 16)
    assert colours is None or len(colours) > 50, "the screenshot is (nearly) blank"


# -- many outputs: the layout -------------------------------------------------------------------

#: What ``--method all`` runs (11 methods); with ``--render color,overlay``, 22 outputs.
ALL_METHODS = ("guided", "vanilla", "deconvnet", "gradcam", "guided-gradcam", "gradcam++",
               "guided-gradcam++", "layercam", "scorecam", "occlusion", "integrated-gradients")


def layout(page) -> dict:
    """What overflows, and where each row's input name and thumbnails sit."""
    return page.evaluate("""(() => {
      const rows = [...document.querySelectorAll('#rows tr.row')];
      const words = rows.map(r => [...r.querySelector('td.input .name').childNodes]
          .filter(n => n.nodeType === Node.TEXT_NODE).map(n => {
            const range = document.createRange(); range.selectNodeContents(n);
            return [n.textContent, new Set([...range.getClientRects()].map(q => q.top)).size];
          }));
      const thumbs = rows.map(r => [...r.querySelectorAll('.thumb')].map(t => {
            const box = t.getBoundingClientRect(); return [box.left, box.right]; }));
      return {scrollWidth: document.documentElement.scrollWidth, width: innerWidth,
              inputWidth: Math.min(...rows.map(r =>
                  r.querySelector('td.input').getBoundingClientRect().width)),
              words: words, thumbs: thumbs,
              right: Math.max(...thumbs.flat().map(t => t[1]))};
    })()""")


@pytest.mark.parametrize("methods, width", [(ALL_METHODS[:5], 1300), (ALL_METHODS, 1300),
                                            (ALL_METHODS, 900)])
def test_many_outputs_wrap_within_the_window(page, tmp_path, methods, width):
    names = ["photos/bar_01.jpg", "photos/cat 2.jpg", "x.png"]
    items = [record(name, targets=[target(name, k, f"label{k}", 0.5, methods=methods)],
                    methods=methods) for k, name in enumerate(names)]
    out = make_out(tmp_path / "out", items)
    write_report(out)
    page.resize(width)
    open_report(page, out)
    seen = layout(page)
    assert seen["scrollWidth"] <= seen["width"] == width  # nothing runs off the right edge
    assert seen["right"] <= width - 24
    assert seen["inputWidth"] >= 150
    # each part of a name stays on one line: "photos/" and "bar_01.jpg", never "bar_01.j|pg"
    assert seen["words"][0] == [["photos/", 1], ["bar_01.jpg", 1]]
    # every row has a slot for every output, at the same place: the grid lines up
    assert [len(row) for row in seen["thumbs"]] == [2 * len(methods)] * 3
    assert seen["thumbs"][0] == seen["thumbs"][1] == seen["thumbs"][2]


def test_many_outputs_screenshot(page, tmp_path):
    """The 11 x 2 layout as a person sees it: thumbnails in the window, not a blank page."""
    items = [record(f"photos/bar_{k:02d}.jpg", targets=[target(f"photos/bar_{k:02d}.jpg", k,
             f"label{k}", 0.5, methods=ALL_METHODS)], methods=ALL_METHODS) for k in range(2)]
    out = make_out(tmp_path / "out", items)
    write_report(out)
    page.resize(1300)
    open_report(page, out)
    page.wait_for("[...document.querySelectorAll('#rows tr.row')[0].querySelectorAll('img')]"
                  ".every(i => i.complete && i.naturalWidth)")
    with Image.open(page.screenshot(tmp_path / "many.png")) as image:
        picture = np.asarray(image.convert("RGB"))
    assert picture.shape == (900, 1300, 3)
    # the thumbnails' blue (200 in every picture's third channel) reaches the right part
    # of the window and stops before its edge
    blue = np.flatnonzero(((picture[..., 2] > 150) & (picture[..., 0] < 100)).any(axis=0))
    assert 700 < blue.max() < 1300 - 24


PANEL_BOX = """(() => {
  const image = document.querySelector('#rows .thumb.panel img');
  const box = image.getBoundingClientRect();
  const cell = image.closest('td.maps').getBoundingClientRect();
  return {left: box.left, right: box.right, width: box.width, height: box.height,
          natural: [image.naturalWidth, image.naturalHeight], cellRight: cell.right,
          input: document.querySelector('#rows td.input').getBoundingClientRect().width,
          scrollWidth: document.documentElement.scrollWidth};
})()"""


@pytest.mark.parametrize("width", [1300, 900])
def test_a_wrapped_panel_shows_whole_at_the_width_the_page_gives_it(page, tmp_path, width):
    """A --method all panel (the original and 21 maps, six tiles a row: 1,400 x 1,243 px)
    at its own aspect, as wide as the maps column, not a 256 x 128 box around a sliver."""
    names = ["photos/star_0.png", "photos/circle_0.png"]
    items = [record(name, targets=[{"class": k, "label": "star", "score": 0.9, "raw": None,
                                    "outputs": {"panel": f"{name}.panel.png"}}],
                    methods=("guided", "gradcam")) for k, name in enumerate(names)]
    out = make_out(tmp_path / "out", items)
    panel = np.full((1243, 1400, 3), 255, np.uint8)
    panel[40:1200:240, :] = 0  # rows of tiles: a picture that is visibly not flat
    for name in names:
        save_png(out / f"{name}.panel.png", panel)
    write_report(out)
    page.resize(width)
    open_report(page, out)
    page.wait_for("[...document.querySelectorAll('#rows img')]"
                  ".every(i => i.complete && i.naturalWidth)")
    seen = page.evaluate(PANEL_BOX)
    assert seen["natural"] == [1400, 1243]
    assert seen["width"] / seen["height"] == pytest.approx(1400 / 1243, rel=0.01)  # whole
    assert seen["width"] >= 0.4 * width  # the maps column's width, not a thumbnail's
    assert seen["right"] <= seen["cellRight"] and seen["scrollWidth"] <= width
    assert seen["input"] >= 150


def test_each_method_is_one_group_and_a_missing_output_a_blank_slot(page, tmp_path):
    first = record("a.png", targets=[target("a.png", 0, "x", 0.5, renders=("color",))])
    second = record("b.png", targets=[target("b.png", 1, "y", 0.5, methods=("guided",),
                                             renders=("color", "overlay"))], methods=("guided",))
    out = make_out(tmp_path / "out", [first, second])
    write_report(out)
    open_report(page, out)
    groups = page.evaluate("[...document.querySelectorAll('#rows td.maps')].map(m => "
                           "[...m.querySelectorAll('.group')].map(g => "
                           "[g.querySelector('.method').textContent, [...g.querySelectorAll("
                           "'.thumb')].map(t => t.classList.contains('none') ? null : "
                           "t.querySelector('.render').textContent)]))")
    # columns guided.color, gradcam.color, guided.overlay: guided's two stay together
    assert groups == [[["guided", ["color", None]], ["gradcam", ["color"]]],
                      [["guided", ["color", "overlay"]], ["gradcam", [None]]]]
    assert page.evaluate("document.querySelector('#rows .thumb.none .render')") is None


def test_the_render_switch_shows_one_render_per_method(page, sample_out, tmp_path):
    open_report(page, sample_out, "#page=1")
    assert page.evaluate("[!document.getElementById('render-control').hidden, "
                         "[...document.getElementById('render-filter').options]"
                         ".map(o => [o.value, o.textContent])]") \
        == [True, [["", "all renders"], ["color", "color"], ["overlay", "overlay"]]]
    choose(page, "render-filter", "overlay")
    assert page.evaluate("location.hash") == "#render=overlay"
    shown = page.evaluate("[...document.querySelectorAll('#rows td.maps')].map(m => "
                          "[...m.querySelectorAll('.thumb')].map(t => "
                          "[t.querySelector('.render').textContent, "
                          "t.querySelector('a').getAttribute('href')]))")
    assert shown[0] == [["overlay", "photos/cat%201.jpg.3.guided.overlay.png"],
                        ["overlay", "photos/cat%201.jpg.3.gradcam.overlay.png"]]
    assert len(shown) == 6 and all(len(cell) == 2 for cell in shown)
    open_report(page, sample_out, "#render=color&class=3")
    assert page.evaluate("[...document.querySelectorAll('#rows .render')]"
                         ".map(r => r.textContent)") == ["color"] * 6
    # one render: no switch
    item = record("a.png", targets=[target("a.png", 0, "x", 0.5, renders=("color",))])
    out = make_out(tmp_path / "out", [item])
    write_report(out)
    open_report(page, out, "#render=overlay")
    assert page.evaluate("[document.getElementById('render-control').hidden, "
                         "document.querySelectorAll('#rows .thumb').length]") == [True, 2]


def test_the_render_switch_of_a_run_of_several_methods_has_the_panel(page, tmp_path):
    """``--method guided,gradcam --render panel,overlay`` writes one comparison panel
    (named ``panel`` alone) and an overlay per method: two renders, so a switch."""
    items = []
    for name in ("a.png", "b.png"):
        entry = target(name, 0, "circle", 0.9, renders=("overlay",))
        entry["outputs"]["panel"] = f"{name}.panel.png"
        items.append(record(name, targets=[entry]))
    out = make_out(tmp_path / "out", items)
    write_report(out)
    open_report(page, out)
    assert page.evaluate("[!document.getElementById('render-control').hidden, "
                         "[...document.getElementById('render-filter').options]"
                         ".map(o => o.value)]") == [True, ["", "overlay", "panel"]]
    choose(page, "render-filter", "panel")
    assert page.evaluate("[...document.querySelectorAll('#rows .thumb a')]"
                         ".map(a => a.getAttribute('href'))") == ["a.png.panel.png",
                                                                  "b.png.panel.png"]
    choose(page, "render-filter", "overlay")
    assert len(page.evaluate("[...document.querySelectorAll('#rows .thumb a')]"
                             ".map(a => a.getAttribute('href'))")) == 4


def test_a_packaged_sample_is_named_from_the_package_on(page, tmp_path):
    """``guidedbp demo`` explains the package's own samples: the row names
    ``guidedbp/demo/data/samples/circle_0.png``, not the install's absolute path (kept in
    the tooltip and the manifest)."""
    from guidedbp.demo.samples import PACKAGED_SAMPLES

    sample = os.fspath(PACKAGED_SAMPLES / "circle_0.png")
    items = [record(sample, targets=[target("samples/circle_0.png", 0, "circle", 0.99)]),
             record("/data/photos/cat.jpg", targets=[target("photos/cat.jpg", 1, "cat", 0.5)])]
    data = report_data(items)
    assert data["records"][0][0] == "guidedbp/demo/data/samples/circle_0.png"
    assert data["records"][0][5] == sample
    assert data["records"][1][0] == "/data/photos/cat.jpg" and len(data["records"][1]) == 5
    out = make_out(tmp_path / "out", items)
    write_report(out)
    open_report(page, out)
    assert page.evaluate("[...document.querySelectorAll('#rows td.input')].map(c => "
                         "[c.querySelector('.name').textContent, c.title])") == [
        ["guidedbp/demo/data/samples/circle_0.png", sample], ["/data/photos/cat.jpg", ""]]


# -- caveats -------------------------------------------------------------------------------------

UNTRAINED = {"code": "untrained-weights",
             "text": "random weights: the maps show no learned features"}
NO_GUIDED = {"code": "no-guided-activation", "method": "guided",
             "text": "guided = plain gradient: the model has no guided activation"}
NEGLIGIBLE = {"code": "negligible-map", "method": "gradcam",
              "text": "the map is numerically negligible <img src=x onerror=\"window.pwned=1\">"}


def caveat_records() -> list[dict]:
    items = [record("a.png", targets=[target("a.png", 0, "circle", 0.9)]),
             record("b.png", targets=[target("b.png", 1, "square", 0.8)]),
             record("c.png", targets=[target("c.png", 2, "star", 0.7)]),  # an older manifest
             record("d.png", targets=[target("d.png", 2, "star", 0.6)]),
             record("e.png", "error", "not a readable image")]
    items[0]["caveats"] = [UNTRAINED]
    items[1]["caveats"] = [NO_GUIDED, NEGLIGIBLE, dict(NEGLIGIBLE, method="guided")]
    items[3]["caveats"] = []
    items[4]["caveats"] = [UNTRAINED]
    return items


def test_caveats_in_the_data_and_older_records_without_them():
    data = report_data([*caveat_records(), {"input": "f.png", "status": "ok",
                                            "caveats": ["junk", {"text": 3}]}])
    assert [row[4] for row in data["records"]] == [
        [["untrained-weights", UNTRAINED["text"], None]],
        [["no-guided-activation", NO_GUIDED["text"], "guided"],
         ["negligible-map", NEGLIGIBLE["text"], "gradcam"],
         ["negligible-map", NEGLIGIBLE["text"], "guided"]],
        [], [], [["untrained-weights", UNTRAINED["text"], None]],
        [["caveat", "3", None]]]
    # records per code (b.png's two negligible maps count once), sorted by code
    assert data["summary"]["caveats"] == [["caveat", 1], ["negligible-map", 1],
                                          ["no-guided-activation", 1], ["untrained-weights", 2]]


@pytest.fixture(scope="module")
def caveat_out(tmp_path_factory) -> Path:
    out = make_out(tmp_path_factory.mktemp("caveats") / "out", caveat_records())
    write_report(out)
    return out


CAVEATS_SHOWN = """[...document.querySelectorAll('#rows tr.row')].map(r =>
    [r.querySelector('td.input .name').textContent,
     [...r.querySelectorAll('li.caveat')].map(c => c.innerText)])"""


def test_caveats_show_as_badges_with_their_sentences(page, caveat_out):
    open_report(page, caveat_out)
    assert page.evaluate(CAVEATS_SHOWN) == [
        ["a.png", [f"untrained-weights {UNTRAINED['text']}"]],
        ["b.png", [f"no-guided-activation {NO_GUIDED['text']}",  # it names its method
                   f"negligible-map gradcam: {NEGLIGIBLE['text']}",
                   f"negligible-map guided: {NEGLIGIBLE['text']}"]],
        ["c.png", []], ["d.png", []], ["e.png", [f"untrained-weights {UNTRAINED['text']}"]]]
    # the badge is on screen, in the row, with its own colour
    badge = page.evaluate("""(() => { const b = document.querySelector('li.caveat .badge');
        const box = b.getBoundingClientRect(), row = b.closest('tr').getBoundingClientRect();
        return [b.textContent, box.width > 20 && box.height > 10, box.top >= row.top &&
                box.bottom <= row.bottom, getComputedStyle(b).color]; })()""")
    assert badge[:3] == ["untrained-weights", True, True]
    assert badge[3] != page.evaluate("getComputedStyle(document.body).color")
    assert page.evaluate("window.pwned === undefined && "
                         "!document.querySelector('#rows img[src=x]')")


def test_caveat_filter_shows_only_those_rows_and_lives_in_the_hash(page, caveat_out):
    open_report(page, caveat_out)
    assert page.evaluate("[!document.getElementById('caveat-control').hidden, "
                         "[...document.getElementById('caveat-filter').options]"
                         ".map(o => [o.value, o.textContent])]") == [True, [
        ["", "all"], ["any", "any caveat (3)"], ["none", "no caveat (2)"],
        ["negligible-map", "negligible-map (1)"],
        ["no-guided-activation", "no-guided-activation (1)"],
        ["untrained-weights", "untrained-weights (2)"]]]
    assert page.evaluate("document.getElementById('summary').textContent").startswith(
        "5 inputs: 4 ok, 1 failed, 0 skipped, 3 with caveats \u00b7 ")
    act(page, "document.querySelector('#summary a.caveat').click()")
    assert page.evaluate("[location.hash, document.getElementById('caveat-filter').value]") \
        == ["#caveat=any", "any"]
    choose(page, "caveat-filter", "no-guided-activation")
    assert page.evaluate("location.hash") == "#caveat=no-guided-activation"
    assert [row["input"] for row in rows(page)] == ["b.png"]
    choose(page, "caveat-filter", "any")
    assert [row["input"] for row in rows(page)] == ["a.png", "b.png", "e.png"]
    choose(page, "caveat-filter", "none")
    assert [row["input"] for row in rows(page)] == ["c.png", "d.png"]
    open_report(page, caveat_out, "#caveat=untrained-weights&status=ok")
    assert [row["input"] for row in rows(page)] == ["a.png"]
    assert page.evaluate("document.getElementById('caveat-filter').value") \
        == "untrained-weights"
    open_report(page, caveat_out, "#caveat=bogus")
    assert len(rows(page)) == 5


def test_a_run_without_caveats_shows_no_caveat_filter(page, sample_out):
    open_report(page, sample_out)
    assert page.evaluate("[document.getElementById('caveat-control').hidden, "
                         "getComputedStyle(document.getElementById('caveat-control')).display, "
                         "document.querySelectorAll('li.caveat').length]") == [True, "none", 0]


# -- ten thousand records ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def big_out(tmp_path_factory) -> tuple[Path, float]:
    """OUT with 10,000 records (pictures shared: four files), and the CPU seconds
    write_report took for it (unlike wall time, the same on a loaded machine)."""
    out = tmp_path_factory.mktemp("big") / "out"
    shared = [target("shared.png", 1, "square", 0.5)]
    make_out(out, [record("shared.png", targets=shared)])
    rng = np.random.default_rng(0)
    items = []
    for index in range(10_000):
        if index % 97 == 5:
            items.append(record(f"images/{index:05d}.png", "error", "not a readable image"))
            continue
        entry = dict(shared[0], **{"class": int(index % 10), "label": f"class-{index % 10}",
                                   "score": round(float(rng.random()), 6)})
        items.append(record(f"images/{index:05d}.png", targets=[entry]))
    (out / "manifest.jsonl").write_text("".join(json.dumps(item) + "\n" for item in items))
    start = time.process_time()
    write_report(out)
    return out, time.process_time() - start


def test_ten_thousand_records_are_written_quickly(big_out):
    out, seconds = big_out
    print(f"write_report: 10,000 records in {seconds:.2f} CPU s, "
          f"{(out / REPORT).stat().st_size / 1e6:.1f} MB")
    assert seconds < 30


def test_ten_thousand_records_show_one_page_at_a_time(page, big_out):
    out, _ = big_out
    start = time.perf_counter()
    open_report(page, out)
    seconds = time.perf_counter() - start
    # Wall time in a browser moves with the machine's load: printed, not asserted. What
    # keeps it short is asserted: one page of rows drawn, their pictures loaded lazily.
    print(f"10,000 records: first page drawn {seconds:.2f} s after navigating")
    assert page.evaluate("document.querySelectorAll('#rows tr.row').length") == 100
    assert page.evaluate("document.querySelector('#pager .count').textContent") \
        == "rows 1\u2013100 of 10,000"
    assert page.evaluate("document.querySelector('#pager .page').textContent") \
        == "page 1 of 100"
    assert page.evaluate("[...document.querySelectorAll('#rows img')].every(i => i.loading"
                         " === 'lazy')")
    act(page, "document.querySelector('#pager button.next').click()")
    assert page.evaluate("location.hash") == "#page=2"
    assert page.evaluate("document.querySelector('#rows tr.row').dataset.index") == "101"
    act(page, "document.querySelector('#pager-bottom button.last').click()")
    assert page.evaluate("document.querySelector('#pager .count').textContent") \
        == "rows 9,901\u201310,000 of 10,000"
    start = time.perf_counter()
    choose(page, "sort", "score-desc")
    print(f"10,000 records: sorted by score in {time.perf_counter() - start:.2f} s")
    scores = [float(row["score"]) for row in rows(page)]
    assert len(scores) == 100 and scores == sorted(scores, reverse=True)
    choose(page, "status-filter", "error")
    errors = sum(1 for index in range(10_000) if index % 97 == 5)
    assert page.evaluate("document.querySelector('#pager .count').textContent") \
        == f"rows 1\u2013100 of {errors} (10,000 in all)"
    assert {row["status"] for row in rows(page)} == {"error"}
