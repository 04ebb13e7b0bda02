"""What ``guidedbp explain`` writes besides the renders: figures (``--figure``) and the
run's page (``OUT/index.html``), through the real command on the bundled demo model."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

import guidedbp
from guidedbp import plot
from guidedbp.io.manifest import read_manifest
from guidedbp.io.report import REPORT, is_own_report
from guidedbp.io.write import save_png
from tests.helpers import (
    REPO,
    guidedbp_command,
    run_cli,
    subprocess_environment,
    tinted_noise,
)

SHAPES = REPO / "sample_images" / "shapes"
METHODS = "guided,gradcam"


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """Two pictures: a 96x96 shape, and a 150x100 photo-like one (fitted to 96x96)."""
    folder = tmp_path_factory.mktemp("images")
    (folder / "circle.png").write_bytes((SHAPES / "circle_0.png").read_bytes())
    Image.fromarray(tinted_noise(100, 150, seed=4)).save(folder / "wide.png")
    return folder


@pytest.fixture(scope="module")
def explainer():
    return guidedbp.Explainer("demo", method=METHODS)


@pytest.fixture(scope="module")
def pdf_run(images, tmp_path_factory):
    out = tmp_path_factory.mktemp("pdf") / "out"
    result = run_cli("explain", "demo", images, "-o", out, "--method", METHODS, "--render",
                     "color", "--figure", "pdf", "-q", code=0)
    return out, result, {os.path.basename(r["input"]): r for r in read_manifest(
        out / "manifest.jsonl")}


def _expected_figure(explainer, path, format, dpi=150):
    """The figure the command should write for ``path``, drawn from the library."""
    result = guidedbp.explain_image(explainer, path)
    named = f"{result.label} (class {result.target})"
    # The title names each class activation map's layer: " · gradcam at conv5".
    layers = "".join(f" · {name} at {layer}" for name, layer in result.layers.items())
    figure = plot.draw(result.image, result.original_maps(),
                       f"{named} p={result.probability:.3f}{layers}")
    return plot.figure_bytes(figure, format, dpi=dpi)


def test_figure_per_image_equals_the_library_figure(pdf_run, images, explainer):
    out, _, records = pdf_run
    for name in ("circle.png", "wide.png"):
        outputs = records[name]["outputs"]
        assert sorted(outputs) == ["figure", "gradcam.color", "guided.color"]
        assert outputs["figure"].endswith(f"{name}.figure.pdf")
        written = (out / outputs["figure"]).read_bytes()
        assert written == _expected_figure(explainer, images / name, "pdf")
        assert plot.is_own_figure(out / outputs["figure"])


def test_resume_carries_figures_over_and_redraws_a_damaged_one(pdf_run, images):
    out, _, records = pdf_run
    figure = out / records["wide.png"]["outputs"]["figure"]
    whole = figure.read_bytes()
    figure.write_bytes(whole[: len(whole) // 2])  # a kill mid-write could not do this, a disk can
    result = run_cli("explain", "demo", images, "-o", out, "--method", METHODS, "--render",
                     "color", "--figure", "pdf", "--skip-existing", code=0)
    assert "1 explained, 1 skipped" in result.stderr
    assert figure.read_bytes() == whole
    again = {os.path.basename(r["input"]): r for r in read_manifest(out / "manifest.jsonl")}
    assert again == records


def test_a_foreign_file_at_a_figure_path_fails_that_input_only(images, tmp_path):
    out = tmp_path / "out"
    first = run_cli("explain", "demo", images / "circle.png", "-o", out, "--figure", "svg",
                    "-q", code=0)
    assert first.stderr == ""
    record = read_manifest(out / "manifest.jsonl")[0]
    target = out / record["outputs"]["figure"]
    mine = b'<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg"></svg>\n'
    target.write_bytes(mine)
    result = run_cli("explain", "demo", images / "circle.png", "-o", out, "--figure", "svg",
                     "-q", code=1)
    assert "was not written by guidedbp" in result.stderr
    assert target.read_bytes() == mine


def test_dpi_sets_the_png_figure_size(images, tmp_path):
    sizes = {}
    for dpi in (50, 100):
        out = tmp_path / f"out{dpi}"
        run_cli("explain", "demo", images / "circle.png", "-o", out, "--figure", "png",
                "--dpi", dpi, "--render", "gray", "-q", code=0)
        path = out / read_manifest(out / "manifest.jsonl")[0]["outputs"]["figure"]
        assert plot.is_own_figure(path)
        sizes[dpi] = Image.open(path).size
    assert sizes[100] == (2 * sizes[50][0], 2 * sizes[50][1])


def test_bad_figure_options_are_usage_errors(images, tmp_path):
    for flags, fragment in ((["--figure", "eps"], "'eps' is not one of 'pdf', 'svg', 'png'"),
                            (["--dpi", "5"], "5 is not in the range 20<=x<=1200")):
        result = run_cli("explain", "demo", images, "-o", tmp_path / "o", *flags, code=2)
        assert fragment in result.stderr.splitlines()[-1], result.stderr
    assert not (tmp_path / "o").exists()


def test_figure_without_matplotlib_is_one_line_naming_the_install(images, tmp_path):
    out = tmp_path / "out"
    blocker = ("import sys, runpy; sys.modules['matplotlib'] = None; "
               "sys.argv[0] = 'guidedbp'; runpy.run_module('guidedbp', run_name='__main__')")
    command = [sys.executable, "-c", blocker, *guidedbp_command(
        "explain", "demo", images, "-o", out, "--figure", "pdf")[3:]]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120,
                            env=subprocess_environment())
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines == ["Error: figures need matplotlib: pip install 'guidedbp[plot]'"]
    assert not out.exists()  # refused before anything was written or loaded


# -- the run's page -----------------------------------------------------------------------


def _page_records(page):
    text = page.read_text(encoding="utf-8")
    start = text.index('<script type="application/json" id="records">') + len(
        '<script type="application/json" id="records">')
    return json.loads(text[start : text.index("</script>", start)])


def test_a_run_writes_its_page_and_says_where(pdf_run):
    out, result, records = pdf_run
    page = out / REPORT
    assert is_own_report(page)
    data = _page_records(page)
    assert data == _page_records_of(out)  # what `guidedbp report OUT` writes, the same
    shown = json.dumps(data)
    for record in records.values():
        assert json.dumps(record["input"])[1:-1] in shown


def _page_records_of(out):
    """Rebuild the page with `guidedbp report` and read its data back."""
    copy = out.parent / "rebuilt"
    copy.mkdir(exist_ok=True)
    (copy / "manifest.jsonl").write_bytes((out / "manifest.jsonl").read_bytes())
    run_cli("report", copy, code=0)
    return _page_records(copy / REPORT)


def test_no_report_and_shards_write_no_page(images, tmp_path):
    run_cli("explain", "demo", images / "circle.png", "-o", tmp_path / "a", "--no-report",
            "-q", code=0)
    assert not (tmp_path / "a" / REPORT).exists()
    run_cli("explain", "demo", images, "-o", tmp_path / "b", "--shard", "0/2", "-q", code=0)
    assert not (tmp_path / "b" / REPORT).exists()


def test_a_page_of_the_users_is_left_alone_with_a_warning(images, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    theirs = b"<html><body>my notes</body></html>\n"
    (out / REPORT).write_bytes(theirs)
    result = run_cli("explain", "demo", images / "circle.png", "-o", out, "-q", code=0)
    assert (out / REPORT).read_bytes() == theirs
    warning = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and "no report written" in warning[0], result.stderr
    assert len(read_manifest(out / "manifest.jsonl")) == 1  # the run itself is whole


def test_the_page_is_rewritten_after_every_run(images, tmp_path):
    out = tmp_path / "out"
    run_cli("explain", "demo", images / "circle.png", "-o", out, "-q", code=0)
    assert len(_page_records(out / REPORT)["records"]) == 1
    save_png(images / "extra.png", np.zeros((96, 96, 3), np.uint8))
    try:
        run_cli("explain", "demo", images, "-o", out, "-q", "--skip-existing", code=0)
    finally:
        (images / "extra.png").unlink()
    assert len(_page_records(out / REPORT)["records"]) == 3
