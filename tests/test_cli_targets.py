"""``guidedbp explain --target/--model-output/--mask-dir``: what the model outputs, explained.

Four small models share the module, built here and saved once as .keras: a regressor
(``unit:``), a model with two heads (``--model-output`` by name and by index), a
segmentation model (``region:``, with and without ``--mask-dir``) and an embedding model
(``similar:IMAGE``). Each manifest value is checked against the engine's own score for the
same prepared input (:class:`guidedbp.Explainer`); each combination that cannot mean
anything against its one-line usage error; resume and shards against the targets they key on.
"""

from __future__ import annotations

import json
from pathlib import Path

import keras
import numpy as np
import pytest
from PIL import Image

import guidedbp
from guidedbp.io.images import decode_image
from guidedbp.io.manifest import read_manifest
from guidedbp.models.preprocess import prepare
from guidedbp.pipeline.target_plan import short_number
from guidedbp.pipeline.target_specs import TargetSpecError, parse_target
from guidedbp.render import PANEL_GAP, PANEL_MARGIN
from guidedbp.targets import Region, Similarity, Unit

from .helpers import assert_one_line_error, run_cli

LABELS = ["background", "circle", "square"]
INPUTS = ["a.png", "b.png", "sub/c.png"]


def _backbone(inputs):
    x = keras.layers.Rescaling(1 / 255)(inputs)
    x = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(x)
    return keras.layers.Conv2D(4, 3, padding="same", activation="relu")(x)


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Path:
    """The models, photos/ (three 16x16 inputs, one in a subfolder), masks/ beside them,
    a wide photo for --resize pad, a reference image and class names."""
    root = tmp_path_factory.mktemp("targets")
    keras.utils.set_random_seed(3)
    inputs = keras.Input((16, 16, 3))
    features = _backbone(inputs)
    pooled = keras.layers.GlobalAveragePooling2D()(features)
    keras.Model(inputs, keras.layers.Conv2D(3, 1, activation="softmax", name="seg")(features)
                ).save(root / "seg.keras")
    keras.Model(inputs, keras.layers.Dense(3, name="reg")(pooled)).save(root / "reg.keras")
    keras.Model(inputs, [keras.layers.Dense(4, activation="softmax", name="label")(pooled),
                         keras.layers.Dense(4, name="box")(pooled)]).save(root / "heads.keras")
    keras.Model(inputs, keras.layers.Dense(8, name="emb")(pooled)).save(root / "emb.keras")
    rng = np.random.default_rng(0)
    for name in INPUTS:
        for folder in ("photos", "masks"):
            (root / folder / name).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(
            root / "photos" / name)
        mask = np.zeros((16, 16), np.uint8)
        mask[4:10, 2:12] = 255
        Image.fromarray(mask).save(root / "masks" / name)
    (root / "wide").mkdir()
    Image.fromarray(rng.integers(0, 256, (8, 16, 3), dtype=np.uint8)).save(root / "wide/w.png")
    (root / "wide-masks").mkdir()
    half = np.zeros((8, 16), np.uint8)
    half[:, :8] = 1
    Image.fromarray(half).save(root / "wide-masks/w.bmp")  # any image format
    Image.fromarray(rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)).save(root / "ref.png")
    (root / "labels.txt").write_text("\n".join(LABELS) + "\n")
    return root


@pytest.fixture
def here(ws, monkeypatch) -> Path:
    """Run from the workspace: inputs, references and masks as a user types them."""
    monkeypatch.chdir(ws)
    return ws


def explain(*args, code: int = 0):
    return run_cli("explain", *args, "-q", "--no-report", code=code)


def records(out: Path, name: str = "manifest.jsonl") -> dict[str, dict]:
    return {record["input"]: record for record in read_manifest(out / name)}


def engine_value(model: str, image: str, target, output=None, resize: str = "stretch",
                 labels=None):
    """The engine's score and region size for ``image`` prepared as the command prepares it."""
    loaded = guidedbp.load_model(model, labels=labels)
    model_input = prepare(decode_image(image, channels=loaded.channels), loaded.input_shape,
                          loaded.preprocess, None, resize)[2]
    explanation = guidedbp.Explainer(loaded, "guided", output=output).explain(
        model_input[None], target)
    pixels = None if explanation.region_pixels is None else int(explanation.region_pixels[0])
    return float(explanation.logits[0]), pixels


# -- parsing, without a model ------------------------------------------------------------


