"""``guidedbp demo``: ``make demo``'s job on the sample shapes the package ships, so that it
runs from a ``pip install`` alone (the wheel's own run is in ``tests/pythons.py``)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from guidedbp.demo import CLASS_NAMES
from guidedbp.demo.samples import PACKAGED_SAMPLES
from tests.helpers import REPO, assert_one_line_error, run_cli

EXPECTED = sorted(f"{name}_0.png.guided.{render}.png" for name in CLASS_NAMES
                  for render in ("overlay", "panel"))


def test_demo_explains_the_packaged_samples_from_a_folder_without_them(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no sample_images/ in reach
    result = run_cli("demo", "-o", "out", code=0)
    assert os.getcwd() == str(tmp_path)
    assert sorted(p.name for p in (tmp_path / "out" / "samples").iterdir()) == EXPECTED
    records = [json.loads(line)
               for line in (tmp_path / "out" / "manifest.jsonl").read_text().splitlines()]
    # The input as given: the package's own copy, named in full so a reader can find it.
    assert [r["input"] for r in records] == \
        sorted(os.fspath(PACKAGED_SAMPLES / f"{n}_0.png") for n in CLASS_NAMES)
    # The bundled model gets every sample right (as make demo's panels show).
    assert [(r["status"], r["label"]) for r in records] == \
        [("ok", Path(r["input"]).stem.removesuffix("_0")) for r in records]
    assert records[0]["outputs"] == {"panel": "samples/circle_0.png.guided.panel.png",
                                     "overlay": "samples/circle_0.png.guided.overlay.png"}
    assert (tmp_path / "out" / "index.html").is_file()
    assert "6 explained" in result.stderr and "in out/" in result.stderr


def test_demo_writes_the_same_bytes_as_make_demos_explain_command(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_cli("demo", "-o", "demo-out", "-q", code=0)
    monkeypatch.chdir(REPO)
    run_cli("explain", "demo", "sample_images/shapes", "--render", "panel,overlay",
            "-o", tmp_path / "explained", "-q", code=0)
    explained = {path.name: path for path in (tmp_path / "explained").rglob("*.png")}
    assert sorted(explained) == EXPECTED
    for name in EXPECTED:
        demo = (tmp_path / "demo-out" / "samples" / name).read_bytes()
        assert demo == explained[name].read_bytes(), name


def test_demo_refuses_an_out_of_yours_and_returns_to_the_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "manifest.jsonl").write_text("a file of yours\n")
    result = run_cli("demo", "-o", "taken")
    assert_one_line_error(result, "manifest.jsonl")
    assert os.getcwd() == str(tmp_path)  # the samples' folder was left, after the error too
    assert os.listdir(tmp_path / "taken") == ["manifest.jsonl"]
    assert (tmp_path / "taken" / "manifest.jsonl").read_text() == "a file of yours\n"


def test_the_samples_and_every_data_file_are_package_data():
    """What setuptools puts in the wheel: the package-data globs, matched as it does (``*``
    stays within one folder). The built wheel itself is checked by ``make test-pythons``."""
    table = (REPO / "pyproject.toml").read_text().split("[tool.setuptools.package-data]")[1]
    patterns = re.findall(r'"([^"]+)"', re.search(r"^guidedbp = \[(.*?)\]", table,
                                                  re.M | re.S)[1])
    assert "demo/data/*" in patterns  # read as meant
    package = REPO / "guidedbp"
    shipped = {path for pattern in patterns for path in package.glob(pattern) if path.is_file()}
    data = {path for path in package.rglob("*") if path.is_file() and path.suffix != ".py"
            and "__pycache__" not in path.parts}
    assert not data - shipped, sorted(str(p.relative_to(package)) for p in data - shipped)
    assert {PACKAGED_SAMPLES / f"{name}_0.png" for name in CLASS_NAMES} <= shipped


def _tree(root: Path) -> dict[str, bytes]:
    return {path.relative_to(root).as_posix(): path.read_bytes()
            for path in sorted(root.rglob("*")) if path.is_file()}


def test_write_samples_gives_a_wheel_install_the_clones_sample_images(tmp_path, monkeypatch):
    """The examples name sample_images/...: the package carries all of it (the wheel too:
    make test-pythons runs the detector example from a bare folder), byte for byte."""
    monkeypatch.chdir(tmp_path)
    result = run_cli("demo", "--write-samples", "sample_images", code=0)
    written = _tree(tmp_path / "sample_images")
    assert written == _tree(REPO / "sample_images")
    assert {"scenes/scene_0.png", "masks/shapes/star_0.png", "cat.jpg", "CREDITS"} <= set(written)
    assert f"{len(written)} sample pictures in sample_images/" in result.stderr
    assert not (tmp_path / "demo-out").exists()  # it writes the samples only
    run_cli("demo", "--write-samples", "sample_images", "-q", code=0)  # the same bytes: kept
    (tmp_path / "sample_images" / "cat.jpg").write_bytes(b"a photo of yours")
    result = run_cli("demo", "--write-samples", "sample_images")
    assert_one_line_error(result, "sample_images/cat.jpg exists and is not the sample")
    assert (tmp_path / "sample_images" / "cat.jpg").read_bytes() == b"a photo of yours"


def test_every_sample_the_pages_name_is_in_the_package():
    """Each ``sample_images/...`` path of the README's and the docs' examples is one the
    package carries (a file, or a folder of some), so they run after a wheel install."""
    from guidedbp.demo.samples import packaged_files

    shipped = set(packaged_files())
    folders = {str(Path(name).parent) for name in shipped} | {
        str(parent) for name in shipped for parent in Path(name).parents}
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    named = {(page.name, found) for page in pages for found in re.findall(
        r"sample_images/([\w./*-]*[\w*])", page.read_text(encoding="utf-8"))}
    assert any(name == "scenes" for _, name in named)
    missing = sorted((page, name) for page, name in named if name.rstrip("/") not in shipped
                     and name.rstrip("/") not in folders
                     and not any(Path(s).match(name) for s in shipped))
    assert not missing, f"the pages name samples the package lacks: {missing}"
