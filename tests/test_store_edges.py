"""Object-store URLs at the edges: every option that takes a URL takes one on the command
line, every object a listing finds is explained or counted, a missing bucket is named.

All through moto's real S3 server on 127.0.0.1 (``s3_server`` and ``bucket`` in
conftest.py), checked against the same run on local folders: the same outputs byte for
byte and the same manifest records. Objects whose keys have an empty segment
(``in//dbl.png``, ``in/b.png/``, ``/``) are made with boto3, which sends a key as it is.
Three tiny models serve the module: a segmentation model (16x16x3 -> 16x16x3 softmax)
for ``--target region:1 --mask-dir``, an embedding (16x16x3 -> 8) for ``similar:IMAGE``
and a classifier (tests/models.py ``colour_cnn``) for the listings.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import keras
import numpy as np
import pytest
from PIL import Image

from guidedbp.io import store
from guidedbp.io.inputs import collect_inputs
from guidedbp.io.manifest import read_manifest

from . import s3server
from .helpers import assert_one_line_error, run_cli, tinted_noise
from .models import colour_cnn

INPUTS = ["a.png", "sub/b.png"]
MISSING = "no-such-bucket-guidedbp-edges"


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Path:
    """photos/ (two 16x16 inputs, one in a subfolder), masks/ beside them (a region of
    60 px, different per image), a reference image, and the three models."""
    root = tmp_path_factory.mktemp("store-edges")
    keras.utils.set_random_seed(5)
    inputs = keras.Input((16, 16, 3))
    x = keras.layers.Rescaling(1 / 255)(inputs)
    features = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(x)
    keras.Model(inputs, keras.layers.Conv2D(3, 1, activation="softmax")(features)
                ).save(root / "seg.keras")
    pooled = keras.layers.GlobalAveragePooling2D()(features)
    keras.Model(inputs, keras.layers.Dense(8)(pooled)).save(root / "emb.keras")
    colour_cnn((16, 16, 3)).save(root / "tiny.keras")
    for index, name in enumerate(INPUTS):
        for folder in ("photos", "masks"):
            (root / folder / name).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(tinted_noise(16, 16, seed=index)).save(root / "photos" / name)
        mask = np.zeros((16, 16), np.uint8)
        mask[2 + index : 8 + index, 3:13] = 255
        Image.fromarray(mask).save(root / "masks" / name)
    Image.fromarray(tinted_noise(20, 24, seed=9)).save(root / "ref.png")
    return root


def _png(seed: int = 0) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(tinted_noise(16, 16, seed=seed)).save(buffer, format="PNG")
    return buffer.getvalue()


def _put_raw(url: str, key: str, data: bytes) -> None:
    """An object at ``key`` exactly as written (boto3 sends ``//`` and a final ``/``)."""
    import boto3

    boto3.client("s3").put_object(Bucket=url.split("://", 1)[1], Key=key, Body=data)


def _explain(*args, code: int = 0):
    return run_cli("explain", *map(str, args), "--no-report", code=code)


def _outputs(out) -> dict[str, bytes]:
    """Every output of a run (local folder or prefix) but its manifest."""
    found = s3server.objects(str(out)) if store.is_url(str(out)) else s3server.files(str(out))
    return {key: data for key, data in found.items() if key != "manifest.jsonl"}


def _records(out) -> list[dict]:
    return read_manifest(store.join(str(out), "manifest.jsonl") if store.is_url(str(out))
                         else str(Path(out) / "manifest.jsonl"))


def _summary(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if " explained" in line]
    assert len(lines) == 1, stderr
    return lines[0]


# -- every option that takes a URL takes one on the command line ----------------------------


def test_mask_dir_as_a_url_gives_the_maps_of_the_local_mask_folder(ws, bucket, tmp_path):
    """--mask-dir s3://... with images local and with images in a bucket: the outputs and
    records of the run with the local mask folder (the input aside, a URL for a path)."""
    s3server.upload(str(ws / "masks"), f"{bucket}/masks")
    s3server.upload(str(ws / "photos"), f"{bucket}/photos")
    flags = ["--target", "region:1", "--render", "color,overlay", "--raw", "-q"]
    local = tmp_path / "local"
    _explain(ws / "seg.keras", ws / "photos", "-o", local, "--mask-dir", ws / "masks", *flags)
    from_url = tmp_path / "from-url"
    _explain(ws / "seg.keras", ws / "photos", "-o", from_url, "--mask-dir", f"{bucket}/masks",
             *flags)
    assert _outputs(from_url) == _outputs(local)
    assert len(_outputs(local)) == 6
    assert _records(from_url) == _records(local)
    pixels = [record["targets"][0]["target"]["pixels"] for record in _records(local)]
    assert pixels == [60, 60]  # the masks' regions: these are region maps, not whole images
    masks = [record["targets"][0]["target"]["mask"] for record in _records(local)]
    assert masks == INPUTS
    # Images in a bucket too, maps into a prefix: the same objects.
    _explain(ws / "seg.keras", f"{bucket}/photos/", "-o", f"{bucket}/maps/", "--mask-dir",
             f"{bucket}/masks/", *flags)
    assert _outputs(f"{bucket}/maps") == _outputs(local)
    remote = _records(f"{bucket}/maps")
    assert [record["input"] for record in remote] == [f"{bucket}/photos/{name}"
                                                      for name in INPUTS]
    assert [{**r, "input": None, "input_file": None} for r in remote] == \
        [{**r, "input": None, "input_file": None} for r in _records(local)]


def test_a_missing_mask_on_the_store_fails_that_input_naming_where_it_looked(ws, bucket,
                                                                             tmp_path):
    s3server.upload(str(ws / "masks" / "sub"), f"{bucket}/masks/sub")  # no a.png mask
    out = tmp_path / "out"
    result = _explain(ws / "seg.keras", ws / "photos", "-o", out, "--target", "region:1",
                      "--mask-dir", f"{bucket}/masks", code=1)
    records = {Path(record["input"]).name: record for record in _records(out)}
    assert records["b.png"]["status"] == "ok"
    assert records["a.png"]["error"] == f"no mask for it (looked for {bucket}/masks/a.*)"
    assert f"failed: {ws / 'photos' / 'a.png'}: no mask for it" in result.stderr


def test_a_similarity_reference_may_be_a_url(ws, bucket, tmp_path):
    store.put(f"{bucket}/refs/ref.png", (ws / "ref.png").read_bytes())
    local, remote = tmp_path / "local", tmp_path / "remote"
    flags = ["--render", "color", "--raw", "-q"]
    _explain(ws / "emb.keras", ws / "photos", "-o", local, "--target",
             f"similar:{ws / 'ref.png'}", *flags)
    _explain(ws / "emb.keras", ws / "photos", "-o", remote, "--target",
             f"similar:{bucket}/refs/ref.png", *flags)
    assert _outputs(remote) == _outputs(local) and len(_outputs(local)) == 4
    for mine, theirs in zip(_records(remote), _records(local)):
        target, expected = mine["targets"][0], theirs["targets"][0]
        assert target["target"]["reference"] == f"{bucket}/refs/ref.png"
        assert target["target"]["reference_sha256"] == expected["target"]["reference_sha256"]
        assert target["value"] == expected["value"]


# -- keys with an empty segment: explained or counted, never dropped --------------------------


def test_every_listed_object_is_explained_or_counted_with_its_reason(ws, bucket, tmp_path):
    """Keys with an empty segment cannot be given an output path (OUT's paths have none):
    such an image, and an object whose key ends in '/' with something in it, is skipped
    with its reason, in the manifest and the summary; an empty object whose key ends in '/'
    is a folder marker (what a console's "create folder" writes), passed over as any other
    non-image object. Nothing is dropped unsaid."""
    image = _png(1)
    for key in ["in/a.png", "in//dbl.png", "in/x//y.png", "in/b.png/", "in//notes.txt"]:
        _put_raw(bucket, key, image if key != "in//notes.txt" else b"notes")
    for marker in ["in/", "in/sub/"]:
        _put_raw(bucket, marker, b"")
    out = tmp_path / "out"
    result = _explain(ws / "tiny.keras", f"{bucket}/in/", "-o", out, code=0)
    records = {record["input"]: record for record in _records(out)}
    assert records.pop(f"{bucket}/in/a.png")["status"] == "ok"
    skipped = [f"{bucket}/in//dbl.png", f"{bucket}/in/b.png/", f"{bucket}/in/x//y.png"]
    assert sorted(records) == skipped
    for url in skipped:
        assert records[url]["status"] == "skipped", records[url]
        assert "its key has an empty segment" in records[url]["error"]
        assert records[url]["outputs"] == {} and records[url]["targets"] == []
        assert f"  skipped: {url}: its key has an empty segment" in result.stderr
    summary = _summary(result.stderr)
    # The note and the two folder markers are the three objects that are no images.
    assert summary.startswith("1 explained, 3 objects skipped (see below), 3 other files "
                              "passed over in "), summary
    assert sorted(path.relative_to(out).as_posix() for path in out.rglob("*.png")) == [
        "in/a.png.guided.color.png", "in/a.png.guided.overlay.png"]


def test_a_key_that_is_only_a_slash_and_a_leading_slash_are_counted(ws, bucket, tmp_path):
    _put_raw(bucket, "/", b"something")
    _put_raw(bucket, "/lead.png", _png(2))
    _put_raw(bucket, "top.png", _png(3))
    out = tmp_path / "out"
    result = _explain(ws / "tiny.keras", bucket, "-o", out, code=0)
    statuses = {record["input"]: record["status"] for record in _records(out)}
    assert statuses == {f"{bucket}/top.png": "ok", f"{bucket}//": "skipped",
                        f"{bucket}//lead.png": "skipped"}
    assert _summary(result.stderr).startswith("1 explained, 2 objects skipped (see below) in ")


def test_the_listing_reports_what_it_did_not_take(bucket):
    """collect_inputs keeps the skipped objects apart from the images (check and evaluate
    take only ``items``), each with its reason, and counts the rest."""
    _put_raw(bucket, "p/ok.png", _png())
    _put_raw(bucket, "p//x.png", _png())
    _put_raw(bucket, "p//.hidden.png", _png())
    _put_raw(bucket, "p/", b"")
    collected = collect_inputs([f"{bucket}/p"])
    assert [item.path for item in collected.items] == [f"{bucket}/p/ok.png"]
    assert [item.path for item in collected.skipped] == [f"{bucket}/p//x.png"]
    assert collected.skipped[0].skipped.startswith("its key has an empty segment")
    assert (collected.passed_over, collected.hidden) == (1, 1)
    # Not recursive: the empty-named sub-prefix is a subfolder, not walked (nor counted).
    flat = collect_inputs([f"{bucket}/p"], recursive=False)
    assert [item.path for item in flat.items] == [f"{bucket}/p/ok.png"]
    assert (flat.skipped, flat.passed_over, flat.hidden) == ([], 1, 0)


def test_only_skipped_objects_is_no_images_exit_2(ws, bucket, tmp_path):
    _put_raw(bucket, "q//x.png", _png())
    result = run_cli("explain", ws / "tiny.keras", f"{bucket}/q", "-o", tmp_path / "out")
    assert_one_line_error(result, f"no images found in {bucket}/q", "1 object skipped",
                          f"{bucket}/q//x.png", "its key has an empty segment")
    assert not (tmp_path / "out").exists()


# -- a missing bucket is named ---------------------------------------------------------------


@pytest.mark.parametrize("where", ["prefix", "object", "glob"])
def test_a_missing_input_bucket_is_named(ws, s3_server, tmp_path, where):
    url = {"prefix": f"s3://{MISSING}/photos/", "object": f"s3://{MISSING}/photos/a.png",
           "glob": f"s3://{MISSING}/photos/*.png"}[where]
    result = run_cli("explain", ws / "tiny.keras", url, "-o", tmp_path / "out")
    line = assert_one_line_error(result)
    assert line == f"Error: input {url!r}: the bucket 's3://{MISSING}' does not exist"
    assert not (tmp_path / "out").exists()


def test_a_missing_mask_bucket_and_out_bucket_are_named(ws, s3_server, tmp_path):
    result = run_cli("explain", ws / "seg.keras", ws / "photos", "-o", tmp_path / "out",
                     "--target", "region:1", "--mask-dir", f"s3://{MISSING}/masks")
    assert_one_line_error(result, f"--mask-dir s3://{MISSING}/masks",
                          f"the bucket 's3://{MISSING}' does not exist")
    result = run_cli("explain", ws / "tiny.keras", ws / "photos", "-o", f"s3://{MISSING}/maps")
    line = assert_one_line_error(result)
    assert line == (f"Error: cannot write to 's3://{MISSING}/maps': the bucket "
                    f"'s3://{MISSING}' does not exist (guidedbp creates none)")


@pytest.mark.parametrize("command", ["merge-manifests", "report"])
def test_merge_and_report_on_a_missing_bucket_name_it(s3_server, command):
    result = run_cli(command, f"s3://{MISSING}/maps")
    line = assert_one_line_error(result)
    assert line == f"Error: s3://{MISSING}/maps: the bucket 's3://{MISSING}' does not exist"


# -- the summary names OUT with one slash ------------------------------------------------------


def test_the_summary_names_out_with_one_slash(ws, bucket, tmp_path):
    result = _explain(ws / "tiny.keras", ws / "photos" / "a.png", "-o", f"{bucket}/maps/")
    assert _summary(result.stderr).endswith(f"maps and manifest.jsonl in {bucket}/maps/")
    result = _explain(ws / "tiny.keras", ws / "photos" / "a.png", "-o", f"{tmp_path}/out/")
    assert _summary(result.stderr).endswith(f"maps and manifest.jsonl in {tmp_path}/out/")
    result = _explain(ws / "tiny.keras", ws / "photos" / "a.png", "-o", tmp_path / "plain")
    assert _summary(result.stderr).endswith(f"maps and manifest.jsonl in {tmp_path}/plain/")
    assert json.loads((tmp_path / "plain" / "manifest.jsonl").read_text())["status"] == "ok"