@pytest.mark.parametrize(("text", "kind", "value", "spec"), [
    ("class:3", "class", 3, "class:3"),
    ("class:tabby cat", "class", "tabby cat", "class:tabby cat"),
    ("Unit: 2", "unit", 2, "unit:2"),
    ("unit:4, 7,1", "unit", (4, 7, 1), "unit:4,7,1"),
    ("region:circle", "region", "circle", "region:circle"),
    ("similar:refs/a b.jpg", "similar", "refs/a b.jpg", "similar:refs/a b.jpg"),
])
def test_a_spec_parses_into_a_target(text, kind, value, spec):
    parsed = parse_target(text)
    assert (parsed.kind, parsed.value, parsed.text) == (kind, value, spec)


@pytest.mark.parametrize(("text", "fragment"), [
    ("regoin:1", "unknown target kind 'regoin' in 'regoin:1' (did you mean 'region'?)"),
    ("3", "'3' is not KIND:VALUE (did you mean 'class:3'?)"),
    ("unit:", "'unit:' names no unit: expected unit:I"),
    ("unit:-1", "a unit is a non-negative index (unit:2)"),
])
def test_a_bad_spec_is_one_line_with_a_hint(text, fragment):
    with pytest.raises(TargetSpecError, match=None) as caught:
        parse_target(text)
    assert fragment in str(caught.value) and "\n" not in str(caught.value)


def test_the_examples_of_the_target_modules_hold():
    import doctest

    from guidedbp.cli import target_options
    from guidedbp.pipeline import masks, model_outputs, naming, target_plan, target_specs

    for module in (target_specs, model_outputs, target_plan, naming, masks, target_options):
        assert doctest.testmod(module).failed == 0, module.__name__


def test_a_bad_spec_is_a_usage_error_before_the_model_loads(ws, tmp_path):
    result = run_cli("explain", ws / "seg.keras", ws / "photos", "-o", tmp_path / "out",
                     "--target", "regoin:1")
    assert result.exit_code == 2 and "did you mean 'region'?" in result.stderr
    assert "Traceback" not in result.output and not (tmp_path / "out").exists()


# -- each kind of target, recorded ---------------------------------------------------------


def test_unit_targets_of_a_regressor(here, tmp_path):
    out = tmp_path / "out"
    explain("reg.keras", "photos", "-o", out, "--target", "unit:2", "--target", "unit:0")
    found = records(out)
    assert list(found) == [f"photos/{name}" for name in INPUTS]
    for name in INPUTS:
        first, second = found[f"photos/{name}"]["targets"]
        for entry, index in ((first, 2), (second, 0)):
            value, _ = engine_value("reg.keras", f"photos/{name}", Unit(index))
            assert entry["target"] == {"spec": f"unit:{index}", "kind": "unit", "output": None,
                                       "index": index, "name": None}
            assert entry["value"] == pytest.approx(value, abs=1e-5)
            assert entry["description"] == f"unit:{index} = {short_number(entry['value'])}"
            assert (entry["class"], entry["label"], entry["score"]) == \
                (index, None, entry["value"])
            assert entry["outputs"] == {
                render: f"photos/{name}.unit-{index}.guided.{render}.png"
                for render in ("color", "overlay")}
            for path in entry["outputs"].values():
                assert (out / path).is_file()


def test_a_unit_by_axes_names_its_flat_index(here, tmp_path):
    out = tmp_path / "out"
    explain("seg.keras", "photos/a.png", "-o", out, "--target", "unit:3,5,2")
    entry = records(out)["photos/a.png"]["targets"][0]
    value, _ = engine_value("seg.keras", "photos/a.png", Unit((3, 5, 2)))
    assert entry["target"]["index"] == (3 * 16 + 5) * 3 + 2 == entry["class"]
    assert entry["value"] == pytest.approx(value, abs=1e-5)
    assert entry["outputs"]["color"] == "a.png.unit-3-5-2.guided.color.png"


def test_a_head_chosen_by_name_or_index_reads_the_same_values(here, tmp_path):
    by_name, by_index = tmp_path / "name", tmp_path / "index"
    explain("heads.keras", "photos", "-o", by_name, "--model-output", "box", "--target", "unit:1")
    explain("heads.keras", "photos", "-o", by_index, "--model-output", "1", "--target", "unit:1")
    for name in INPUTS:
        first = records(by_name)[f"photos/{name}"]["targets"][0]
        second = records(by_index)[f"photos/{name}"]["targets"][0]
        value, _ = engine_value("heads.keras", f"photos/{name}", Unit(1), output="box")
        assert first["target"]["output"] == "box" and second["target"]["output"] == 1
        assert first["value"] == second["value"] == pytest.approx(value, abs=1e-5)


