"""``guidedbp explain``: a generated tree of good and bad images through the real command.

Most cases run in-process with click's CliRunner, so TensorFlow is imported once;
a few run ``python -m guidedbp`` in a subprocess: SIGKILL and Ctrl-C mid-run, the
imports ``--help`` pays for, and the exit code a shell sees. One tiny model serves
the module: 16x16x3 -> Rescaling -> Conv2D(4, 3, relu) -> global average -> Dense(3,
softmax), saved once as .keras; a second one with free spatial size checks that
images keep their own size.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import keras
import numpy as np
import pytest
from PIL import Image

from guidedbp import Explainer
from guidedbp.io.images import decode_image
from guidedbp.io.inputs import output_stem
from guidedbp.io.manifest import read_manifest
from guidedbp.models.preprocess import preprocess
from guidedbp.models.resizing import fit
from guidedbp.render import DEFAULT_TILE, PANEL_GAP, PANEL_MARGIN, RENDERS, render

from .helpers import (
    assert_one_line_error,
    guidedbp_command,
    run_cli,
    subprocess_environment,
    tinted_noise,
    wait_for_lines,
)
from .imagetree import EMPTY, NOT_IMAGE, make_flat, make_tree, reason_matches, snapshot
from .models import colour_cnn

LABELS = ["cat", "dog", "bird"]
ALL_RENDERS = ",".join(RENDERS)
RECORD_KEYS = {"input", "status", "error", "class", "label", "score", "method", "guided",
               "layers", "outputs", "raw", "targets", "caveats", "input_file", "made_by"}
TARGET_KEYS = {"class", "label", "score", "outputs", "raw", "caveats"}
REPO = Path(__file__).resolve().parents[1]
FLAT_COUNT = 320

# The good images of the tree, by their path below it.
TREE_GOOD = ["top.png", "a/cat.jpg", "b/cat.jpg", "b/deep/er/gray.png", "mixed/cat.jpg",
             "mixed/cat.png", "mixed/rgba.png", "mixed/palette.gif", "mixed/cmyk.jpg",
             "mixed/sixteen.png", "mixed/UPPER.JPG", "formats/photo.jpeg", "formats/pic.bmp",
             "formats/pic.webp", "formats/scan.tif", "formats/big.TIFF"]


def stem(tree, name: str, found: bool = True) -> str:
    """Where a tree image's outputs go below OUT: under the tree folder's own name when
    the run named the folder (or a glob in it: ``found``), else under its file name."""
    return output_stem(tree.path(name), str(tree.root) if found else None)


# -- fixtures and helpers --------------------------------------------------------------------


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("explain")


@pytest.fixture(scope="module")
def tiny(workspace):
    """The module's model: .keras path, labels file, and the model loaded back."""
    path = workspace / "tiny.keras"
    colour_cnn((16, 16, 3)).save(path)
    labels = workspace / "labels.txt"
    labels.write_text("\n".join(LABELS) + "\n")
    model = keras.models.load_model(path)
    return SimpleNamespace(path=str(path), labels=str(labels), model=model,
                           explainer=Explainer(model))


@pytest.fixture(scope="module")
def free(workspace):
    """The same network with free height and width."""
    path = workspace / "free.keras"
    colour_cnn((None, None, 3)).save(path)
    model = keras.models.load_model(path)
    return SimpleNamespace(path=str(path), model=model, explainer=Explainer(model))


@pytest.fixture(scope="module")
def tree(workspace):
    return make_tree(workspace / "tree")


def explain(*args: str):
    """Run ``guidedbp explain ARGS`` in-process; stdout and stderr are kept apart."""
    return run_cli("explain", *args)


def records_of(out: Path) -> list[dict]:
    return read_manifest(out / "manifest.jsonl")


def by_input(records: list[dict], root: Path) -> dict[str, dict]:
    return {Path(os.path.relpath(r["input"], root)).as_posix(): r for r in records}


def model_input(path: str, size=(16, 16)):
    """What the model should see for an image: decoded, fitted (stretch), preprocessed."""
    original = decode_image(path)
    fitted, placement = fit(original, size, "stretch")
    return SimpleNamespace(original=original, fitted=fitted, placement=placement,
                           x=preprocess(fitted, "none"))


def load_png(path: Path) -> Image.Image:
    with Image.open(path) as image:
        assert image.format == "PNG"
        image.load()  # decodes every byte: a truncated file fails here
        return image.copy()


def stderr_lines(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.strip()]


# -- one run over the whole tree ---------------------------------------------------------------


@pytest.fixture(scope="module")
def full(workspace, tree, tiny):
    """The tree through every render, with --raw and --labels, into an OUT outside it."""
    out = workspace / "full"
    before = snapshot(tree.root)
    result = explain(tiny.path, tree.root, "-o", out, "--labels", tiny.labels, "--raw",
                     "--render", ALL_RENDERS, "--batch-size", "4")
    after = snapshot(tree.root)
    records = records_of(out)
    return SimpleNamespace(result=result, out=out, records=records, before=before, after=after,
                           inputs=by_input(records, tree.root))


