"""Resume knows what made a map: every manifest record carries ``made_by`` (the model's
content digest, the maths version, digests of the options that change a map and of
those that change a picture), and ``--skip-existing`` carries over only records made
the same way; the others are recomputed, counted by reason in the summary.

The two models are the same tiny CNN with different seeds (different weights, so other
classes and scores), saved as ``.keras`` files once per module; every resumed run is
checked against a fresh run of the same command into another folder: the same manifest
and the same bytes in every map.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import zipfile
from pathlib import Path

import keras
import numpy as np
import pytest

import guidedbp
from guidedbp.io.manifest import read_manifest

from . import s3server
from .helpers import assert_one_line_error, run_cli
from .imagetree import make_flat
from .models import tiny_cnn

COUNT = 4
FLAGS = ("--render", "color", "--no-report")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fingerprint")


@pytest.fixture(scope="module")
def images(workspace) -> Path:
    make_flat(workspace / "images", COUNT, size=(16, 16))
    return workspace / "images"


@pytest.fixture(scope="module")
def models(workspace):
    """``a.keras`` and ``b.keras`` (other weights); ``copy.keras`` (a's bytes at another
    path); ``resaved.keras`` (a saved again: the same config and weights, another
    ``date_saved`` in its metadata); ``a.h5`` (a in the legacy format)."""
    first, second = tiny_cnn(1), tiny_cnn(2)
    paths = {name: str(workspace / name) for name in
             ("a.keras", "b.keras", "copy.keras", "resaved.keras", "a.h5")}
    first.save(paths["a.keras"])
    second.save(paths["b.keras"])
    first.save(paths["a.h5"])
    shutil.copyfile(paths["a.keras"], paths["copy.keras"])
    _resave(paths["a.keras"], paths["resaved.keras"])
    return paths


def _resave(source: str, target: str) -> None:
    """``source`` as Keras writes it when the same model is saved at another moment:
    every member the same but ``metadata.json``'s ``date_saved``."""
    with zipfile.ZipFile(source) as archive, zipfile.ZipFile(target, "w") as copy:
        for info in archive.infolist():
            data = archive.read(info)
            if info.filename == "metadata.json":
                metadata = json.loads(data)
                metadata["date_saved"] = "1999-01-01@00:00:00"
                data = json.dumps(metadata).encode()
            copy.writestr(info, data)
    assert Path(source).read_bytes() != Path(target).read_bytes()


def _explain(model, images, out, *flags, code=0):
    return run_cli("explain", model, images, "-o", out, *FLAGS, *flags, code=code)


def _summary(result) -> str:
    """The summary line (Ray may warn before it)."""
    return next(line for line in result.stderr.splitlines() if " explained" in line)


def _maps(out: Path) -> dict[str, bytes]:
    return {str(path.relative_to(out)): path.read_bytes() for path in sorted(out.rglob("*"))
            if path.suffix in (".png", ".npy")}


def _assert_same_as_fresh(out: Path, fresh: Path) -> None:
    """``out`` (resumed) holds the manifest and maps a fresh run wrote into ``fresh``."""
    assert read_manifest(out / "manifest.jsonl") == read_manifest(fresh / "manifest.jsonl")
    assert _maps(out) == _maps(fresh)


# -- the cases -------------------------------------------------------------------------


def test_another_model_is_recomputed_not_carried_over(models, images, tmp_path):
    out, fresh = tmp_path / "out", tmp_path / "fresh"
    _explain(models["a.keras"], images, out)
    by_a = read_manifest(out / "manifest.jsonl")
    _explain(models["b.keras"], images, fresh)
    by_b = read_manifest(fresh / "manifest.jsonl")
    assert [r["score"] for r in by_a] != [r["score"] for r in by_b]  # the models differ

    result = _explain(models["b.keras"], images, out, "--skip-existing")
    assert _summary(result).startswith(f"{COUNT} explained, {COUNT} recomputed (made by "
                                       "another model) in ")
    _assert_same_as_fresh(out, fresh)
    made_by = read_manifest(out / "manifest.jsonl")[0]["made_by"]
    assert made_by["model"] == models["b.keras"]
    assert made_by["weights"] != by_a[0]["made_by"]["weights"]
    # Resumed once more with b: now every record is b's, carried over.
    again = _explain(models["b.keras"], images, out, "--skip-existing")
    assert _summary(again).startswith(f"0 explained, {COUNT} skipped (outputs exist) in ")


def test_other_method_options_are_recomputed(models, images, tmp_path):
    out, fresh = tmp_path / "out", tmp_path / "fresh"
    _explain(models["a.keras"], images, out, "--smooth", "2")
    result = _explain(models["a.keras"], images, out, "--smooth", "50", "--noise", "3",
                      "--skip-existing")
    assert f"{COUNT} recomputed (made with other method options)" in _summary(result)
    _explain(models["a.keras"], images, fresh, "--smooth", "50", "--noise", "3")
    _assert_same_as_fresh(out, fresh)