def test_a_head_alone_explains_its_top_class(here, tmp_path):
    out = tmp_path / "out"
    explain("heads.keras", "photos/a.png", "-o", out, "--model-output", "label")
    entry = records(out)["photos/a.png"]["targets"][0]
    loaded = guidedbp.load_model("heads.keras")
    model_input = prepare(decode_image("photos/a.png"), loaded.input_shape, loaded.preprocess,
                          None, "stretch")[2]
    explanation = guidedbp.Explainer(loaded, output="label").explain(model_input[None])
    top = int(explanation.targets[0])
    assert entry["target"] == {"spec": f"class:{top}", "kind": "class", "output": "label",
                               "index": top, "name": None}
    assert entry["class"] == top
    assert entry["value"] == pytest.approx(float(explanation.logits[0]), abs=1e-5)
    assert entry["score"] == pytest.approx(float(explanation.probabilities[0]), abs=1e-5)
    assert entry["description"] == f"class:{top} p={entry['score']:.3f}"
    assert entry["outputs"]["color"] == "a.png.guided.color.png"  # the top class: not named


def test_regions_by_name_and_index_with_labels(here, tmp_path):
    out = tmp_path / "out"
    explain("seg.keras", "photos", "-o", out, "--labels", "labels.txt",
            "--target", "region:circle", "--target", "region:2")
    for name in INPUTS:
        circle, square = records(out)[f"photos/{name}"]["targets"]
        for entry, index in ((circle, 1), (square, 2)):
            value, pixels = engine_value("seg.keras", f"photos/{name}", Region(index))
            assert entry["target"] == {
                "spec": "region:circle" if index == 1 else "region:2", "kind": "region",
                "output": None, "index": index, "name": LABELS[index], "pixels": pixels,
                "image_pixels": pixels}  # the output is the input's 16x16: one px a cell
            assert (entry["class"], entry["label"]) == (index, LABELS[index])
            assert entry["value"] == pytest.approx(value, abs=1e-5) == entry["score"]
            assert entry["description"] == f"region:{LABELS[index]} ({pixels:,} px)"
            slug = f"region-{index}-{LABELS[index]}"
            assert entry["outputs"]["overlay"] == f"photos/{name}.{slug}.guided.overlay.png"


def test_region_masks_come_from_mask_dir(here, tmp_path):
    out = tmp_path / "out"
    explain("seg.keras", "photos", "-o", out, "--target", "region:1", "--mask-dir", "masks")
    mask = np.zeros((16, 16), bool)
    mask[4:10, 2:12] = True
    for name in INPUTS:
        entry = records(out)[f"photos/{name}"]["targets"][0]
        value, pixels = engine_value("seg.keras", f"photos/{name}", Region(1, mask=mask))
        assert pixels == 60 == entry["target"]["pixels"]
        assert entry["target"]["mask"] == name  # below the mask folder, as below INPUT
        assert len(entry["target"]["mask_sha256"]) == 16
        assert entry["value"] == pytest.approx(value, abs=1e-5)
        assert entry["description"] == "region:1 (60 px)"


def test_a_mask_is_fitted_as_its_image_is(here, tmp_path):
    """An 8x16 picture padded into the 16x16 input: its mask's left half lands on rows
    4..11 and columns 0..7 of the input."""
    out = tmp_path / "out"
    explain("seg.keras", "wide", "-o", out, "--target", "region:1", "--mask-dir",
            "wide-masks", "--resize", "pad")
    fitted = np.zeros((16, 16), bool)
    fitted[4:12, :8] = True
    value, pixels = engine_value("seg.keras", "wide/w.png", Region(1, mask=fitted),
                                 resize="pad")
    entry = records(out)["wide/w.png"]["targets"][0]
    assert (entry["target"]["mask"], entry["target"]["pixels"], pixels) == ("w.bmp", 64, 64)
    assert entry["value"] == pytest.approx(value, abs=1e-5)