def test_bad_files_do_not_stop_the_run(full, tree):
    assert full.result.exit_code == 1  # some inputs failed
    assert sorted(full.inputs) == sorted([*tree.good, *tree.bad])
    assert all(full.inputs[name]["status"] == "ok" for name in tree.good)
    for name, reason in tree.bad.items():
        record = full.inputs[name]
        assert record["status"] == "error"
        assert reason_matches(record["error"], reason), (name, record["error"])
        assert record["outputs"] == {} and record["raw"] is None and record["targets"] == []
        assert record["class"] is None and record["score"] is None


def test_summary_counts_and_lists_failures(full, tree):
    lines = stderr_lines(full.result)
    assert lines[0].startswith(
        f"{len(tree.good)} explained, {len(tree.bad)} failed, "
        f"{len(tree.passed_over)} other files passed over in ")
    assert lines[0].endswith(f"maps, manifest.jsonl and index.html in {full.out}/")
    failed = sorted(lines[1:])
    assert failed == sorted(f"  failed: {tree.path(name)}: {full.inputs[name]['error']}"
                            for name in tree.bad)
    assert full.result.stdout == ""
    assert "Traceback" not in full.result.output


def test_manifest_records_have_every_field(full):
    for record in full.records:
        assert set(record) == RECORD_KEYS
        assert record["method"] == "guided"
        assert record["guided"]["guided"]["guide"] == "all"
        assert sum(record["guided"]["guided"]["guided_activations"].values()) > 0
        assert record["error"] is None or "\n" not in record["error"]
        for target in record["targets"]:
            assert set(target) == TARGET_KEYS


def test_outputs_sit_at_the_input_paths(full, tree):
    for name in TREE_GOOD:
        record = full.inputs[name]
        where = stem(tree, name)
        assert where == "tree/" + name  # the absolute folder's own name, then the path in it
        assert record["outputs"] == {r: f"{where}.guided.{r}.png" for r in RENDERS}
        assert record["raw"] == f"{where}.guided.npy"
        assert record["targets"] == [{key: record[key] for key in TARGET_KEYS}]


def test_out_holds_the_manifest_and_the_listed_outputs_only(full):
    listed = {"manifest.jsonl", "index.html"}
    for record in full.records:
        listed.update(record["outputs"].values())
        if record["raw"]:
            listed.add(record["raw"])
    on_disk = {Path(p).as_posix() for p in snapshot(full.out)}
    assert on_disk == listed  # every listed file exists; no temporary file is left


def test_input_tree_is_unchanged(full):
    assert full.after == full.before


def test_renders_are_pngs_at_the_original_size(full, tree):
    for name, (height, width) in tree.good.items():
        outputs = full.inputs[name]["outputs"]
        for render_name in ("color", "heatmap", "overlay"):
            image = load_png(full.out / outputs[render_name])
            assert (image.mode, image.size) == ("RGB", (width, height)), (name, render_name)
        gray = load_png(full.out / outputs["gray"])
        assert (gray.mode, gray.size) == ("L", (width, height))
        panel = load_png(full.out / outputs["panel"])
        assert panel.mode == "RGB"
        # original, color, gray and overlay side by side in 224-px tiles, with a caption,
        # titles and colorbars.
        tile_width = round(width * DEFAULT_TILE / max(width, height))
        assert panel.width == 2 * PANEL_MARGIN + 4 * tile_width + 3 * PANEL_GAP
        assert panel.height > round(height * DEFAULT_TILE / max(width, height))


def test_raw_map_equals_the_explainer_on_the_preprocessed_image(full, tree, tiny):
    for name in tree.good:
        record = full.inputs[name]
        raw = np.load(full.out / record["raw"])
        assert raw.dtype == np.float32 and raw.shape == (16, 16, 3)
        expected = tiny.explainer(model_input(tree.path(name)).x[None], record["class"])[0]
        np.testing.assert_allclose(raw, expected, rtol=0, atol=1e-6, err_msg=name)
        assert np.abs(raw).max() > 0  # a real map, not zeros


def test_renders_show_the_raw_map_on_the_original_image(full, tree):
    for name in tree.good:
        record = full.inputs[name]
        seen = model_input(tree.path(name))
        shown = seen.placement.to_original(np.load(full.out / record["raw"]))
        for render_name in ("color", "gray", "overlay"):
            expected = render(render_name, shown, seen.original)
            actual = np.asarray(load_png(full.out / record["outputs"][render_name]))
            np.testing.assert_array_equal(actual, expected, err_msg=f"{name} {render_name}")


def test_class_label_and_score_are_the_models_prediction(full, tree, tiny):
    names = sorted(tree.good)
    batch = np.stack([model_input(tree.path(name)).x for name in names])
    probabilities = tiny.model.predict(batch, verbose=0)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1, atol=1e-5)  # softmax output
    for name, row in zip(names, probabilities):
        record = full.inputs[name]
        assert record["class"] == int(np.argmax(row))
        assert record["label"] == LABELS[record["class"]]
        assert record["score"] == pytest.approx(float(row[record["class"]]), abs=1e-5)