def test_other_render_options_are_redrawn(models, images, tmp_path):
    out, fresh = tmp_path / "out", tmp_path / "fresh"
    _explain(models["a.keras"], images, out)
    result = _explain(models["a.keras"], images, out, "--cmap", "viridis", "--skip-existing")
    assert f"{COUNT} recomputed (drawn with other render options)" in _summary(result)
    _explain(models["a.keras"], images, fresh, "--cmap", "viridis")
    _assert_same_as_fresh(out, fresh)


def test_a_new_version_of_the_maths_or_of_the_drawing_recomputes(models, images, tmp_path,
                                                                   monkeypatch):
    from guidedbp.pipeline import fingerprint

    out = tmp_path / "out"
    _explain(models["a.keras"], images, out)
    monkeypatch.setattr(fingerprint, "DRAWING_VERSION", fingerprint.DRAWING_VERSION + 1)
    result = _explain(models["a.keras"], images, out, "--skip-existing")
    assert f"{COUNT} recomputed (drawn by an earlier version)" in _summary(result)
    monkeypatch.setattr(fingerprint, "MATHS_VERSION", fingerprint.MATHS_VERSION + 1)
    result = _explain(models["a.keras"], images, out, "--skip-existing")
    assert f"{COUNT} recomputed (made by an earlier version of the methods)" in \
        _summary(result)
    made_by = read_manifest(out / "manifest.jsonl")[0]["made_by"]
    assert (made_by["maths"], made_by["drawing"]) == (fingerprint.MATHS_VERSION,
                                                       fingerprint.DRAWING_VERSION)


def test_options_that_change_no_map_carry_over(models, images, tmp_path):
    """The batch size, and the options of methods not run (rise's masks in a guided run),
    change no map: the records are carried over."""
    out = tmp_path / "out"
    _explain(models["a.keras"], images, out, "--batch-size", "4")
    result = _explain(models["a.keras"], images, out, "--batch-size", "2", "--masks", "7",
                      "--skip-existing")
    assert _summary(result).startswith(f"0 explained, {COUNT} skipped (outputs exist) in ")


def test_a_killed_store_run_resumed_with_other_masks_keeps_one_kind_of_record(
        models, images, bucket, tmp_path):
    """The issue's store case: a rise run killed part-way (its records in a manifest part,
    its maps there) and resumed with other --masks ends with every record made with the
    new masks, as a fresh run writes them."""
    source, out = f"{bucket}/images", f"{bucket}/out"
    s3server.upload(str(images), source)
    flags = ("--method", "rise", "--batch-size", "2")
    _explain(models["a.keras"], source, out, *flags, "--masks", "3")
    # What a run killed after two inputs leaves: their records in a part, no manifest.
    fs = s3server.filesystem()
    lines = fs.cat(f"{out}/manifest.jsonl").splitlines(keepends=True)
    fs.pipe(f"{out}/.manifest.jsonl.parts/20250101T000000000000Z-0badcafe-00000000.jsonl",
            b"".join(lines[:2]))
    fs.rm(f"{out}/manifest.jsonl")

    result = _explain(models["a.keras"], source, out, *flags, "--masks", "5", "--skip-existing")
    assert _summary(result).startswith(
        f"{COUNT} explained, 2 recomputed (made with other method options) in ")
    fresh = f"{bucket}/fresh"
    _explain(models["a.keras"], source, fresh, *flags, "--masks", "5")
    assert read_manifest(f"{out}/manifest.jsonl") == read_manifest(f"{fresh}/manifest.jsonl")
    maps = {key: data for key, data in s3server.objects(out).items() if key.endswith(".png")}
    assert maps == {key: data for key, data in s3server.objects(fresh).items()
                    if key.endswith(".png")}
    assert len({json.dumps(r["made_by"]) for r in read_manifest(f"{out}/manifest.jsonl")}) == 1


# -- the model's content, not its path -----------------------------------------------------------


def test_the_same_model_at_another_path_or_saved_again_carries_over(models, images, tmp_path):
    out = tmp_path / "out"
    _explain(models["a.keras"], images, out)
    first = read_manifest(out / "manifest.jsonl")
    for other in ("copy.keras", "resaved.keras"):
        result = _explain(models[other], images, out, "--skip-existing")
        assert _summary(result).startswith(f"0 explained, {COUNT} skipped (outputs exist) in ")
        records = read_manifest(out / "manifest.jsonl")
        assert [r["made_by"]["weights"] for r in records] == \
            [r["made_by"]["weights"] for r in first]
        assert records[0]["made_by"]["model"] == models[other]  # as this run names it
        assert [{**r, "made_by": None} for r in records] == \
            [{**r, "made_by": None} for r in first]


