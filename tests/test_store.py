"""Inputs and outputs on object storage: ``guidedbp explain`` from a bucket into a bucket.

Every run here goes through moto's real S3 server on 127.0.0.1 (``s3_server`` in
conftest.py) with s3fs, as a user's run goes through AWS or MinIO, and is checked byte
for byte against a local run of the same files: the same output names and PNG bytes, the
same manifest records but for the ``input`` field (the URL instead of the path), the
same counts of files passed over and hidden. One tiny model (16x16x3 -> conv -> dense(3))
serves the module.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from guidedbp.io import store
from guidedbp.io.inputs import InputItem, collect_inputs

from . import s3server
from .helpers import run_cli, subprocess_environment
from .imagetree import make_tree
from .models import colour_cnn

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("store")


@pytest.fixture(scope="module")
def model(workspace) -> str:
    path = workspace / "tiny.keras"
    colour_cnn((16, 16, 3)).save(path)
    return str(path)


@pytest.fixture(scope="module")
def tree(workspace):
    """The red-team tree of good and bad images (tests/imagetree.py), with a hidden
    image and a hidden folder added, as ``photos/``."""
    tree = make_tree(workspace / "photos")
    (tree.root / ".hidden.png").write_bytes((tree.root / "top.png").read_bytes())
    (tree.root / ".cache").mkdir()
    (tree.root / ".cache" / "x.png").write_bytes((tree.root / "top.png").read_bytes())
    return tree


def local_run(model, workspace, name, *args) -> tuple[Path, list[dict], str]:
    out = workspace / name
    result = run_cli("explain", model, *args, "-o", out, "--render", "color,overlay", "--raw")
    return out, [json.loads(line) for line in (out / "manifest.jsonl").read_text()
                 .splitlines()], result.stderr


def store_records(url: str) -> list[dict]:
    return [json.loads(line) for line in
            store.read_bytes(store.join(url, "manifest.jsonl")).decode().splitlines()]


def same_records(remote: list[dict], local: list[dict], url_root: str, local_root) -> None:
    """The records agree field for field, the input a URL where the local one is a path,
    and its fingerprint an object's (size and ETag) where the local one is a file's."""
    assert len(remote) == len(local)
    for a, b in zip(remote, local):
        assert a["input"] == store.join(url_root, os.path.relpath(b["input"], local_root))
        if b["input_file"] is not None:  # an ok record's
            assert a["input_file"]["size"] == b["input_file"]["size"]
            assert set(a["input_file"]) == {"size", "etag"} and a["input_file"]["etag"]
        assert {**a, "input": None, "input_file": None} == \
            {**b, "input": None, "input_file": None}


def test_bucket_to_bucket_is_the_local_run_byte_for_byte(model, workspace, tree, bucket):
    """A folder tree uploaded as a prefix, explained into another prefix: the same objects
    as the local run's files (maps, raw .npy), the same records, the same summary counts
    and exit code (the tree's broken images fail alone: exit 1)."""
    s3server.upload(str(tree.root), f"{bucket}/photos")
    local, local_records, local_err = local_run(model, workspace, "local-tree", tree.root)
    result = run_cli("explain", model, f"{bucket}/photos/", "-o", f"{bucket}/maps",
                     "--render", "color,overlay", "--raw", code=1)
    remote = s3server.objects(f"{bucket}/maps")
    wanted = {key: data for key, data in s3server.files(str(local)).items()
              if key not in ("manifest.jsonl", "index.html")}
    assert {key: data for key, data in remote.items()
            if key not in ("manifest.jsonl", "index.html")} == wanted
    assert any(key.endswith(".npy") for key in wanted) and len(wanted) > 30
    same_records(store_records(f"{bucket}/maps"), local_records, f"{bucket}/photos",
                 tree.root)
    assert "index.html" in remote and b'content="guidedbp"' in remote["index.html"]
    # Nothing but outputs is left: no manifest parts, no lock object.
    assert not [key for key in remote if key.startswith(".")]
    # The same counts: 2 files passed over; a hidden image and a hidden folder.
    summary = [line for line in result.stderr.splitlines() if "explained" in line]
    local_summary = [line for line in local_err.splitlines() if "explained" in line]
    strip = lambda line: line.split(" in ")[0]  # noqa: E731 - the timing differs
    assert [strip(line) for line in summary] == [strip(line) for line in local_summary]
    assert "2 hidden" in result.stderr and "2 other files passed over" in result.stderr


def test_a_glob_and_a_single_object(model, workspace, tree, bucket):
    """A glob maps its matches under its fixed part's name, one object under its own
    name, as local globs and files do."""
    s3server.upload(str(tree.root), f"{bucket}/photos")
    local, local_records, _ = local_run(model, workspace, "local-glob",
                                        str(tree.root / "mixed" / "*.png"), tree.path("top.png"))
    run_cli("explain", model, f"{bucket}/photos/mixed/*.png", f"{bucket}/photos/top.png",
            "-o", f"{bucket}/maps", "--render", "color,overlay", "--raw", code=0)
    remote = s3server.objects(f"{bucket}/maps")
    wanted = {key: data for key, data in s3server.files(str(local)).items()
              if key not in ("manifest.jsonl", "index.html")}
    assert sorted(key.split("/")[0] for key in wanted) == sorted(
        key.split("/")[0] for key in remote if key not in ("manifest.jsonl", "index.html"))
    assert {key: remote[key] for key in wanted} == wanted
    inputs = [record["input"] for record in store_records(f"{bucket}/maps")]
    assert inputs == [f"{bucket}/photos/mixed/cat.png", f"{bucket}/photos/mixed/rgba.png",
                      f"{bucket}/photos/mixed/sixteen.png", f"{bucket}/photos/top.png"]
    assert [os.path.relpath(record["input"], tree.root) for record in local_records] == \
        [input.split("/photos/")[1] for input in inputs]


def test_an_output_prefix_inside_the_input_prefix_is_not_read_back(model, tree, bucket):
    """OUT below the input prefix: a second run finds the same inputs, not the maps."""
    s3server.upload(str(tree.root / "mixed"), f"{bucket}/data")
    for _ in range(2):
        result = run_cli("explain", model, f"{bucket}/data", "-o", f"{bucket}/data/maps",
                         "--render", "color", code=0)
        assert result.stderr.count("7 explained") == 1, result.stderr
    assert len(store_records(f"{bucket}/data/maps")) == 7


def test_the_python_api_takes_urls(model, tree, bucket, workspace):
    from guidedbp import explain_files

    s3server.upload(str(tree.root / "b"), f"{bucket}/b")
    summary = explain_files(model, [f"{bucket}/b"], f"{bucket}/out", renders=("color",))
    assert (summary.done, summary.exit_code, summary.passed_over) == (2, 0, 1)
    assert sorted(s3server.objects(f"{bucket}/out")) == [
        "b/cat.jpg.guided.color.png", "b/deep/er/gray.png.guided.color.png", "index.html",
        "manifest.jsonl"]


def test_each_input_costs_one_get_and_each_output_one_put(model, bucket, workspace):
    """On S3, which honours conditional writes, an input is one GET and an output one
    conditional PUT: no HEAD and no listing per image (each would be a round trip, and
    s3fs asks whether a missing key is a folder with a listing). Counted from botocore's
    calls, as the differences between runs of 2 and 6 images (batch 2: a manifest part
    per batch, read back and removed when the manifest is compacted)."""
    import collections

    from PIL import Image

    from guidedbp import explain_files

    from .helpers import tinted_noise

    for n in (2, 6):
        folder = workspace / "counted" / f"n{n}"
        folder.mkdir(parents=True)
        for index in range(n):
            Image.fromarray(tinted_noise(16, 16, seed=index)).save(folder / f"{index}.png")
        s3server.upload(str(folder), f"{bucket}/in{n}")
    calls: collections.Counter = collections.Counter()
    store.filesystem(bucket).s3.meta.events.register(
        "before-call.s3", lambda model, **_: calls.update([model.name]))
    made = {}
    for n in (2, 6):
        calls.clear()
        summary = explain_files(model, f"{bucket}/in{n}/", f"{bucket}/out{n}",
                                renders=("color", "overlay"), batch_size=2)
        assert summary.done == n
        made[n] = dict(calls)
    more = {op: made[6].get(op, 0) - made[2].get(op, 0) for op in {*made[2], *made[6]}}
    assert {op: count for op, count in more.items() if count} == {
        "GetObject": 4 + 2, "PutObject": 4 * 2 + 2, "DeleteObject": 2}, made


def test_listing_walks_prefixes_in_the_local_order(bucket, tmp_path):
    """Files of a prefix before its sub-prefixes, each sorted: the order (and so the
    batches) of the local walk of the same tree."""
    names = ["b.png", "a/z.png", "a/b/c.png", "a.png", "a0/x.png", "Z.png"]
    for name in names:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    s3server.upload(str(tmp_path), f"{bucket}/t")
    local = [os.path.relpath(item.path, tmp_path) for item in
             collect_inputs([str(tmp_path)]).items]
    remote = [item.path.split("/t/", 1)[1] for item in
              collect_inputs([f"{bucket}/t"]).items]
    assert remote == local == ["Z.png", "a.png", "b.png", "a/z.png", "a/b/c.png", "a0/x.png"]
    stems = [item.output_stem for item in collect_inputs([f"{bucket}/t/"]).items]
    assert stems == ["t/" + name for name in local]  # under the prefix's own name


def test_region_masks_from_a_prefix(bucket, tmp_path):
    """--mask-dir as a URL: an input's mask is found at its path below its INPUT prefix,
    and its digest is the file's."""
    from guidedbp.pipeline.masks import find_mask
    from guidedbp.pipeline.target_plan import file_digest

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "cat.png").write_bytes(b"mask bytes")
    (tmp_path / "a" / "dog.png").write_bytes(b"other")
    s3server.upload(str(tmp_path), f"{bucket}/masks")
    item = InputItem(f"{bucket}/photos/a/cat.jpg", "photos/a/cat.jpg", f"{bucket}/photos")
    path, relative = find_mask(f"{bucket}/masks", item)
    assert (path, relative) == (f"{bucket}/masks/a/cat.png", "a/cat.png")
    assert file_digest(path) == file_digest(str(tmp_path / "a" / "cat.png"))