def test_same_inputs_give_identical_files(full, tree, tiny, tmp_path):
    again = tmp_path / "again"
    result = explain(tiny.path, tree.root, "-o", again, "--labels", tiny.labels, "--raw",
                     "--render", ALL_RENDERS, "--batch-size", "4")
    assert result.exit_code == 1
    first, second = snapshot(full.out), snapshot(again)
    assert sorted(first) == sorted(second)
    for name in first:
        if name.endswith((".png", ".npy")):
            assert first[name][2] == second[name][2], name  # sha256 of the bytes
    assert records_of(again) == full.records


# -- where outputs go -------------------------------------------------------------------------


def test_default_output_folder_is_guidedbp_out(tree, tiny, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = snapshot(tree.root)
    shutil.copytree(tree.path("a"), tmp_path / "a")
    shutil.copytree(tree.path("b"), tmp_path / "b")
    result = explain(tiny.path, "a", "b/cat.jpg")  # a folder by its name, a file by its own
    assert result.exit_code == 0, result.output
    assert sorted(snapshot(tmp_path / "guidedbp-out")) == [
        "a/cat.jpg.guided.color.png", "a/cat.jpg.guided.overlay.png",  # default renders
        "cat.jpg.guided.color.png", "cat.jpg.guided.overlay.png",
        "index.html", "manifest.jsonl",
    ]
    assert snapshot(tree.root) == before


def test_each_input_goes_under_its_own_last_component(tree, tiny, tmp_path, monkeypatch):
    # Issue 19, item 20: an absolute folder writes OUT/NAME/..., ../cat.jpg writes
    # OUT/cat.jpg.* (no %2F, no %2E%2E); resume, shards and merge-manifests agree.
    monkeypatch.chdir(tree.root / "b")
    inputs = [str(tree.root / "mixed"), "../a/cat.jpg"]
    mixed = ["UPPER.JPG", "cat.jpg", "cat.png", "cmyk.jpg", "palette.gif", "rgba.png",
             "sixteen.png"]
    names = ["cat.jpg", *(f"mixed/{name}" for name in mixed)]
    out = tmp_path / "out"
    assert explain(tiny.path, *inputs, "-o", out, "--render", "color").exit_code == 0
    assert sorted(snapshot(out)) == sorted(
        ["index.html", "manifest.jsonl", *(f"{name}.guided.color.png" for name in names)])
    first = snapshot(out)
    result = explain(tiny.path, *inputs, "-o", out, "--render", "color", "--skip-existing")
    assert result.exit_code == 0 and "0 explained, 8 skipped (outputs exist)" in result.stderr
    assert {k: v for k, v in snapshot(out).items() if k.endswith(".png")} == {
        k: v for k, v in first.items() if k.endswith(".png")}  # nothing rewritten
    sharded = tmp_path / "sharded"
    for shard in ("0/2", "1/2"):
        assert explain(tiny.path, *inputs, "-o", sharded, "--render", "color", "--shard",
                       shard).exit_code == 0
    run_cli("merge-manifests", sharded, code=0)
    by_input = {r["input"]: r["outputs"] for r in records_of(sharded)}
    assert by_input == {r["input"]: r["outputs"] for r in records_of(out)}
    # The same folder named relatively (from elsewhere) lands at the same names.
    monkeypatch.chdir(tree.root)
    again = tmp_path / "again"
    assert explain(tiny.path, "mixed", "a/cat.jpg", "-o", again, "--render",
                   "color").exit_code == 0
    assert sorted(p for p in snapshot(again) if p.endswith(".png")) == sorted(
        p for p in first if p.endswith(".png"))


def test_two_inputs_of_one_name_are_refused_naming_both(tree, tiny, tmp_path):
    result = explain(tiny.path, tree.path("a/cat.jpg"), tree.path("b/cat.jpg"), "-o",
                     tmp_path / "out")
    assert_one_line_error(result, f"inputs {tree.path('a/cat.jpg')!r} and "
                                  f"{tree.path('b/cat.jpg')!r} would both write their maps "
                                  "under 'cat.jpg'")
    assert not (tmp_path / "out").exists()


def test_hidden_images_in_folders_are_counted_in_the_summary(tiny, tmp_path):
    # Issue 19, item 11: ..photo.png is hidden (as ls and the shell's * see it): skipped,
    # but said; named directly, it is explained.
    folder = tmp_path / "photos"
    folder.mkdir()
    for name in ("shown.png", "..photo.png", ".hidden.png"):
        Image.fromarray(tinted_noise(12, 12, seed=len(name))).save(folder / name)
    (folder / ".git").mkdir()
    result = explain(tiny.path, folder, "-o", tmp_path / "out")
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith(
        "1 explained, 3 hidden images or folders ('.name') skipped in ")
    result = explain(tiny.path, folder / "..photo.png", "-o", tmp_path / "named", "-q")
    assert result.exit_code == 0, result.output
    assert [r["outputs"]["color"] for r in records_of(tmp_path / "named")] == [
        "..photo.png.guided.color.png"]


def test_output_folder_inside_the_input_is_not_taken_as_input(tiny, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    photos = Path("photos")
    (photos / "sub").mkdir(parents=True)
    Image.fromarray(tinted_noise(12, 12, seed=1)).save(photos / "x.png")
    Image.fromarray(tinted_noise(10, 14, seed=2)).save(photos / "sub" / "y.png")
    (photos / "notes.txt").write_text("hi")
    before = snapshot(photos)
    maps = photos / "maps"
    for _ in range(2):
        result = explain(tiny.path, photos, "-o", maps)
        assert result.exit_code == 0, result.output
        assert [Path(r["input"]).name for r in records_of(maps)] == ["x.png", "y.png"]
        assert "2 explained, 1 other file passed over" in result.stderr
    after = snapshot(photos)
    assert {k: v for k, v in after.items() if not k.startswith("maps")} == before
    # A recursive glob does not pick up the maps either.
    result = explain(tiny.path, f"{photos}/**/*.png", "-o", maps)
    assert result.exit_code == 0, result.output
    records = records_of(maps)  # glob matches come in sorted path order
    assert [Path(r["input"]).name for r in records] == ["y.png", "x.png"]
    assert records[0]["outputs"]["color"] == "photos/sub/y.png.guided.color.png"
    # OUT may be the input folder itself: then the maps sit beside the images, and a
    # second run still explains the two images only, not the maps of the first.
    for _ in range(2):
        result = explain(tiny.path, photos / "sub", "-o", photos / "sub")
        assert result.exit_code == 0, result.output
        assert [Path(r["input"]).name for r in records_of(photos / "sub")] == ["y.png"]
    assert sorted(snapshot(photos / "sub")) == [
        "index.html", "manifest.jsonl", "sub/y.png.guided.color.png",  # under its name
        "sub/y.png.guided.overlay.png", "y.png"]


def test_no_recursive_takes_the_top_folder_only(tree, tiny, tmp_path):
    result = explain(tiny.path, tree.root, "--no-recursive", "-o", tmp_path)
    assert result.exit_code == 0, result.output
    assert [r["input"] for r in records_of(tmp_path)] == [tree.path("top.png")]
    assert "1 explained, 1 other file passed over" in result.stderr


def test_glob_input(tree, tiny, tmp_path):
    result = explain(tiny.path, f"{tree.root}/*/cat.*", "-o", tmp_path)
    assert result.exit_code == 0, result.output
    records = by_input(records_of(tmp_path), tree.root)
    assert list(records) == ["a/cat.jpg", "b/cat.jpg", "mixed/cat.jpg", "mixed/cat.png"]
    assert [r["outputs"]["color"] for r in records.values()] == [
        f"{stem(tree, name)}.guided.color.png" for name in records]


def test_named_non_image_file_is_an_error_for_that_file(tree, tiny, tmp_path):
    result = explain(tiny.path, tree.path("notes.txt"), tree.path("top.png"), "-o", tmp_path)
    assert result.exit_code == 1
    records = records_of(tmp_path)
    assert [(r["status"], r["error"]) for r in records] == [("error", NOT_IMAGE), ("ok", None)]


def test_output_size_model_keeps_the_model_resolution(tree, tiny, tmp_path):
    names = ["a/cat.jpg", "mixed/sixteen.png"]
    result = explain(tiny.path, *[tree.path(n) for n in names], "-o", tmp_path, "--raw",
                     "--render", ALL_RENDERS, "--output-size", "model")
    assert result.exit_code == 0, result.output
    for name, record in zip(names, records_of(tmp_path)):
        raw = np.load(tmp_path / record["raw"])
        fitted = model_input(tree.path(name)).fitted
        for render_name in RENDERS:
            image = load_png(tmp_path / record["outputs"][render_name])
            if render_name == "panel":
                assert image.size[0] == 2 * PANEL_MARGIN + 4 * DEFAULT_TILE + 3 * PANEL_GAP
            else:
                assert image.size == (16, 16)
                assert image.mode == ("L" if render_name == "gray" else "RGB")
                # Overlays sit on the image as the model saw it (stretched to 16x16).
                np.testing.assert_array_equal(np.asarray(image), render(render_name, raw, fitted))


# -- targets ----------------------------------------------------------------------------------


def test_classes_by_name_and_index_each_get_their_outputs(tree, tiny, tmp_path):
    names = ["a/cat.jpg", "mixed/rgba.png"]
    result = explain(tiny.path, *[tree.path(n) for n in names], "-o", tmp_path, "--raw",
                     "--labels", tiny.labels, "--class", "Cat", "--class", "2")
    assert result.exit_code == 0, result.output
    batch = np.stack([model_input(tree.path(n)).x for n in names])
    probabilities = tiny.model.predict(batch, verbose=0)
    for name, record, row in zip(names, records_of(tmp_path), probabilities):
        where = stem(tree, name, found=False)
        assert [t["class"] for t in record["targets"]] == [0, 2]
        assert [t["label"] for t in record["targets"]] == ["cat", "bird"]
        assert (record["class"], record["label"]) == (0, "cat")  # the first class asked for
        for target, slug in zip(record["targets"], ["0-cat", "2-bird"]):
            assert target["outputs"] == {
                "color": f"{where}.{slug}.guided.color.png",
                "overlay": f"{where}.{slug}.guided.overlay.png"}
            assert target["raw"] == f"{where}.{slug}.guided.npy"
            assert target["score"] == pytest.approx(float(row[target["class"]]), abs=1e-5)
            expected = tiny.explainer(model_input(tree.path(name)).x[None], target["class"])[0]
            np.testing.assert_allclose(np.load(tmp_path / target["raw"]), expected,
                                       rtol=0, atol=1e-6)
            for path in target["outputs"].values():
                load_png(tmp_path / path)
        assert record["outputs"] == record["targets"][0]["outputs"]


def test_top_k_follows_the_models_ranking(tree, tiny, tmp_path):
    names = sorted(tree.good)
    result = explain(tiny.path, tree.root, "-o", tmp_path, "--top-k", "2", "--raw")
    assert result.exit_code == 1  # the bad files
    records = by_input(records_of(tmp_path), tree.root)
    batch = np.stack([model_input(tree.path(n)).x for n in names])
    probabilities = tiny.model.predict(batch, verbose=0)
    rankings = set()
    for name, row in zip(names, probabilities):
        targets = records[name]["targets"]
        expected = np.argsort(row)[::-1][:2].tolist()
        assert [t["class"] for t in targets] == expected, name
        scores = [t["score"] for t in targets]
        assert scores == sorted(scores, reverse=True)
        assert scores == pytest.approx([float(row[c]) for c in expected], abs=1e-5)
        for target in targets:  # no labels: the class index names the files
            assert target["label"] is None
            assert target["outputs"]["color"] == (
                f"{stem(tree, name)}.{target['class']}.guided.color.png")
            assert (tmp_path / target["raw"]).is_file()
        rankings.add(tuple(expected))
    assert len(rankings) > 1  # the images do not all rank the classes alike


def test_top_k_beyond_the_class_count_gives_every_class(tree, tiny, tmp_path):
    result = explain(tiny.path, tree.path("top.png"), "-o", tmp_path, "--top-k", "9",
                     "--labels", tiny.labels)
    assert result.exit_code == 0, result.output
    (record,) = records_of(tmp_path)
    row = tiny.model.predict(model_input(tree.path("top.png")).x[None], verbose=0)[0]
    assert [t["class"] for t in record["targets"]] == np.argsort(row)[::-1].tolist()
    assert [t["label"] for t in record["targets"]] == [LABELS[c] for c in np.argsort(row)[::-1]]


def test_top_k_never_repeats_a_class_when_probabilities_tie(tree, tmp_path):
    # Logits (0, 2e-8, -5): class 1 has the larger logit, but in float32 softmax
    # classes 0 and 1 get exactly the same probability.
    model = colour_cnn((16, 16, 3))
    dense = model.layers[-1]
    dense.set_weights([np.zeros((4, 3), np.float32), np.array([0, 2e-8, -5], np.float32)])
    probabilities = model.predict(model_input(tree.path("top.png")).x[None], verbose=0)[0]
    assert probabilities[0] == probabilities[1]
    model.save(tmp_path / "tie.keras")
    result = explain(tmp_path / "tie.keras", tree.path("top.png"), "-o", tmp_path / "o",
                     "--top-k", "3")
    assert result.exit_code == 0, result.output
    (record,) = records_of(tmp_path / "o")
    assert [t["class"] for t in record["targets"]] == [1, 0, 2]  # top-1 first, then the tie
    assert len({t["outputs"]["color"] for t in record["targets"]}) == 3


# -- usage and model errors: exit 2, one line ---------------------------------------------------


def test_unknown_class_name(tree, tiny, tmp_path):
    out = tmp_path / "out"
    result = explain(tiny.path, tree.path("top.png"), "-o", out, "--labels", tiny.labels,
                     "--class", "zebra")
    assert_one_line_error(result, "unknown class 'zebra'")
    assert not out.exists()  # nothing written


def test_class_name_without_labels(tree, tiny, tmp_path):
    result = explain(tiny.path, tree.path("top.png"), "-o", tmp_path, "--class", "cat")
    assert_one_line_error(result, "'cat'", "--labels")


def test_class_index_out_of_range(tree, tiny, tmp_path):
    result = explain(tiny.path, tree.path("top.png"), "-o", tmp_path, "--class", "3")
    assert_one_line_error(result, "class index 3 is out of range", "0..2")


def test_missing_model(tree, tmp_path):
    result = explain(tmp_path / "nope.keras", tree.path("top.png"), "-o", tmp_path / "out")
    assert_one_line_error(result, "nope.keras", "not found")
    assert not (tmp_path / "out").exists()


def test_file_that_is_not_a_model(tree, tmp_path):
    result = explain(tree.path("notes.txt"), tree.path("top.png"), "-o", tmp_path)
    assert_one_line_error(result, "notes.txt", "not a model file")


def test_debug_shows_the_traceback(tree, tmp_path):
    result = explain(tmp_path / "nope.keras", tree.path("top.png"), "--debug")
    assert type(result.exception).__name__ == "ModelLoadError"
    assert result.exc_info[2] is not None


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--class", "1", "--top-k", "2"], "--class and --top-k cannot be used together"),
        (["--render", "color,sepia"], "sepia"),
        (["--top-k", "0"], "--top-k"),
        (["--size", "8by8"], "HxW"),
    ],
)
def test_bad_options(tree, tiny, tmp_path, args, fragment):
    result = explain(tiny.path, tree.path("top.png"), "-o", tmp_path / "out", *args)
    assert result.exit_code == 2
    assert fragment in result.stderr
    assert "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_missing_input(tree, tiny, tmp_path):
    result = explain(tiny.path, tree.path("top.png"), tmp_path / "gone.jpg")
    assert result.exit_code == 2
    assert "gone.jpg" in result.stderr and "not found" in result.stderr