def test_the_same_model_saved_in_another_process_has_one_digest(tmp_path):
    """Keras writes ``id()`` of the objects its layers share (``shared_object_id``) into
    ``config.json``: another number in every process. The same model saved by two
    processes, or loaded and saved again, is one model; one weight changed, it is another."""
    import subprocess
    import sys

    from guidedbp.models.digest import file_digest

    from .helpers import REPO, subprocess_environment

    saved = [tmp_path / f"process{index}.keras" for index in range(2)]
    processes = [subprocess.Popen([sys.executable, "-c", "import sys; from tests.models import "
                                   "tiny_cnn; tiny_cnn(1).save(sys.argv[1])", str(path)],
                                  cwd=REPO, env=subprocess_environment()) for path in saved]
    assert [process.wait(timeout=300) for process in processes] == [0, 0]

    def config(path) -> bytes:
        with zipfile.ZipFile(path) as archive:
            return archive.read("config.json")

    assert b'"shared_object_id"' in config(saved[0])
    assert config(saved[0]) != config(saved[1])  # the ids differ
    assert file_digest(saved[0]) == file_digest(saved[1])
    loaded = keras.models.load_model(saved[0])
    loaded.save(tmp_path / "loaded-and-saved.keras")
    assert b'"shared_object_id"' not in config(tmp_path / "loaded-and-saved.keras")
    assert file_digest(tmp_path / "loaded-and-saved.keras") == file_digest(saved[0])
    weights = loaded.get_weights()
    weights[0][0, 0, 0, 0] += 1e-3
    loaded.set_weights(weights)
    loaded.save(tmp_path / "changed.keras")
    assert file_digest(tmp_path / "changed.keras") != file_digest(saved[0])


def test_an_h5_files_digest_is_its_sha256(models, images, tmp_path):
    out = tmp_path / "out"
    _explain(models["a.h5"], images, out)
    expected = hashlib.sha256(Path(models["a.h5"]).read_bytes()).hexdigest()[:16]
    assert {r["made_by"]["weights"] for r in read_manifest(out / "manifest.jsonl")} == \
        {expected}


def test_a_savedmodel_folder_by_its_content(models, images, tmp_path):
    exported = {}
    for name in ("a", "b"):
        exported[name] = tmp_path / f"{name}_savedmodel"
        keras.models.load_model(models[f"{name}.keras"]).export(exported[name], verbose=False)
    moved = tmp_path / "elsewhere" / "a_savedmodel"
    shutil.copytree(exported["a"], moved)
    out = tmp_path / "out"
    _explain(exported["a"], images, out)
    result = _explain(moved, images, out, "--skip-existing")
    assert _summary(result).startswith(f"0 explained, {COUNT} skipped (outputs exist) in ")
    result = _explain(exported["b"], images, out, "--skip-existing")
    assert f"{COUNT} recomputed (made by another model)" in _summary(result)
    # Every file counts (TensorFlow checks the variables' own checksums): an asset added
    # (a vocabulary a model could read) makes it another model.
    _explain(exported["a"], images, out, "--skip-existing")
    (moved / "assets").mkdir(exist_ok=True)
    (moved / "assets" / "vocabulary.txt").write_text("cat\ndog\n")
    result = _explain(moved, images, out, "--skip-existing")
    assert f"{COUNT} recomputed (made by another model)" in _summary(result)


@pytest.fixture
def library_images(images) -> list[str]:
    return sorted(str(path) for path in images.iterdir())


def test_in_memory_models_by_weights_and_architecture(library_images, tmp_path):
    out = str(tmp_path / "out")

    def run(model):
        return guidedbp.explain_files(model, library_images, out, renders="color",
                                      report=False, skip_existing=True)

    first = run(tiny_cnn(1))
    assert (first.done, first.recomputed) == (COUNT, {})
    # The same weights and layers, built again (other automatic layer names): carried over.
    again = run(tiny_cnn(1))
    assert (again.done, again.skipped, again.recomputed) == (0, COUNT, {})
    # The same weights, another activation: another model.
    gelu = tiny_cnn(1, activation="gelu")
    assert all(np.array_equal(x, y) for x, y in zip(gelu.get_weights(),
                                                    tiny_cnn(1).get_weights()))
    other = run(gelu)
    assert (other.done, other.recomputed) == (COUNT, {"model": COUNT})
    # Other weights: another model.
    assert run(tiny_cnn(2)).recomputed == {"model": COUNT}