def test_check_saves_and_reads_a_baseline_on_the_store(model, tree, bucket):
    """check --save-baseline URL, then --baseline URL: the maps round-trip, so the
    baseline check passes; the saved .npy objects are the maps."""
    images = [tree.path("top.png"), tree.path("a/cat.jpg")]
    run_cli("check", model, *images, "--checks", "finite", "--save-baseline",
            f"{bucket}/baseline", code=0)
    saved = s3server.objects(f"{bucket}/baseline")
    assert "baseline.json" in saved and sum(key.endswith(".npy") for key in saved) == 2
    result = run_cli("check", model, *images, "--checks", "finite,baseline", "--baseline",
                     f"{bucket}/baseline", code=0)
    rows = [line.split() for line in result.stdout.splitlines()]
    assert ["baseline", "pass"] in [row[:2] for row in rows], result.stdout
    run_cli("check", model, *images, "--baseline", f"{bucket}/nothing-here", code=2)


def test_a_missing_library_names_its_extra(tmp_path):
    """Without s3fs, an s3:// URL is refused in one line that names the extra."""
    code = ("import sys; sys.modules['s3fs'] = None\n"
            "from guidedbp.cli import main\n"
            "main(['explain', 'demo', 's3://bucket/photos/', '-o', 'out'])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=subprocess_environment(), cwd=tmp_path, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines == ["Error: s3:// URLs need s3fs: pip install 'guidedbp[s3]'"], lines


@pytest.mark.parametrize("where", ["input", "output"])
def test_missing_credentials_are_one_line_exit_2(tmp_path, where):
    """No credentials anywhere (botocore's NoCredentialsError is no OSError): the URL
    and the library's words, exit 2, not an internal error."""
    url = "s3://bucket/photos/" if where == "input" else "s3://bucket/maps/"
    args = ["demo", url, "-o", "out"] if where == "input" else [
        "demo", str(REPO / "sample_images" / "shapes"), "-o", url]
    code = f"from guidedbp.cli import main\nmain(['explain', *{args!r}])\n"
    env = {key: value for key, value in subprocess_environment().items()
           if not key.startswith("AWS_")}
    env.update(AWS_EC2_METADATA_DISABLED="true", AWS_CONFIG_FILE=str(tmp_path / "none"),
               AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("Error")]
    doing = "list" if where == "input" else "reach"
    assert lines == [f"Error: cannot {doing} '{url}': Unable to locate credentials"], \
        done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "out").exists()