def test_folder_without_images(tiny, tmp_path):
    (tmp_path / "notes.txt").write_text("hi")
    result = explain(tiny.path, tmp_path, "-o", tmp_path / "out")
    assert_one_line_error(result, "no images found", "1 other file passed over")


def test_help_documents_the_exit_codes():
    result = run_cli("explain", "--help")
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert "Exit codes: 0 every input explained (or skipped), 1 some inputs failed" in text
    assert "2 usage or model errors" in text
    assert "130 interrupted" in text


# -- --fail-fast and --skip-existing ---------------------------------------------------------------


@pytest.mark.parametrize("batch_size", ["1", "16"])  # the bad file between batches, and inside one
def test_fail_fast_stops_at_the_first_bad_input(tree, tiny, tmp_path, batch_size):
    names = ["top.png", "a/cat.jpg", "bad/empty.jpg", "formats/pic.bmp", "mixed/rgba.png"]
    result = explain(tiny.path, *[tree.path(n) for n in names], "-o", tmp_path,
                     "--fail-fast", "--batch-size", batch_size)
    assert result.exit_code == 1
    records = records_of(tmp_path)
    assert [(r["input"], r["status"], r["error"]) for r in records] == [
        (tree.path("top.png"), "ok", None),
        (tree.path("a/cat.jpg"), "ok", None),
        (tree.path("bad/empty.jpg"), "error", EMPTY),
    ]
    assert sorted(snapshot(tmp_path)) == sorted([
        "manifest.jsonl", "index.html", *(f"{stem(tree, name, False)}.guided.{render}.png"
                            for name in ("top.png", "a/cat.jpg")
                            for render in ("color", "overlay"))])
    assert f"failed: {tree.path('bad/empty.jpg')}: empty file" in result.stderr


