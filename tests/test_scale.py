"""Scaling out ``guidedbp explain``: ``--shard K/N``, ``merge-manifests`` and ``--engine ray``.

The shard split is checked as a pure function (hypothesis), then through the
command on the generated tree of good and bad images: all shards, merged, give the
files and records of one unsharded run. The Ray engine runs on one local Ray
instance per module (started and stopped here) and must write the very bytes the
local engine writes. Only the Ray tests are skipped, and only when Ray is not
installed (the ray extra: ``pip install '.[ray]'``).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guidedbp.io.inputs import InputItem, collect_inputs
from guidedbp.io.manifest import read_manifest
from guidedbp.io.report import REPORT, report_html
from guidedbp.io.shard import (
    ShardError,
    manifest_name,
    merge_manifests,
    parse_shard,
    select_shard,
    shard_of,
)

from .helpers import run_cli
from .imagetree import make_tree, snapshot
from .models import colour_cnn

# Ray Data's own deprecation notices about its defaults, not about guidedbp's calls.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.*")

# One run's options, shared by every engine and shard below: every render, raw maps.
OPTIONS = ("--raw", "--render", "color,gray,heatmap,overlay,panel", "--batch-size", "4", "-q")


def digests(out: Path) -> dict[str, str]:
    """sha256 of every map (PNG, npy) under ``out``: not the manifests, not the page (which
    lists the records in the manifest's order)."""
    return {name: facts[2] for name, facts in snapshot(out).items()
            if not name.endswith(".jsonl") and name != REPORT}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("scale")


@pytest.fixture(scope="module")
def tree(workspace):
    return make_tree(workspace / "tree")


@pytest.fixture(scope="module")
def model(workspace) -> str:
    path = workspace / "tiny.keras"
    colour_cnn((16, 16, 3)).save(path)
    return str(path)


@pytest.fixture(scope="module")
def local(workspace, tree, model):
    """The reference: one unsharded run of the local engine over the whole tree."""
    out = workspace / "local"
    result = run_cli("explain", model, tree.root, "-o", out, *OPTIONS)
    assert result.exit_code == 1, result.output  # the tree's bad files fail
    return SimpleNamespace(out=out, records=read_manifest(out / "manifest.jsonl"),
                           manifest=(out / "manifest.jsonl").read_bytes(), files=digests(out))


# -- the split, as a pure function ------------------------------------------------------------


stems = st.lists(st.text(st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=30),
                 unique=True, max_size=60)


@settings(max_examples=200, deadline=None)
@given(stems=stems, count=st.integers(1, 16))
def test_shards_cover_every_input_exactly_once(stems, count):
    items = [InputItem(path=f"in/{stem}", output_stem=stem) for stem in stems]
    shards = [select_shard(items, index, count) for index in range(count)]
    taken = [item for shard in shards for item in shard]
    assert sorted(taken, key=items.index) == items  # each once, none lost
    for shard in shards:
        assert shard == sorted(shard, key=items.index)  # input order kept


def test_shard_of_is_a_stable_hash_not_pythons():
    # Pinned values: a shard must not move between processes, machines or versions.
    assert [shard_of(stem, 7) for stem in ("a/cat", "b/cat", "top", "mixed/cat_jpg")] == \
        [0, 4, 4, 3]
    assert shard_of("a/cat", 1000) == int.from_bytes(
        hashlib.sha256(b"a/cat").digest()[:8], "big") % 1000
    assert shard_of("anything", 1) == 0


def test_shard_of_takes_names_that_are_not_utf8():
    # b"\xff.png" on Linux: Python reads it as "\udcff.png". Its shard comes from its real
    # bytes, the same in every process, instead of aborting the whole run.
    stem = "photos/\udcff.png"  # os.fsdecode(b"photos/\xff.png") on Linux
    expected = int.from_bytes(hashlib.sha256(b"photos/\xff.png").digest()[:8], "big") % 7
    assert shard_of(stem, 7) == shard_of(stem, 7) == expected
    item = InputItem(path=stem, output_stem=stem)
    assert [select_shard([item], index, 7) for index in range(7)].count([item]) == 1
    assert 0 <= shard_of("\ud800", 7) < 7  # even a lone surrogate no file system gives


@pytest.mark.parametrize("text, expected", [("0/1", (0, 1)), ("3/4", (3, 4)), (" 0/16 ", (0, 16))])
def test_parse_shard(text, expected):
    assert parse_shard(text) == expected


@pytest.mark.parametrize("text", ["4/4", "1/0", "0/0", "-1/4", "1", "a/b", "1/2/3", "", "1.0/2"])
def test_parse_shard_refuses(text):
    with pytest.raises(ShardError, match="K"):
        parse_shard(text)


@pytest.mark.parametrize("value", ["4/4", "x", "2/1"])
def test_shard_option_is_validated(tree, model, tmp_path, value):
    result = run_cli("explain", model, tree.root, "-o", tmp_path, "--shard", value)
    assert result.exit_code == 2
    assert "Invalid value for '--shard'" in result.output
    assert "K counts from 0" in result.output


# -- merging shard manifests ------------------------------------------------------------------


def write_shard(folder: Path, index: int, count: int, inputs: list[str]) -> None:
    lines = [json.dumps({"input": name, "status": "ok"}) + "\n" for name in inputs]
    (folder / manifest_name(index, count)).write_text("".join(lines))


def test_merge_keeps_shard_then_line_order(tmp_path):
    write_shard(tmp_path, 1, 3, ["c", "a"])
    write_shard(tmp_path, 0, 3, ["b"])
    write_shard(tmp_path, 2, 3, [])  # an empty shard is a shard
    result = run_cli("merge-manifests", tmp_path)
    assert result.exit_code == 0, result.output
    assert [r["input"] for r in read_manifest(tmp_path / "manifest.jsonl")] == ["b", "c", "a"]
    assert "3 records from 3 shards" in result.output


def test_merge_refuses_missing_shards(tmp_path):
    for index in (0, 1, 3):
        write_shard(tmp_path, index, 4, [str(index)])
    result = run_cli("merge-manifests", tmp_path)
    assert result.exit_code == 2
    assert "found shards 0,1,3 of 4: missing 2" in result.output
    assert not (tmp_path / "manifest.jsonl").exists()


def test_merge_refuses_an_input_in_two_shards(tmp_path):
    write_shard(tmp_path, 0, 2, ["a", "b"])
    write_shard(tmp_path, 1, 2, ["b"])
    with pytest.raises(ShardError, match="'b' appears in shards 0 and 1"):
        merge_manifests(tmp_path)
    assert not (tmp_path / "manifest.jsonl").exists()


def test_merge_refuses_mixed_runs_and_empty_folders(tmp_path):
    with pytest.raises(ShardError, match="no manifest-K-of-N.jsonl"):
        merge_manifests(tmp_path)
    write_shard(tmp_path, 0, 1, ["a"])
    write_shard(tmp_path, 0, 2, ["a"])
    write_shard(tmp_path, 1, 2, ["b"])
    with pytest.raises(ShardError, match="of-1, of-2"):
        merge_manifests(tmp_path)


# -- sharded runs through the command --------------------------------------------------------


def run_shards(model, tree, out: Path, count: int, *extra: str) -> None:
    for index in range(count):
        result = run_cli("explain", model, tree.root, "-o", out, *OPTIONS, "--shard",
                         f"{index}/{count}", *extra)
        assert result.exit_code in (0, 1), result.output
    merged = run_cli("merge-manifests", out)
    assert merged.exit_code == 0, merged.output


@pytest.mark.parametrize("count", [1, 3])
def test_all_shards_merged_equal_one_unsharded_run(local, model, tree, tmp_path, count):
    run_shards(model, tree, tmp_path, count)
    records = read_manifest(tmp_path / "manifest.jsonl")
    inputs = [r["input"] for r in records]
    assert len(inputs) == len(set(inputs)) == len(local.records)  # each input exactly once
    assert sorted(records, key=lambda r: r["input"]) == \
        sorted(local.records, key=lambda r: r["input"])
    assert digests(tmp_path) == local.files  # the same files, byte for byte
    # merge-manifests wrote the page of the merged manifest.
    assert (tmp_path / REPORT).read_text(encoding="utf-8") == report_html(records)
    stems = {item.path: item.output_stem for item in collect_inputs([str(tree.root)]).items}
    for index in range(count):  # each shard's manifest lists its own inputs only
        shard = read_manifest(tmp_path / manifest_name(index, count))
        assert all(shard_of(stems[r["input"]], count) == index for r in shard)


def test_a_shard_writes_only_its_own_inputs(local, model, tree, tmp_path):
    stems = {r["input"]: r for r in local.records}
    result = run_cli("explain", model, tree.root, "-o", tmp_path, *OPTIONS, "--shard", "1/2")
    assert result.exit_code in (0, 1), result.output
    shard = read_manifest(tmp_path / "manifest-1-of-2.jsonl")
    assert not (tmp_path / "manifest.jsonl").exists()
    assert shard == [stems[r["input"]] for r in shard]  # the unsharded records, in order
    written = set(digests(tmp_path))
    listed = {p for r in shard for p in [*r["outputs"].values(), r["raw"]] if p}
    assert written == listed


# -- the Ray engine ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_cluster():
    """One local Ray instance for the module, shut down after it."""
    ray = pytest.importorskip("ray", reason="Ray is not installed: pip install '.[ray]'")
    pytest.importorskip("ray.data", reason="Ray Data is not installed: pip install '.[ray]'")
    ray.init(address="local", num_cpus=2, include_dashboard=False, ignore_reinit_error=True,
             log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.mark.heavy  # a local Ray instance: make test-all
def test_ray_engine_writes_the_local_engines_bytes(ray_cluster, local, model, tree, tmp_path):
    result = run_cli("explain", model, tree.root, "-o", tmp_path, *OPTIONS, "--engine", "ray",
                     "--workers", "2")
    assert result.exit_code == 1, result.output  # bad inputs fail as locally; the run goes on
    assert digests(tmp_path) == local.files
    assert read_manifest(tmp_path / "manifest.jsonl") == local.records  # input order too
    assert (tmp_path / "manifest.jsonl").read_bytes() == local.manifest
    assert not [p for p in snapshot(tmp_path) if p.endswith(".tmp")]


@pytest.mark.heavy  # a local Ray instance: make test-all
def test_ray_engine_with_shards(ray_cluster, local, model, tree, tmp_path):
    run_shards(model, tree, tmp_path, 2, "--engine", "ray", "--workers", "1")
    records = read_manifest(tmp_path / "manifest.jsonl")
    assert sorted(records, key=lambda r: r["input"]) == \
        sorted(local.records, key=lambda r: r["input"])
    assert digests(tmp_path) == local.files


@pytest.mark.heavy  # a local Ray instance: make test-all
def test_ray_engine_summary_matches_the_local_one(ray_cluster, model, tree, tmp_path):
    args = ("explain", model, tree.path("a/cat.jpg"), tree.path("bad/empty.jpg"))
    local_run = run_cli(*args, "-o", tmp_path / "l")
    ray_run = run_cli(*args, "-o", tmp_path / "r", "--engine", "ray", "--workers", "1")
    assert (local_run.exit_code, ray_run.exit_code) == (1, 1)
    assert ray_run.stderr.splitlines()[0].startswith("1 explained, 1 failed in ")
    assert ray_run.stderr.splitlines()[1:] == local_run.stderr.splitlines()[1:]


def test_ray_engine_refuses_fail_fast(model, tree, tmp_path):
    result = run_cli("explain", model, tree.root, "-o", tmp_path, "--engine", "ray", "--fail-fast")
    assert result.exit_code == 2
    assert "--fail-fast works with --engine local only" in result.output


def test_ray_engine_without_ray_says_how_to_install(model, tree, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    result = run_cli("explain", model, tree.root, "-o", tmp_path, "--engine", "ray")
    assert result.exit_code == 2
    assert result.stderr.strip() == \
        "Error: --engine ray needs Ray Data: pip install 'guidedbp[ray]'"
    assert not any(tmp_path.iterdir())
