"""``guidedbp check --target SPEC --model-output NAME``: the checks of a segmentation, a
regression and an embedding model name the target they explained, and self-test it
against the literal reference chain of the target's own score."""

import json

import keras
import numpy as np
import pytest
from PIL import Image

from .helpers import run_cli


def trunk(inputs):
    x = keras.layers.Rescaling(1 / 255)(inputs)
    x = keras.layers.Conv2D(6, 3, padding="same", activation="relu")(x)
    return keras.layers.Conv2D(6, 3, padding="same", activation="relu")(x)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("check-targets")
    keras.utils.set_random_seed(0)
    inputs = keras.Input((12, 12, 3))
    features = trunk(inputs)
    seg = keras.layers.Conv2D(3, 1, activation="softmax", name="seg")(features)
    keras.Model(inputs, seg).save(folder / "seg.keras")
    pooled = keras.layers.GlobalAveragePooling2D()(features)
    age = keras.layers.Dense(1, name="age")(pooled)
    label = keras.layers.Dense(4, activation="softmax", name="label")(pooled)
    keras.Model(inputs, [label, age]).save(folder / "heads.keras")
    keras.Model(inputs, keras.layers.Dense(8, name="embedding")(pooled)).save(
        folder / "embedding.keras")
    (folder / "labels.txt").write_text("background\ncircle\nsquare\n")
    rng = np.random.default_rng(3)
    Image.fromarray(rng.integers(0, 256, (12, 12, 3), dtype=np.uint8)).save(folder / "ref.png")
    return folder


def check(*args, code: int = 0):
    return run_cli("check", *args, code=code)


def document(*args) -> dict:
    return json.loads(check(*args, "--json").stdout)


def by_name(found: dict) -> dict:
    return {c["name"]: c for c in found["checks"]}


def test_a_segmentation_model_checks_a_region_and_names_it(files):
    result = check(files / "seg.keras", "--target", "region:circle", "--labels",
                   files / "labels.txt", "--checks", "loads,finite,guided-differs,self-test")
    lines = result.stdout.splitlines()
    assert lines[1] == "target: region:circle"
    found = document(files / "seg.keras", "--target", "region:circle", "--labels",
                     files / "labels.txt", "--checks", "loads,finite,guided-differs,self-test")
    assert found["passed"] and found["target"] == {"spec": "region:circle", "output": None}
    checks = by_name(found)
    predictions = checks["loads"]["data"]["predictions"]
    assert set(predictions) == {f"generated/{index}" for index in range(4)}
    for prediction in predictions.values():
        assert prediction["class"] == 1
        pixels = int(prediction["target"].split("(")[1].split(" px")[0].replace(",", ""))
        assert prediction["target"] == f"region:circle ({pixels:,} px)"
        assert 0 < pixels <= 144  # of a 12x12 map
    first = predictions["generated/0"]["target"]
    assert f"target: {first} on generated/0" in checks["loads"]["detail"]
    self_test = checks["self-test"]
    assert self_test["status"] == "pass"
    assert self_test["data"]["target"] == first
    assert self_test["detail"].startswith(
        f"engine equals the reference grad_ys chain on generated/0, target {first}: ")
    assert self_test["data"]["relative_error"] <= 1e-4
    # the self-test line of the table names the target too
    assert f"target {first}" in " ".join(result.stdout.split())


def test_the_randomization_check_keeps_the_region(files):
    found = document(files / "seg.keras", "--target", "region:1", "--checks", "randomization",
                     "--randomization-steps", "2")
    steps = by_name(found)["randomization"]["data"]["steps"]
    assert len(steps) == 2
    assert all(step["spearman"] is not None for step in steps)  # the region is never empty