def inodes(root: Path) -> dict[str, int]:
    """Every file under ``root``: relative path -> inode number."""
    return {str(path.relative_to(root)): path.stat().st_ino
            for path in root.rglob("*") if path.is_file()}


def test_skip_existing_resumes_without_rewriting(tree, tiny, tmp_path):
    names = ["top.png", "a/cat.jpg", "mixed/cat.png", "bad/empty.jpg"]
    inputs = [tree.path(n) for n in names]
    out = tmp_path / "out"
    assert explain(tiny.path, *inputs, "-o", out, "--raw").exit_code == 1
    first = snapshot(out)
    first_records = records_of(out)
    # Outputs are replaced by a rename, which gives them a new inode: a rewrite shows
    # however coarse the file system's clock (mtime_ns may not move in a short run).
    first_inodes = inodes(out)

    result = explain(tiny.path, *inputs, "-o", out, "--raw", "--skip-existing")
    assert result.exit_code == 1  # the empty file still fails
    assert "0 explained, 3 skipped (outputs exist), 1 failed" in result.stderr
    records = records_of(out)
    # The earlier records are carried over whole: the manifest an uninterrupted run writes.
    assert records == first_records
    again = snapshot(out)
    del first["manifest.jsonl"], again["manifest.jsonl"]
    assert again == first  # same bytes, same mtime_ns: nothing rewritten
    again_inodes = inodes(out)
    del first_inodes["manifest.jsonl"], again_inodes["manifest.jsonl"]
    assert again_inodes == first_inodes  # the same files, not copies renamed into place

    deleted = first_records[2]["outputs"]["overlay"]  # mixed/cat.png's overlay only
    (out / deleted).unlink()
    result = explain(tiny.path, *inputs, "-o", out, "--raw", "--skip-existing")
    assert result.exit_code == 1
    assert "1 explained, 2 skipped (outputs exist), 1 failed" in result.stderr
    assert records_of(out) == first_records
    third = snapshot(out)
    del third["manifest.jsonl"]
    b_cat = {p for p in first if p.startswith(stem(tree, "mixed/cat.png", found=False))}
    assert {p: third[p] for p in first if p not in b_cat} == {
        p: first[p] for p in first if p not in b_cat}
    assert third[deleted][2] == first[deleted][2]  # rewritten, identical
    assert third[deleted][1] != first[deleted][1]