def _tile_top(panel: np.ndarray, tile: np.ndarray, left: int) -> int:
    """The row where ``tile`` lies in ``panel`` at column ``left``."""
    height, width = tile.shape[:2]
    for top in range(panel.shape[0] - height + 1):
        if np.array_equal(panel[top:top + height, left:left + width], tile):
            return top
    raise AssertionError("the tile is not in the panel")


def _outlined(picture: np.ndarray, region: np.ndarray) -> np.ndarray:
    """``picture`` with white on the region's pixels that touch its outside (or the edge)
    and black on the outside pixels that touch it, pixel by pixel."""
    drawn = picture.copy()
    height, width = region.shape
    for y in range(height):
        for x in range(width):
            near = [region[a, b] if 0 <= a < height and 0 <= b < width else False
                    for a, b in ((y - 1, x), (y + 1, x), (y, x - 1), (y, x + 1))]
            if region[y, x] and not all(near):
                drawn[y, x] = 255
            elif not region[y, x] and any(near):
                drawn[y, x] = 0
    return drawn


def test_a_region_panel_outlines_its_mask_and_counts_image_pixels(here, tmp_path,
                                                                 monkeypatch):
    """A 32x32 photo whose mask is a 12x20 block, on the 16x16 model: the panel (at the
    photo's size) outlines the block on the photo, and its caption counts the block's
    240 pixels, where the output's resolution holds 60 cells of it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "big").mkdir()
    (tmp_path / "big-masks").mkdir()
    photo = np.random.default_rng(9).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    Image.fromarray(photo).save(tmp_path / "big/p.png")
    region = np.zeros((32, 32), bool)
    region[8:20, 4:24] = True
    Image.fromarray(region.astype(np.uint8) * 255).save(tmp_path / "big-masks/p.png")
    explain(here / "seg.keras", "big", "-o", "out", "--target", "region:1", "--mask-dir",
            "big-masks", "--render", "panel", "--tile", "64")
    entry = records(tmp_path / "out")["big/p.png"]["targets"][0]
    assert (entry["target"]["pixels"], entry["target"]["image_pixels"]) == (60, 12 * 20)
    assert entry["description"] == "region:1 (240 px)"
    panel = np.asarray(Image.open(tmp_path / "out" / entry["outputs"]["panel"]).convert("RGB"))
    twice = np.ones((2, 2), bool)  # the 32-px photo at the 64-px tile
    original = _outlined(np.kron(photo, twice[..., None]), np.kron(region, twice))
    _tile_top(panel, original, PANEL_MARGIN)


def test_a_similarity_panel_shows_its_reference(here, tmp_path):
    out = tmp_path / "out"
    explain("emb.keras", "photos/a.png", "-o", out, "--target", "similar:ref.png", "--render",
            "panel", "--tile", "64")
    entry = records(out)["photos/a.png"]["targets"][0]
    panel = np.asarray(Image.open(out / entry["outputs"]["panel"]).convert("RGB"))
    four = np.ones((4, 4, 1), np.uint8)  # 16 px to the 64-px tile
    photo = np.asarray(Image.open("photos/a.png").convert("RGB"))
    top = _tile_top(panel, np.kron(photo, four), PANEL_MARGIN)
    # the 24x20 reference as the model was given it (stretched to 16x16), after the photo
    reference = prepare(decode_image("ref.png"), (16, 16, 3), "none", None, "stretch")[0]
    left = PANEL_MARGIN + 64 + PANEL_GAP
    np.testing.assert_array_equal(panel[top:top + 64, left:left + 64], np.kron(reference, four))


def test_a_missing_mask_fails_that_input_only(here, tmp_path):
    masks = tmp_path / "masks"
    for name in ("a.png", "sub/c.png"):
        (masks / name).parent.mkdir(parents=True, exist_ok=True)
        (masks / name).write_bytes((here / "masks" / name).read_bytes())
    out = tmp_path / "out"
    result = explain("seg.keras", "photos", "-o", out, "--target", "region:1", "--mask-dir",
                     masks, code=1)
    found = records(out)
    assert [found[f"photos/{n}"]["status"] for n in INPUTS] == ["ok", "error", "ok"]
    assert found["photos/b.png"]["error"] == f"no mask for it (looked for {masks}/b.*)"
    assert "failed: photos/b.png: no mask for it" in result.stderr


def test_similarity_to_a_reference_image(here, tmp_path):
    out = tmp_path / "out"
    explain("emb.keras", "photos", "-o", out, "--target", "similar:ref.png", "--method",
            "guided,gradcam,occlusion,integrated-gradients", "--steps", "4", "--render", "panel")
    loaded = guidedbp.load_model("emb.keras")
    reference = prepare(decode_image("ref.png"), loaded.input_shape, loaded.preprocess, None,
                        "stretch")[2]
    for name in INPUTS:
        entry = records(out)[f"photos/{name}"]["targets"][0]
        value, _ = engine_value("emb.keras", f"photos/{name}", Similarity(reference))
        assert entry["target"]["spec"] == "similar:ref.png"
        assert entry["target"]["reference"] == "ref.png" and entry["target"]["index"] is None
        assert (entry["class"], entry["label"]) == (None, None)
        assert entry["value"] == pytest.approx(value, abs=1e-5)
        assert entry["description"] == f"similar:ref.png = {short_number(entry['value'])}"
        assert entry["outputs"]["panel"] == f"photos/{name}.similar-ref.png.panel.png"


# -- combinations that cannot mean anything: one line, exit 2, before any input ----------------


@pytest.mark.parametrize(("model", "flags", "message"), [
    ("seg.keras", [], "Error: the model's output 'seg' has shape (None, 16, 16, 3): name a "
     "target with --target region:CLASS, unit:I or similar:IMAGE"),
    ("emb.keras", ["--top-k", "2", "--target", "unit:1"], "Error: --top-k 2 ranks the classes "
     "of a (batch, classes) output: it cannot go with --target unit:1 (the model's output "
     "'emb' has shape (None, 8))"),
    ("seg.keras", ["--top-k", "2"], "--top-k 2 ranks the classes of a (batch, classes) "
     "output; the model's output 'seg' has shape (None, 16, 16, 3)"),
    ("reg.keras", ["--target", "region:1"], "Error: --target region:1 needs an output of shape "
     "(batch, H', W', classes); the model's output 'reg' has shape (None, 3)"),
    ("reg.keras", ["--target", "unit:1", "--mask-dir", "masks"], "Error: --mask-dir masks "
     "gives masks to region targets: add one with --target region:CLASS"),
    ("seg.keras", ["--target", "class:1"], "Error: --target class:1 needs a (batch, classes) "
     "output; the model's output 'seg' has shape (None, 16, 16, 3)"),
    ("seg.keras", ["--class", "1"], "Error: --class 1 needs a (batch, classes) output"),
    ("heads.keras", [], "Error: the model has 2 outputs ('label' (None, 4), 'box' (None, 4)): "
     "choose one with --model-output NAME_OR_INDEX"),
    ("heads.keras", ["--target", "class:1"], "choose one with --model-output NAME_OR_INDEX"),
    ("heads.keras", ["--model-output", "lab"], "Error: --model-output lab is not an output of "
     "the model (did you mean 'label'?): its outputs are 'label' (None, 4), 'box' (None, 4)"),
    ("heads.keras", ["--model-output", "2"], "Error: --model-output 2 is out of range: the "
     "model has 2 outputs"),
    ("reg.keras", ["--target", "unit:3"], "Error: --target unit:3 is out of range: the "
     "model's output 'reg' has shape (None, 3), 3 units (0..2)"),
    ("seg.keras", ["--target", "unit:1,2"], "Error: --target unit:1,2 gives 2 indices; the "
     "model's output 'seg' has shape (None, 16, 16, 3): 3 axes after the batch"),
    ("seg.keras", ["--target", "region:7"], "--target region:7: class index 7 is out of range"),
    ("seg.keras", ["--labels", "labels.txt", "--target", "region:cirle"], "Error: --target "
     "region:cirle: unknown class 'cirle' (did you mean 'circle'?)"),
    ("seg.keras", ["--target", "region:1", "--target", "region:1"], "--target region:1 is "
     "listed twice"),
    ("emb.keras", ["--target", "similar:missing.png"], "Error: --target similar:missing.png: "
     "no such file"),
])
def test_a_combination_that_means_nothing_is_one_usage_line(here, tmp_path, model, flags,
                                                            message):
    out = tmp_path / "out"
    result = run_cli("explain", model, "photos", "-o", out, *flags)
    line = assert_one_line_error(result, message)
    assert "Traceback" not in line
    assert not (out / "manifest.jsonl").exists() or not read_manifest(out / "manifest.jsonl")


# -- resume and shards key on the target -------------------------------------------------------


def test_resume_carries_over_only_records_of_the_same_targets(here, tmp_path):
    out, masks = tmp_path / "out", tmp_path / "masks"
    masks.mkdir()
    for name in INPUTS:
        (masks / name).parent.mkdir(parents=True, exist_ok=True)
        (masks / name).write_bytes((here / "masks" / name).read_bytes())
    args = ["seg.keras", "photos", "-o", out, "--target", "region:1", "--mask-dir", masks]
    explain(*args)
    first = records(out)
    result = run_cli("explain", *args, "--skip-existing", "--no-report")
    assert result.exit_code == 0 and "0 explained, 3 skipped" in result.stderr
    assert records(out) == first
    # Another mask content for one input: that one is recomputed.
    changed = np.zeros((16, 16), np.uint8)
    changed[0:3, 0:3] = 1
    Image.fromarray(changed).save(masks / "b.png")
    result = run_cli("explain", *args, "--skip-existing", "--no-report")
    assert "1 explained, 2 skipped" in result.stderr
    assert records(out)["photos/b.png"]["targets"][0]["target"]["pixels"] == 9
    # Another target, or another output named (the same one, by index): nothing carried over.
    for other in (["--target", "region:2", "--mask-dir", masks],
                  ["--target", "region:1", "--mask-dir", masks, "--model-output", "0"]):
        result = run_cli("explain", "seg.keras", "photos", "-o", out, *other,
                         "--skip-existing", "--no-report")
        assert "3 explained" in result.stderr and "skipped" not in result.stderr


def test_a_plain_class_run_does_not_resume_from_target_records(here, tmp_path):
    out = tmp_path / "out"
    explain("heads.keras", "photos", "-o", out, "--model-output", "label", "--top-k", "2")
    result = run_cli("explain", "heads.keras", "photos", "-o", out, "--model-output", "label",
                     "--top-k", "2", "--skip-existing", "--no-report")
    assert "0 explained, 3 skipped" in result.stderr
    result = run_cli("explain", "heads.keras", "photos", "-o", out, "--model-output", "box",
                     "--target", "unit:0", "--skip-existing", "--no-report")
    assert "3 explained" in result.stderr and "skipped" not in result.stderr


def test_shards_with_targets_merge_into_one_run(here, tmp_path):
    flags = ["--target", "region:1", "--target", "unit:5", "--mask-dir", "masks"]
    whole = tmp_path / "whole"
    explain("seg.keras", "photos", "-o", whole, *flags)
    sharded = tmp_path / "sharded"
    for index in range(2):
        explain("seg.keras", "photos", "-o", sharded, *flags, "--shard", f"{index}/2")
    assert run_cli("merge-manifests", sharded).exit_code == 0
    assert records(sharded) == records(whole)
    for record in records(whole).values():
        for entry in record["targets"]:
            for path in entry["outputs"].values():
                assert (sharded / path).read_bytes() == (whole / path).read_bytes()


def test_a_manifest_line_is_json_with_every_field(here, tmp_path):
    out = tmp_path / "out"
    explain("seg.keras", "photos/a.png", "-o", out, "--target", "unit:0")
    line = (out / "manifest.jsonl").read_text().splitlines()[0]
    record = json.loads(line)
    assert list(record["targets"][0]) == ["class", "label", "score", "outputs", "raw",
                                          "caveats", "target", "value", "description"]
    assert record["class"] == record["targets"][0]["class"] == 0


@pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.*")
@pytest.mark.heavy  # a local Ray instance: make test-all
def test_the_ray_engine_records_what_the_local_engine_records(here, tmp_path):
    ray = pytest.importorskip("ray", reason="Ray is not installed: pip install '.[ray]'")
    pytest.importorskip("ray.data", reason="Ray Data is not installed: pip install '.[ray]'")
    flags = ["--target", "region:1", "--target", "unit:5", "--mask-dir", "masks",
             "--labels", "labels.txt", "--batch-size", "2"]
    explain("seg.keras", "photos", "-o", tmp_path / "local", *flags)
    ray.init(address="local", num_cpus=2, include_dashboard=False, ignore_reinit_error=True,
             log_to_driver=False)
    try:
        explain("seg.keras", "photos", "-o", tmp_path / "ray", *flags, "--engine", "ray",
                "--workers", "1")
    finally:
        ray.shutdown()
    assert (tmp_path / "ray/manifest.jsonl").read_bytes() == \
        (tmp_path / "local/manifest.jsonl").read_bytes()
