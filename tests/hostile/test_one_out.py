"""One OUT, one run's files (issue 39): what a resumed run trusts is what is on disk.

A shard run and a plain run never share an OUT (nor shards of two N), an input replaced at
its path is recomputed, a huge first record is still guidedbp's manifest, and a run that
renders otherwise leaves no file of the old render unlisted. Each case runs the real
command in-process (click's runner) on a tiny model saved once per module.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from PIL import Image

from guidedbp.io.manifest import FIRST_LINE_LIMIT, is_manifest, read_manifest

from ..helpers import assert_one_line_error, run_cli, tinted_noise
from ..imagetree import make_flat
from ..models import tiny_cnn

COUNT = 4


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, str]:
    """``a.keras`` and ``b.keras``: one architecture, other weights."""
    folder = tmp_path_factory.mktemp("models")
    paths = {}
    for seed, name in ((1, "a"), (2, "b")):
        paths[name] = str(folder / f"{name}.keras")
        tiny_cnn(seed).save(paths[name])
    return paths


@pytest.fixture
def here(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    make_flat(tmp_path / "images", COUNT, size=(16, 16))
    return tmp_path


def explain(model, out, *flags, code=0, inputs="images"):
    return run_cli("explain", model, inputs, "-o", out, "--no-report", *flags, code=code)


def summary(result) -> str:
    return next(line for line in result.stderr.splitlines() if " explained" in line)


def records(out, name="manifest.jsonl") -> list[dict]:
    return read_manifest(Path(out) / name)


# -- 13. an input replaced at its path ----------------------------------------------------------


def test_an_input_replaced_at_its_path_is_recomputed(models, here):
    explain(models["a"], "out")
    first = {Path(r["input"]).name: r for r in records("out")}
    assert all(set(r["input_file"]) == {"size", "mtime_ns"} for r in first.values())
    target = here / "images" / "img0001.png"
    target.write_bytes((here / "images" / "img0002.png").read_bytes())  # another picture
    result = explain(models["a"], "out", "--skip-existing")
    assert summary(result).startswith(
        f"1 explained, {COUNT - 1} skipped (outputs exist), 1 recomputed (input changed "
        "since) in ")
    now = {Path(r["input"]).name: r for r in records("out")}
    assert now["img0001.png"]["input_file"]["size"] == target.stat().st_size
    assert now["img0001.png"]["score"] == now["img0002.png"]["score"]  # the new picture's
    assert now["img0001.png"]["score"] != first["img0001.png"]["score"]
    # Unchanged since: all carried over.
    assert summary(explain(models["a"], "out", "--skip-existing")).startswith(
        f"0 explained, {COUNT} skipped (outputs exist) in ")


def test_an_input_of_the_same_size_and_whole_second_time_is_told_by_its_content(
        models, here):
    """``tar``, ``zip`` and ``cp -p`` give files whole-second times: two versions of one
    size may share one. Such a file is fingerprinted by its content too."""
    folder = here / "bitmaps"
    folder.mkdir()
    for seed in (0, 1):  # BMPs of one size: the same number of bytes whatever the pixels
        Image.fromarray(tinted_noise(16, 16, seed=seed)).save(folder / f"{seed}.bmp")
    old, new = folder / "0.bmp", folder / "1.bmp"
    assert old.stat().st_size == new.stat().st_size
    moment = 1_600_000_000 * 10**9
    os.utime(old, ns=(moment, moment))
    explain(models["a"], "out", inputs=old)
    (recorded,) = records("out")
    assert set(recorded["input_file"]) == {"size", "mtime_ns", "sha256"}
    assert summary(explain(models["a"], "out", "--skip-existing", inputs=old)).startswith(
        "0 explained, 1 skipped")
    old.write_bytes(new.read_bytes())
    os.utime(old, ns=(moment, moment))  # as an archive of the new version sets it
    result = explain(models["a"], "out", "--skip-existing", inputs=old)
    assert summary(result).startswith("1 explained, 1 recomputed (input changed since) in ")


def test_records_from_before_input_fingerprints_are_recomputed_once(models, here):
    explain(models["a"], "out")
    path = here / "out" / "manifest.jsonl"
    older = [{key: value for key, value in record.items() if key != "input_file"}
             for record in records("out")]
    path.write_text("".join(json.dumps(record) + "\n" for record in older))
    result = explain(models["a"], "out", "--skip-existing")
    assert f"{COUNT} recomputed (written before input fingerprints)" in summary(result)
    assert summary(explain(models["a"], "out", "--skip-existing")).startswith(
        f"0 explained, {COUNT} skipped")


def test_an_object_replaced_at_its_key_is_recomputed(models, here, bucket):
    """On a store, an input's size and ETag, as its listing gave them (no request of its
    own), tell a new upload at the same key."""
    from .. import s3server

    s3server.upload(str(here / "images"), f"{bucket}/images")
    out = f"{bucket}/maps"
    explain(models["a"], out, inputs=f"{bucket}/images/")
    first = records_at(out)
    assert all(set(r["input_file"]) == {"size", "etag"} for r in first)
    assert summary(explain(models["a"], out, "--skip-existing", inputs=f"{bucket}/images/")
                   ).startswith(f"0 explained, {COUNT} skipped (outputs exist) in ")
    from guidedbp.io import store

    store.put(f"{bucket}/images/img0001.png", (here / "images" / "img0002.png").read_bytes())
    result = explain(models["a"], out, "--skip-existing", inputs=f"{bucket}/images/")
    assert summary(result).startswith(
        f"1 explained, {COUNT - 1} skipped (outputs exist), 1 recomputed (input changed "
        "since) in ")
    # An object named alone is fingerprinted by a HEAD, the same way.
    single = f"{bucket}/images/img0003.png"
    explain(models["a"], f"{bucket}/one", inputs=single)
    assert records_at(f"{bucket}/one")[0]["input_file"] == first[3]["input_file"]


def records_at(url: str) -> list[dict]:
    return read_manifest(f"{url}/manifest.jsonl")


# -- 17. a first record over 1 MiB -----------------------------------------------------------


def test_a_first_record_over_a_mebibyte_is_still_our_manifest(models, here):
    labels = here / "labels.txt"
    labels.write_text("".join(f"class{index}" + "x" * 400_000 + "\n" for index in range(3)))
    flags = ("--labels", labels, "--top-k", "3")
    explain(models["a"], "out", *flags)
    manifest = here / "out" / "manifest.jsonl"
    assert len(manifest.read_bytes().split(b"\n")[0]) > FIRST_LINE_LIMIT
    assert is_manifest(manifest)
    result = explain(models["a"], "out", *flags, "--skip-existing")
    assert summary(result).startswith(f"0 explained, {COUNT} skipped (outputs exist) in ")
    # A file of the user's by that name is still refused, however long its first line.
    manifest.write_bytes(b'{"notes": "' + b"y" * (2 * FIRST_LINE_LIMIT) + b'"}\n')
    assert not is_manifest(manifest)
    assert_one_line_error(explain(models["a"], "out", code=None),
                          "exists and is not a guidedbp manifest")


def test_a_first_record_over_a_mebibyte_on_a_store(bucket):
    from guidedbp.io import store

    record = {"input": "s3://x/a.png", "status": "ok", "label": "x" * (2 * FIRST_LINE_LIMIT),
              "targets": []}
    store.put(store.join(bucket, "manifest.jsonl"), (json.dumps(record) + "\n").encode())
    assert is_manifest(store.join(bucket, "manifest.jsonl"))
    store.put(store.join(bucket, "other.jsonl"),
              b'{"notes": "' + b"y" * (2 * FIRST_LINE_LIMIT) + b'"}\n')
    assert not is_manifest(store.join(bucket, "other.jsonl"))


# -- 12. one OUT, one family of runs -------------------------------------------------------------


def maps(out) -> dict[str, bytes]:
    return {str(path.relative_to(out)): path.read_bytes()
            for path in sorted(Path(out).rglob("*")) if path.suffix in (".png", ".npy")}


def test_a_shard_run_into_a_plain_runs_out_is_refused_before_writing(models, here):
    """The issue's case: a shard run with another model rewrote every map while
    manifest.jsonl still named the first model, and resuming then trusted them."""
    explain(models["a"], "out")
    before = maps("out")
    result = explain(models["b"], "out", "--shard", "0/1", code=None)
    assert_one_line_error(result, "'out' holds the manifest of a run that is not sharded")
    assert maps("out") == before and not (here / "out" / "manifest-0-of-1.jsonl").exists()
    assert summary(explain(models["a"], "out", "--skip-existing")).startswith(
        f"0 explained, {COUNT} skipped (outputs exist) in ")


def test_a_plain_run_into_shards_needs_their_merge_then_takes_the_out_over(models, here):
    for shard in ("0/2", "1/2"):
        explain(models["a"], "out", "--shard", shard)
    before = maps("out")
    assert_one_line_error(explain(models["a"], "out", code=None),
                          "holds the manifests of a run in 2 shards",
                          "no manifest.jsonl that merges them", "merge-manifests")
    assert_one_line_error(explain(models["a"], "out", "--shard", "0/3", code=None),
                          "holds the manifests of a run in 2 shards", "not 3")
    assert maps("out") == before
    run_cli("merge-manifests", "out", code=0)
    merged = records("out")
    result = explain(models["a"], "out", "--skip-existing")
    assert summary(result).startswith(f"0 explained, {COUNT} skipped (outputs exist) in ")
    assert sorted(records("out"), key=lambda r: r["input"]) == \
        sorted(merged, key=lambda r: r["input"])  # in input order, not the shards'
    # Taken over: the shard manifests, whose records manifest.jsonl holds, are gone, so no
    # manifest names maps that a later run rewrites.
    assert sorted(path.name for path in (here / "out").glob("manifest*")) == ["manifest.jsonl"]
    assert_one_line_error(explain(models["a"], "out", "--shard", "0/2", code=None),
                          "holds the manifest of a run that is not sharded")


def test_a_merge_its_shards_changed_since_is_not_trusted(models, here):
    for shard in ("0/2", "1/2"):
        explain(models["a"], "out", "--shard", shard)
    run_cli("merge-manifests", "out", code=0)
    # A shard of a merged OUT is resumed (here with another model): the merge is stale.
    explain(models["b"], "out", "--shard", "0/2", "--skip-existing")
    after = maps("out")
    assert_one_line_error(explain(models["b"], "out", "--skip-existing", code=None),
                          "holds the manifests of a run in 2 shards", "cannot be merged",
                          "made by another model")
    explain(models["b"], "out", "--shard", "1/2", "--skip-existing")
    assert_one_line_error(explain(models["b"], "out", "--skip-existing", code=None),
                          "manifest.jsonl does not merge as they are now")
    assert maps("out") != after  # shard 1 was recomputed by b
    run_cli("merge-manifests", "out", code=0)
    result = explain(models["b"], "out", "--skip-existing")
    assert summary(result).startswith(f"0 explained, {COUNT} skipped (outputs exist) in ")


def test_no_run_of_another_family_beside_a_live_one(models, here):
    from guidedbp.io.lock import OutputLock

    (here / "out").mkdir()
    with OutputLock(here / "out", "manifest.jsonl"):  # a run that is not sharded, live
        line = assert_one_line_error(explain(models["a"], "out", "--shard", "0/2", code=None),
                                     "is being written by another guidedbp run",
                                     "writing manifest.jsonl")
        assert f"pid {os.getpid()}" in line
    explain(models["a"], "merged", "--shard", "0/1")
    run_cli("merge-manifests", "merged", code=0)
    with OutputLock(here / "merged", "manifest.jsonl"):  # taking the merged OUT over
        assert_one_line_error(run_cli("merge-manifests", "merged"), "being written by another")
    with OutputLock(here / "out", "manifest-1-of-2.jsonl"):  # a shard, live
        assert_one_line_error(explain(models["a"], "out", code=None),
                              "writing manifest-1-of-2.jsonl")
        assert_one_line_error(explain(models["a"], "out", "--shard", "0/3", code=None),
                              "writing manifest-1-of-2.jsonl")
        explain(models["a"], "out", "--shard", "0/2")  # the same run's other shard: welcome
        assert_one_line_error(run_cli("merge-manifests", "out"),
                              "manifest-1-of-2.jsonl is being written by a guidedbp run")
    assert not list((here / "out").glob(".*.lock"))


def test_one_family_per_prefix_on_a_store(models, here, bucket):
    from guidedbp.io.lock import ObjectLock

    from .. import s3server

    s3server.upload(str(here / "images"), f"{bucket}/images")
    out = f"{bucket}/maps"
    explain(models["a"], out, inputs=f"{bucket}/images/")
    before = s3server.objects(out)
    assert_one_line_error(explain(models["b"], out, "--shard", "0/1", code=None,
                                  inputs=f"{bucket}/images/"),
                          "holds the manifest of a run that is not sharded")
    assert s3server.objects(out) == before
    with ObjectLock(f"{bucket}/other", "manifest-0-of-2.jsonl"):  # a live shard
        assert_one_line_error(explain(models["a"], f"{bucket}/other", code=None,
                                      inputs=f"{bucket}/images/"),
                              "writing manifest-0-of-2.jsonl")


# -- 24. a render-only change ------------------------------------------------------------------


def test_a_render_only_change_leaves_no_file_of_the_old_render(models, here):
    explain(models["a"], "out", "--render", "color,overlay", "--raw")
    assert len(maps("out")) == 3 * COUNT
    (here / "out" / "notes.txt").write_text("mine")
    result = explain(models["a"], "out", "--render", "overlay", "--skip-existing")
    assert f"{COUNT} recomputed (drawn with other render options)" in summary(result)
    listed = {path for record in records("out") for target in record["targets"]
              for path in target["outputs"].values()}
    assert set(maps("out")) == listed and len(listed) == COUNT  # the overlays alone
    assert (here / "out" / "notes.txt").read_text() == "mine"
    # Class names in the file names: the same, under the new names.
    labels = here / "labels.txt"
    labels.write_text("red\ngreen\nblue\n")
    explain(models["a"], "out", "--render", "overlay", "--top-k", "1", "--labels", labels)
    listed = {path for record in records("out") for target in record["targets"]
              for path in target["outputs"].values()}
    assert set(maps("out")) == listed and all(".guided." in p for p in listed)


def test_only_our_own_files_inside_out_are_ever_removed(models, here, tmp_path_factory):
    explain(models["a"], "out", "--render", "color")
    outside = tmp_path_factory.mktemp("outside")
    own = next(iter(sorted((here / "out" / "images").glob("*.png")))).read_bytes()
    for name in ("outside.png", "behind-link.png"):
        (outside / name).write_bytes(own)  # guidedbp's PNGs, outside OUT
    (here / "out" / "linked").symlink_to(outside, target_is_directory=True)
    (here / "out" / "images" / "user.png").write_bytes((here / "images" / "img0000.png")
                                                       .read_bytes())  # no mark: the user's
    manifest = here / "out" / "manifest.jsonl"
    hostile = records("out")
    hostile[0]["targets"][0]["outputs"].update({
        "a": f"../../{outside.name}/outside.png", "b": "linked/behind-link.png",
        "c": "images/user.png", "d": str(outside / "outside.png")})
    manifest.write_text("".join(json.dumps(record) + "\n" for record in hostile))
    explain(models["a"], "out", "--render", "overlay")
    assert (outside / "outside.png").read_bytes() == own == \
        (outside / "behind-link.png").read_bytes()
    assert (here / "out" / "images" / "user.png").exists()
    assert (here / "out" / "linked").is_symlink()
    assert not list((here / "out" / "images").glob("*.color.png"))  # ours: removed