# -- models with free spatial dimensions ----------------------------------------------------------


def test_free_size_model_sees_each_image_at_its_own_size(tree, free, tmp_path):
    tiny_image = tmp_path / "one.png"
    Image.fromarray(tinted_noise(1, 1, seed=3)).save(tiny_image)
    names = ["a/cat.jpg", "mixed/sixteen.png", "formats/pic.webp"]
    result = explain(free.path, *[tree.path(n) for n in names], tiny_image, "-o", tmp_path / "o",
                     "--raw", "--render", "color,panel")
    assert result.exit_code == 1  # a 1x1 image is smaller than the 3x3 kernel
    records = records_of(tmp_path / "o")
    for name, record in zip(names, records):
        height, width = tree.good[name]
        raw = np.load(tmp_path / "o" / record["raw"])
        assert raw.shape == (height, width, 3)
        x = preprocess(decode_image(tree.path(name)), "none")
        np.testing.assert_allclose(raw, free.explainer(x[None], record["class"])[0],
                                   rtol=0, atol=1e-6)
        assert load_png(tmp_path / "o" / record["outputs"]["color"]).size == (width, height)
    failed = records[3]
    assert failed["status"] == "error" and failed["outputs"] == {}
    assert failed["error"].startswith("the model cannot take this image (1x1 at its input): ")
    assert "\n" not in failed["error"] and len(failed["error"]) < 300