@pytest.mark.parametrize("args, described", [
    (["heads.keras", "--model-output", "age", "--target", "unit:0"], "unit:0 = "),
    (["heads.keras", "--model-output", "label"], "class:"),
    (["embedding.keras", "--target", "similar:{files}/ref.png"], "similar:ref.png = "),
])
def test_a_regression_a_head_and_an_embedding_self_test(files, args, described):
    model, *rest = [arg.format(files=files) for arg in args]
    found = document(files / model, *rest, "--checks", "loads,self-test")
    checks = by_name(found)
    assert checks["self-test"]["status"] == "pass", checks["self-test"]["detail"]
    assert checks["self-test"]["data"]["target"].startswith(described)
    assert all(p["target"].startswith(described)
               for p in checks["loads"]["data"]["predictions"].values())


@pytest.mark.parametrize("args, message", [
    (["seg.keras", "--target", "class:1"],
     "Error: --target class:1 needs a (batch, classes) output; the model's output 'seg' has "
     "shape (None, 12, 12, 3): name a target that fits it with --target region:CLASS, unit:I "
     "or similar:IMAGE"),
    (["heads.keras", "--target", "unit:0"],
     "Error: the model has 2 outputs ('label' (None, 4), 'age' (None, 1)): choose one with "
     "--model-output NAME_OR_INDEX"),
    (["heads.keras", "--model-output", "size", "--target", "unit:0"],
     "Error: --model-output size is not an output of the model: its outputs are 'label' "
     "(None, 4), 'age' (None, 1)"),
    (["seg.keras", "--target", "regoin:1"], "Invalid value for '--target'"),
])
def test_targets_that_cannot_fit_are_usage_errors(files, args, message):
    model, *rest = args
    result = check(files / model, *rest, code=2)
    assert message in result.stderr and "Traceback" not in result.stderr


def test_expect_lists_classes_and_a_baseline_records_the_target(files, tmp_path):
    expect = tmp_path / "expect.csv"
    expect.write_text("generated/0,1\n")
    result = check(files / "seg.keras", "--target", "region:1", "--expect", expect, code=2)
    assert "--expect lists classes: it cannot go with --target region:1" in result.stderr
    baseline = tmp_path / "baseline"
    check(files / "seg.keras", "--target", "region:1", "--checks", "loads",
          "--save-baseline", baseline)
    assert json.loads((baseline / "baseline.json").read_text())["options"]["target"] \
        == "region:1"
    found = json.loads(check(files / "seg.keras", "--target", "region:2", "--baseline",
                             baseline, "--checks", "baseline", "--json", code=1).stdout)
    assert "target: baseline 'region:1', now 'region:2'" in by_name(found)["baseline"]["detail"]
    check(files / "seg.keras", "--target", "region:1", "--baseline", baseline, "--checks",
          "baseline")


@pytest.mark.parametrize("model, spec, output", [
    ("seg.keras", "region:2", None),
    ("heads.keras", "unit:0", "age"),
    ("heads.keras", "class:3", "label"),
    ("embedding.keras", "similar:{files}/ref.png", None),
])
def test_the_reference_score_is_the_engines_score(files, model, spec, output):
    """The self-test's reference scores each target as its definition says: its plain
    gradient equals the engine's vanilla map of the same target."""
    from guidedbp.checks.check_target import BatchTargets, plan_check_target
    from guidedbp.engine.explainer import Explainer
    from guidedbp.engine.reference import reference_saliency
    from guidedbp.models.loading import load_model

    loaded = load_model(files / model)
    images = np.random.default_rng(5).uniform(0, 255, (2, 12, 12, 3)).astype(np.float32)
    target = plan_check_target(loaded, spec.format(files=files), output, (12, 12, 3))
    masks = [target.region_mask(loaded.model, image) for image in images]
    wanted = BatchTargets(target, None if masks[0] is None else tuple(masks)).for_batch([0, 1])
    engine = Explainer(loaded.model, "vanilla", output=output).explain(images, wanted)
    for index in range(2):
        scorer, chosen = target.reference_model(loaded.model, masks[index])
        reference = reference_saliency(scorer, images[index:index + 1], chosen, "vanilla")[0]
        np.testing.assert_allclose(engine.maps[index], reference, rtol=1e-4,
                                   atol=1e-6 * np.abs(reference).max())
        assert np.abs(reference).max() > 0