def test_store_put_is_whole_and_conditional(bucket):
    url = f"{bucket}/k/x.bin"
    store.put(url, b"first", create=True)
    with pytest.raises(FileExistsError):
        store.put(url, b"second", create=True)
    assert store.read_bytes(url) == b"first" and store.honours_create(url)
    assert store.read_range(url, 1, 3) == b"ir" and store.read_range(f"{bucket}/no", 0, 3) is None
    assert store.head_and_tail(url, 2, 3) == (b"fi", b"rst", 5)
    data = np.arange(10, dtype=np.uint8).tobytes()
    store.put(url, data)
    assert store.read_bytes(url) == data and store.size_of(url) == 10
    # One ranged GET: up to the limit it reads whole; over it, refused; S3 refuses any
    # range of an empty object, which is read as empty.
    assert store.read_bytes(url, limit=10) == data
    with pytest.raises(OSError, match="10 bytes, over the 9 "):
        store.read_bytes(url, limit=9)
    store.put(url, b"")
    assert store.read_bytes(url) == b"" == store.read_bytes(url, limit=4)
    with pytest.raises(FileNotFoundError):
        store.read_bytes(f"{bucket}/k/none.bin", limit=4)


def test_evaluate_reads_images_and_masks_from_the_store(bucket):
    """evaluate IMAGES --masks with both as URLs: the same table as from the folders."""
    s3server.upload(str(REPO / "sample_images" / "shapes"), f"{bucket}/shapes")
    s3server.upload(str(REPO / "sample_images" / "masks" / "shapes"), f"{bucket}/masks")
    common = ("--method", "guided", "--metric", "pointing,energy")
    local = run_cli("evaluate", "demo", REPO / "sample_images" / "shapes", "--masks",
                    REPO / "sample_images" / "masks" / "shapes", *common, code=0)
    remote = run_cli("evaluate", "demo", f"{bucket}/shapes", "--masks", f"{bucket}/masks",
                     *common, code=0)
    table = [line for line in local.stdout.splitlines() if line.startswith("overall")]
    assert len(table) == 2 and table == [line for line in remote.stdout.splitlines()
                                         if line.startswith("overall")]
    where = lambda text: [line for line in text.splitlines()  # noqa: E731
                          if not line.startswith("model demo on")]
    assert where(remote.stdout) == where(local.stdout)