def test_free_size_model_with_size_option(tree, free, tmp_path):
    tiny_image = tmp_path / "one.png"
    Image.fromarray(tinted_noise(1, 1, seed=3)).save(tiny_image)
    names = [tree.path("a/cat.jpg"), str(tiny_image)]
    result = explain(free.path, *names, "-o", tmp_path / "o", "--raw", "--size", "8x8")
    assert result.exit_code == 0, result.output
    for path, record in zip(names, records_of(tmp_path / "o")):
        raw = np.load(tmp_path / "o" / record["raw"])
        assert raw.shape == (8, 8, 3)
        expected = free.explainer(model_input(path, (8, 8)).x[None], record["class"])[0]
        np.testing.assert_allclose(raw, expected, rtol=0, atol=1e-6)
        height, width = decode_image(path).shape[:2]
        assert load_png(tmp_path / "o" / record["outputs"]["overlay"]).size == (width, height)


# -- the real command in a subprocess --------------------------------------------------------------


@pytest.fixture(scope="module")
def flat(workspace) -> Path:
    """FLAT_COUNT small PNGs: a run of them at --batch-size 4 lasts long enough to stop."""
    folder = workspace / "flat"
    make_flat(folder, FLAT_COUNT)
    return folder


def test_sigkill_mid_run_leaves_no_partial_file(flat, tiny, tmp_path):
    out = tmp_path / "out"
    process = subprocess.Popen(
        guidedbp_command("explain", tiny.path, flat, "-o", out, "--batch-size", "4", "--raw",
                 "--render", ALL_RENDERS, "-q"),
        env=subprocess_environment(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_for_lines(out / "manifest.jsonl", 8, process)
    process.kill()
    process.communicate(timeout=30)
    assert process.returncode == -signal.SIGKILL
    pngs = npys = 0
    for folder, _, names in os.walk(out):
        for name in names:
            path = Path(folder) / name
            if name.startswith("."):
                # A hard kill can leave a hidden ".NAME.PID.RANDOM.tmp" behind, never a
                # visible partial file: the target is only ever renamed into place whole;
                # and the (empty, unlocked) lock file.
                assert name.endswith(".tmp") or name == ".manifest.jsonl.lock", name
            elif name.endswith(".png"):
                load_png(path)
                pngs += 1
            elif name.endswith(".npy"):
                assert np.load(path).shape == (16, 16, 3)
                npys += 1
            else:
                assert name == "manifest.jsonl", name
    assert pngs >= 8 * len(RENDERS) and npys >= 8
    assert npys < FLAT_COUNT  # it was killed mid-run


def test_ctrl_c_stops_at_once_keeps_what_was_written_and_exits_130(flat, tiny, tmp_path):
    out = tmp_path / "out"
    process = subprocess.Popen(
        guidedbp_command("explain", tiny.path, flat, "-o", out, "--batch-size", "4",
                         "--render", ALL_RENDERS),
        env=subprocess_environment(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_for_lines(out / "manifest.jsonl", 8, process)
    # Ctrl-C at a point the clock cannot move: frozen while its lines are counted and
    # Ctrl-C is queued, the process receives it the moment it resumes.
    process.send_signal(signal.SIGSTOP)
    stopped_at = (out / "manifest.jsonl").read_bytes().count(b"\n")
    process.send_signal(signal.SIGINT)
    process.send_signal(signal.SIGCONT)
    _, stderr = process.communicate(timeout=60)  # a hang guard, not a measure of speed
    stderr = stderr.decode()
    assert process.returncode == 130, stderr
    lines = (out / "manifest.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]  # every line is whole
    # At once: no record after Ctrl-C but the one it may have been delivering.
    assert 8 <= stopped_at <= len(records) <= stopped_at + 1 < FLAT_COUNT
    assert all(r["status"] == "ok" for r in records)
    for record in records:
        for path in record["outputs"].values():
            load_png(out / path)
    assert f"interrupted: {len(records)} explained in " in stderr
    assert "Traceback" not in stderr


def test_exit_code_seen_by_the_shell(tree, tiny, tmp_path):
    process = subprocess.run(
        guidedbp_command("explain", tiny.path, tree.path("top.png"), tree.path("bad/text.jpg"),
                 "-o", tmp_path),
        env=subprocess_environment(), capture_output=True, text=True, timeout=120)
    assert process.returncode == 1
    assert process.stdout == ""
    summary, failed = process.stderr.splitlines()[-2:]
    assert summary.startswith("1 explained, 1 failed in ")
    assert failed == f"  failed: {tree.path('bad/text.jpg')}: {NOT_IMAGE}"
    assert "Traceback" not in process.stderr
    assert [r["status"] for r in records_of(tmp_path)] == ["ok", "error"]


def test_help_and_version_do_not_import_tensorflow():
    script = textwrap.dedent("""
        import contextlib, io, json, sys
        from guidedbp.cli import main
        texts = []
        for args in (["--help"], ["explain", "--help"], ["--version"]):
            buffer = io.StringIO()
            with contextlib.redirect_stdout(buffer):
                code = main.main(args, prog_name="guidedbp", standalone_mode=False)
            texts.append((code, buffer.getvalue()))
        heavy = sorted(m for m in ("tensorflow", "keras") if m in sys.modules)
        print(json.dumps({"texts": texts, "heavy": heavy}))
    """)
    process = subprocess.run([sys.executable, "-c", script], env=subprocess_environment(),
                             capture_output=True, text=True, timeout=60)
    assert process.returncode == 0, process.stderr
    report = json.loads(process.stdout)
    assert report["heavy"] == []
    (main_code, main_help), (explain_code, explain_help), (version_code, version) = report["texts"]
    assert (main_code, explain_code, version_code) == (0, 0, 0)
    assert "explain" in main_help and "inspect" in main_help
    assert "Exit codes:" in explain_help and "--skip-existing" in explain_help
    # The versions installed, as pip reports them (Python's as the interpreter does).
    from importlib import metadata

    installed = ", ".join(f"{name} {metadata.version(name)}"
                          for name in ("tensorflow", "keras", "numpy", "pillow", "click"))
    python = "{}.{}.{}".format(*sys.version_info)
    assert version == f"guidedbp {metadata.version('guidedbp')} (Python {python}; {installed})\n"


def test_version_names_the_distribution_that_installed_a_module(tmp_path):
    # TensorFlow as a slim CI image has it: the tensorflow-cpu distribution (a real
    # dist-info that importlib.metadata reads, ahead of this venv on the path).
    info = tmp_path / "tensorflow_cpu-2.99.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tensorflow-cpu\n"
                                   "Version: 2.99.0\n")
    (info / "top_level.txt").write_text("tensorflow\n")
    environment = subprocess_environment()
    environment["PYTHONPATH"] = os.pathsep.join([str(tmp_path), environment["PYTHONPATH"]])
    process = subprocess.run([sys.executable, "-m", "guidedbp", "--version"], env=environment,
                             capture_output=True, text=True, timeout=60)
    assert process.returncode == 0, process.stderr
    assert "tensorflow 2" in process.stdout and "tensorflow-cpu 2.99.0, keras " in process.stdout


def test_version_finds_modules_of_wheels_without_top_level_txt(monkeypatch, tmp_path):
    # Python 3.10's packages_distributions, verbatim: it reads top_level.txt only, which
    # the numpy (meson-python) and click (flit) wheels do not ship, so --version there said
    # "numpy missing, click missing". Modules are found from a wheel's RECORD too.
    import collections
    from importlib import metadata

    def packages_distributions_of_python_310():
        pkg_to_dist = collections.defaultdict(list)
        for dist in metadata.distributions():
            for pkg in (dist.read_text('top_level.txt') or '').split():
                pkg_to_dist[pkg].append(dist.metadata['Name'])
        return dict(pkg_to_dist)

    monkeypatch.setattr(metadata, "packages_distributions", packages_distributions_of_python_310)
    assert metadata.distribution("click").read_text("top_level.txt") is None  # as on 3.10
    # A wheel that installs a single-file module and declares nothing (flit's way).
    info = tmp_path / "click_shim-1.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: click_shim\nVersion: 1.2\n")
    (info / "RECORD").write_text("click.py,,\nclick_shim-1.2.dist-info/METADATA,,\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from guidedbp.cli import version_line

    line = version_line()
    assert "missing" not in line
    for name in ("tensorflow", "keras", "numpy", "pillow"):
        assert f" {name} {metadata.version(name)}" in line
    assert line.endswith(f", click {metadata.version('click')}, click-shim 1.2)")