def test_records_from_before_fingerprints_are_recomputed_once(models, images, tmp_path):
    out = tmp_path / "out"
    _explain(models["a.keras"], images, out)
    manifest = out / "manifest.jsonl"
    records = read_manifest(manifest)
    old = [{key: value for key, value in record.items() if key != "made_by"}
           for record in records]
    manifest.write_text("".join(json.dumps(record) + "\n" for record in old))
    result = _explain(models["a.keras"], images, out, "--skip-existing")
    assert _summary(result).startswith(
        f"{COUNT} explained, {COUNT} recomputed (written before fingerprints) in ")
    assert read_manifest(manifest) == records
    result = _explain(models["a.keras"], images, out, "--skip-existing")
    assert _summary(result).startswith(f"0 explained, {COUNT} skipped (outputs exist) in ")


def test_several_reasons_in_one_summary(models, images, tmp_path):
    out = tmp_path / "out"
    _explain(models["a.keras"], images, out)
    manifest = out / "manifest.jsonl"
    records = read_manifest(manifest)
    del records[0]["made_by"]
    manifest.write_text("".join(json.dumps(record) + "\n" for record in records))
    result = _explain(models["b.keras"], images, out, "--skip-existing")
    assert _summary(result).startswith(
        f"{COUNT} explained, {COUNT} recomputed ({COUNT - 1} made by another model, 1 written "
        "before fingerprints) in ")


# -- shards and merge-manifests --------------------------------------------------------------------


def test_a_shard_resumed_with_another_model_is_recomputed(models, images, tmp_path):
    out = tmp_path / "out"
    _explain(models["a.keras"], images, out, "--shard", "0/2")
    count = len(read_manifest(out / "manifest-0-of-2.jsonl"))
    result = _explain(models["b.keras"], images, out, "--shard", "0/2", "--skip-existing")
    assert f"{count} recomputed (made by another model)" in _summary(result)


def test_merging_shards_made_by_different_models_is_refused(models, images, tmp_path):
    out = tmp_path / "out"
    _explain(models["a.keras"], images, out, "--shard", "0/2")
    _explain(models["b.keras"], images, out, "--shard", "1/2")
    message = assert_one_line_error(run_cli("merge-manifests", out), "manifest-0-of-2.jsonl",
                                    "manifest-1-of-2.jsonl", "made by another model")
    assert models["a.keras"] in message and models["b.keras"] in message
    assert not (out / "manifest.jsonl").exists()
    # Shard 1 made again by a's model: the shards now merge.
    _explain(models["a.keras"], images, out, "--shard", "1/2", "--skip-existing")
    result = run_cli("merge-manifests", out, code=0)
    assert f"{COUNT} records from 2 shards" in result.stderr


def test_merging_a_shard_from_before_fingerprints_with_a_new_one_is_refused(
        models, images, tmp_path):
    out = tmp_path / "out"
    _explain(models["a.keras"], images, out, "--shard", "0/2")
    _explain(models["a.keras"], images, out, "--shard", "1/2")
    shard = out / "manifest-1-of-2.jsonl"
    old = [{key: value for key, value in record.items() if key != "made_by"}
           for record in read_manifest(shard)]
    shard.write_text("".join(json.dumps(record) + "\n" for record in old))
    assert_one_line_error(run_cli("merge-manifests", out), "manifest-0-of-2.jsonl",
                          "manifest-1-of-2.jsonl", "written before fingerprints")


# -- Ray ------------------------------------------------------------------------------------------


@pytest.mark.heavy  # a local Ray instance: make test-all
def test_a_ray_run_resumes_by_the_same_rule(models, images, tmp_path):
    pytest.importorskip("ray", reason="Ray is not installed: pip install '.[ray]'")
    pytest.importorskip("ray.data", reason="Ray Data is not installed: pip install '.[ray]'")
    out, fresh = tmp_path / "out", tmp_path / "fresh"
    _explain(models["a.keras"], images, out)
    _explain(models["b.keras"], images, fresh)
    result = _explain(models["b.keras"], images, out, "--skip-existing", "--engine", "ray",
                      "--workers", "1")
    assert f"{COUNT} recomputed (made by another model)" in _summary(result)
    _assert_same_as_fresh(out, fresh)


# -- the pure parts ---------------------------------------------------------------------------


@pytest.mark.parametrize("module", ["guidedbp.io.made_by", "guidedbp.models.digest"])
def test_docstring_examples_run(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0, result


def test_an_option_digest_reads_numbers_and_arrays_by_value():
    from guidedbp.pipeline.fingerprint import digest

    assert digest({"noise": 3.0, "size": (8, 8)}) == digest({"noise": 3, "size": [8, 8]})
    assert digest({"noise": 3.0}) != digest({"noise": 3.5})
    baseline = np.zeros((2, 2, 3), np.float32)
    changed = baseline.copy()
    changed[1, 1, 2] = 1e-6
    assert digest({"baseline": baseline}) == digest({"baseline": baseline.copy()})
    assert digest({"baseline": baseline}) != digest({"baseline": changed})
    assert digest({"baseline": baseline}) != digest({"baseline": baseline.astype(np.float64)})
