"""The checks of ``guidedbp check``, run as a library on purpose-built tiny models.

Each model is built once per module; each passes or fails the checks it was built for.
"""

import json
import math

import keras
import numpy as np
import pytest
from PIL import Image

from guidedbp.checks import FAIL, INFO, PASS, SKIP, CheckSession, CheckSettings, run_checks, suite
from guidedbp.checks.baseline import BASELINE_FILE, load_baseline, save_baseline
from guidedbp.checks.expected import read_expectations, resolve_expectations
from guidedbp.checks.images import FREE_SIZE, generated_images, image_files
from guidedbp.checks.randomization import cascade, frozen_kernels
from guidedbp.checks.report import junit_xml, to_document, to_json
from guidedbp.checks.stats import map_similarity, rankdata, relative_difference, spearman
from guidedbp.engine.explainer import Explainer
from guidedbp.io.inputs import collect_inputs
from guidedbp.models.frozen import FrozenGraph
from guidedbp.models.labels import ClassNameError
from guidedbp.models.loading import load_model

DEFAULT = ("loads", "relu-coverage", "finite", "guided-differs", "self-test", "randomization")
SIZE = 16


def relu_cnn(seed: int, head: str | None = None, activation="relu", extra=None) -> keras.Model:
    """16x16x3 raw pixels -> Rescaling -> 3 convs (``activation``) -> GAP -> Dense(3[, head])."""
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((SIZE, SIZE, 3))
    x = keras.layers.Rescaling(1 / 255)(inputs)
    x = keras.layers.Conv2D(6, 3, activation=activation, name="conv1")(x)
    x = keras.layers.Conv2D(8, 3, activation=activation, name="conv2")(x)
    x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.Conv2D(8, 3, activation=activation, name="conv3")(x)
    if extra is not None:
        x = extra(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(3, activation=head, name="logits")(x))


class Poison(keras.layers.Layer):
    """Multiplies by NaN: every map of a model with this layer is NaN."""

    def call(self, inputs):
        return inputs * float("nan")


def session_of(model, images=None, **settings) -> CheckSession:
    loaded = load_model(model)
    if images is None:
        images = generated_images(loaded.input_shape, loaded.preprocess, count=4, seed=0)
    return CheckSession(loaded, images, CheckSettings(**settings))


def by_name(results) -> dict:
    return {result.name: result for result in results}


@pytest.fixture(scope="module")
def relu_model():
    return relu_cnn(seed=2)


@pytest.fixture(scope="module")
def relu_results(relu_model):
    session = session_of(relu_model)
    return session, by_name(run_checks(session, DEFAULT))


# -- statistics ---------------------------------------------------------------------------


def test_spearman_of_hand_computed_orders():
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)  # 1 - 6*2/(4*15)
    # Ties: ranks (1, 2.5, 2.5, 4) against (1, 2, 3, 4): 4.5 / sqrt(4.5 * 5).
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(4.5 / math.sqrt(22.5))


def test_rankdata_averages_ties():
    assert rankdata([10, 20, 20, 5]).tolist() == [2.0, 3.5, 3.5, 1.0]
    assert rankdata([7, 7, 7]).tolist() == [2.0, 2.0, 2.0]
    assert rankdata([[3.0, 1.0], [2.0, 1.0]]).tolist() == [4.0, 1.5, 3.0, 1.5]


def test_spearman_ignores_monotone_changes_and_is_undefined_for_constants():
    values = np.random.default_rng(0).normal(size=200)
    assert spearman(values, np.exp(values)) == pytest.approx(1.0)
    assert spearman(values, -(values ** 3)) == pytest.approx(-1.0)
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))
    assert math.isnan(spearman([1, np.nan, 3], [1, 2, 3]))
    with pytest.raises(ValueError, match="sizes 3 and 2"):
        spearman([1, 2, 3], [1, 2])


def test_map_similarity_compares_magnitudes():
    rng = np.random.default_rng(1)
    first = rng.normal(size=(5, 5, 3))
    assert map_similarity(first, -first) == pytest.approx(1.0)  # sign is not importance
    assert map_similarity(first, 3 * first) == pytest.approx(1.0)  # nor is scale
    assert map_similarity(np.zeros((2, 2, 1)), np.zeros((2, 2, 1))) == 1.0
    assert map_similarity(np.zeros((2, 2, 1)), np.eye(2)[..., None]) == 0.0
    assert math.isnan(map_similarity(np.full((2, 2, 1), np.nan), np.ones((2, 2, 1))))
    with pytest.raises(ValueError, match="cannot be compared"):
        map_similarity(np.zeros((2, 2, 1)), np.zeros((2, 3, 1)))


def test_relative_difference():
    assert relative_difference([1.0, 2.0], [1.0, 2.0]) == 0.0
    assert relative_difference([1.0, 2.5], [1.0, 2.0]) == pytest.approx(0.25)
    assert relative_difference([0.0, 1.0], [0.0, 0.0]) == math.inf


# -- generated images ---------------------------------------------------------------------


def test_generated_images_are_seeded_smooth_pixels():
    first = generated_images((8, 10, 3), "none", count=3, seed=5)
    again = generated_images((8, 10, 3), "none", count=3, seed=5)
    other = generated_images((8, 10, 3), "none", count=3, seed=6)
    assert [image.key for image in first] == ["generated/0", "generated/1", "generated/2"]
    assert all(image.path is None and image.pixels.shape == (8, 10, 3) for image in first)
    assert all(np.array_equal(a.pixels, b.pixels) for a, b in zip(first, again))
    assert not np.array_equal(first[0].pixels, other[0].pixels)
    pixels = np.stack([image.pixels for image in first])
    assert pixels.min() >= 0 and pixels.max() <= 255 and pixels.std() > 20
    # Smooth: neighbouring pixels differ by far less than the value range.
    assert np.abs(np.diff(pixels, axis=2)).max() < 255 / 2


def test_generated_images_are_preprocessed_and_sized_for_free_models():
    raw = generated_images((None, None, 3), "none", count=1, seed=0)[0].pixels
    scaled = generated_images((None, None, 3), "tf", count=1, seed=0)[0].pixels
    assert raw.shape == (*FREE_SIZE, 3)
    np.testing.assert_allclose(scaled, raw / 127.5 - 1, atol=1e-5)
    assert generated_images((None, None, 1), "none", 1, 0, size=(20, 30))[0].pixels.shape == (
        20, 30, 1)


# -- a ReLU CNN passes everything ----------------------------------------------------------


def test_relu_cnn_passes_every_check(relu_results):
    _, results = relu_results
    assert {name: r.status for name, r in results.items()} == {
        "loads": PASS, "relu-coverage": PASS, "finite": PASS, "guided-differs": PASS,
        "self-test": PASS, "randomization": INFO,
    }
    assert results["relu-coverage"].data["guided_activations"] == {"relu": 3}
    assert results["relu-coverage"].detail == "guided: relu 3"
    assert results["loads"].data["predicted"] == 4
    assert results["self-test"].data["relative_error"] <= 1e-4
    assert results["self-test"].data["image"] == "generated/0"
    differences = results["guided-differs"].data["relative_difference"]
    assert len(differences) == 4 and min(differences.values()) > 0.1
    assert all(result.seconds > 0 for result in results.values())


def test_checks_use_the_engine_as_is(relu_results, relu_model):
    session, _ = relu_results
    pixels = np.stack([image.pixels for image in session.images])
    expected = Explainer(relu_model, "guided").explain(pixels)
    for index, image in enumerate(session.images):
        explained = session.explained[image.key]
        np.testing.assert_array_equal(explained.map, expected.maps[index])
        assert explained.target == expected.targets[index]


def test_randomization_decorrelates_a_relu_cnn_and_leaves_the_model_alone(relu_model):
    before = [w.copy() for w in relu_model.get_weights()]
    session = session_of(relu_model, randomization_steps=4)
    result = by_name(run_checks(session, ["randomization"]))["randomization"]
    steps = result.data["steps"]
    assert [s["layer"] for s in steps] == ["logits", "conv3", "conv2", "conv1"]
    correlations = [s["spearman"] for s in steps]
    assert result.status == INFO
    assert correlations[-1] < 0.9 and correlations[-1] < correlations[0]
    assert all(-1 <= c <= 1 for c in correlations)
    assert all(np.array_equal(a, b) for a, b in zip(before, relu_model.get_weights()))
    again = by_name(run_checks(session_of(relu_model, randomization_steps=4),
                               ["randomization"]))["randomization"]
    assert [s["spearman"] for s in again.data["steps"]] == correlations  # seeded


def test_randomization_gate(relu_model):
    strict = by_name(run_checks(session_of(relu_model, randomization_steps=2,
                                           max_randomized_similarity=-0.99),
                                ["randomization"]))["randomization"]
    assert strict.status == FAIL
    assert "above max_randomized_similarity=-0.99" in strict.detail
    assert len(strict.data["steps"]) == 2
    lenient = by_name(run_checks(session_of(relu_model, randomization_steps=2,
                                            max_randomized_similarity=1.0),
                                 ["randomization"]))["randomization"]
    assert lenient.status == PASS


class Subclassed(keras.Model):
    """A subclassed model without get_config: keras.models.clone_model cannot copy it."""

    def __init__(self, scale):
        super().__init__()
        self.conv = keras.layers.Conv2D(4, 3, activation="relu")
        self.top = keras.layers.Dense(2)
        self.scale = scale

    def call(self, inputs):
        return self.top(keras.ops.mean(self.conv(inputs * self.scale), axis=(1, 2)))


def test_randomization_skips_a_model_it_cannot_copy():
    model = Subclassed(0.5)
    model(np.zeros((1, 8, 8, 3), np.float32))
    images = generated_images((8, 8, 3), "none", count=2, seed=0)
    result = by_name(run_checks(session_of(model, images), ["randomization"]))["randomization"]
    assert result.status == SKIP
    assert result.detail.startswith("keras.models.clone_model cannot copy this model: ")


# -- models built to fail ------------------------------------------------------------------


def test_gelu_model_passes_coverage_naming_its_activations():
    results = by_name(run_checks(session_of(relu_cnn(seed=3, activation="gelu")),
                                 ["relu-coverage", "guided-differs", "self-test"]))
    coverage = results["relu-coverage"]
    assert coverage.status == PASS
    assert "guided: gelu 3" in coverage.detail
    assert (coverage.data["guided_activations"], coverage.data["plain_activations"]) == (
        {"gelu": 3}, {})
    assert results["guided-differs"].status == PASS
    assert results["self-test"].status == SKIP  # no ReLU for the literal chain


def test_linear_model_fails_coverage_and_differs():
    results = by_name(run_checks(session_of(relu_cnn(seed=3, activation="linear")), DEFAULT))
    coverage = results["relu-coverage"]
    assert coverage.status == FAIL
    assert "guided backprop equals the plain gradient for this model" in coverage.detail
    assert "no activation to guide" in coverage.detail
    assert coverage.data["plain_activations"] == {}
    differs = results["guided-differs"]
    assert differs.status == FAIL
    assert differs.data["equal"] == ["generated/0", "generated/1", "generated/2", "generated/3"]
    assert set(differs.data["relative_difference"].values()) == {0.0}
    assert results["self-test"].status == SKIP
    assert (results["loads"].status, results["finite"].status) == (PASS, PASS)


def test_softmax_head_passes_and_maps_explain_the_logit():
    with_head = relu_cnn(seed=4, head="softmax")
    logits = relu_cnn(seed=4)
    logits.set_weights(with_head.get_weights())
    session = session_of(with_head)
    results = by_name(run_checks(session, DEFAULT))
    assert all(results[name].status == PASS for name in DEFAULT[:5])
    assert results["relu-coverage"].data["head"] == "softmax"
    assert "softmax head bypassed" in results["relu-coverage"].detail
    plain = session_of(logits)
    for image in session.images:
        np.testing.assert_array_equal(session.explained[image.key].map,
                                      plain.explained[image.key].map)


def test_nan_layer_fails_finite_naming_the_images():
    results = by_name(run_checks(session_of(relu_cnn(seed=5, extra=Poison())), DEFAULT))
    finite = results["finite"]
    assert finite.status == FAIL
    assert finite.data["non_finite"] == [f"generated/{i}" for i in range(4)]
    assert "NaN or Inf in 4 maps: generated/0, generated/1" in finite.detail
    assert results["loads"].status == PASS
    assert results["guided-differs"].status == SKIP
    assert results["self-test"].status == SKIP


def test_all_zero_maps_fail_finite():
    model = relu_cnn(seed=6)
    model.set_weights([np.zeros_like(w) for w in model.get_weights()])
    finite = by_name(run_checks(session_of(model), ["finite"]))["finite"]
    assert finite.status == FAIL
    assert finite.data["all_zero"] == [f"generated/{i}" for i in range(4)]


def test_prelu_model_skips_the_self_test_with_the_reason():
    results = by_name(run_checks(session_of(relu_cnn(seed=7, extra=keras.layers.PReLU())),
                                 ["relu-coverage", "self-test"]))
    assert results["self-test"].status == SKIP
    assert "PReLU" in results["self-test"].detail
    assert results["relu-coverage"].status == PASS
    assert results["relu-coverage"].data["guided_activations"] == {"relu": 3, "prelu": 1}


def test_a_check_that_raises_fails_alone(relu_model, monkeypatch):
    def broken(session):
        raise RuntimeError("boom")

    checks = tuple(suite.Check(c.name, broken, c.summary) if c.name == "finite" else c
                   for c in suite.CHECKS)
    monkeypatch.setattr(suite, "CHECKS", checks)
    results = by_name(run_checks(session_of(relu_model), ["loads", "finite"]))
    assert results["finite"].status == FAIL
    assert results["finite"].detail == "the check could not run: RuntimeError: boom"
    assert results["loads"].status == PASS


def test_unknown_check_names_are_refused(relu_results):
    session, _ = relu_results
    with pytest.raises(ValueError, match="unknown checks nope"):
        run_checks(session, ["nope"])


# -- image files, expected classes ---------------------------------------------------------


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("check-images")
    rng = np.random.default_rng(3)
    for name in ("a.png", "b.png", "sub/c.png"):
        (folder / name).parent.mkdir(exist_ok=True)
        pixels = rng.integers(0, 256, (24, 20, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / name)
    (folder / "broken.png").write_bytes(b"not a png")
    return folder


@pytest.fixture(scope="module")
def file_session(relu_model, image_folder):
    loaded = load_model(relu_model)
    loaded.labels = ["cat", "dog", "bird"]
    items = collect_inputs([str(image_folder)]).items
    images = image_files(items, loaded.input_shape, loaded.channels, loaded.preprocess)
    return CheckSession(loaded, images, CheckSettings())


def test_undecodable_file_fails_loads_and_the_others_still_run(file_session):
    results = by_name(run_checks(file_session, ["loads", "finite"]))
    loads = results["loads"]
    assert loads.status == FAIL
    assert list(loads.data["undecodable"]) == ["broken"]
    assert loads.detail.startswith("1 of 4 images could not be used: broken (")
    assert sorted(loads.data["predictions"]) == ["a", "b", "sub/c"]
    assert results["finite"].status == PASS


def expectations_for(session, rows: str, tmp_path):
    path = tmp_path / "expected.csv"
    path.write_text(rows)
    return resolve_expectations(read_expectations(path), session.loaded.labels, 3)


def test_expected_classes_pass_by_path_file_name_index_and_name(file_session, image_folder,
                                                                tmp_path):
    predicted = {key: r.target for key, r in file_session.explained.items()}
    names = file_session.loaded.labels
    rows = ("image,class\n"
            f"{image_folder / 'a.png'},{predicted['a']}\n"
            f"b.png,{names[predicted['b']].upper()}\n"
            f"# a comment\n\n"
            f"c.png,{predicted['sub/c']}\n")
    file_session.settings.expectations = expectations_for(file_session, rows, tmp_path)
    result = by_name(run_checks(file_session, ["expected-classes"]))["expected-classes"]
    assert result.status == PASS, result.detail
    assert result.data["checked"] == ["a", "b", "sub/c"]
    assert result.detail == "3 images predicted as expected"


def test_expected_classes_fail_listing_mismatches_and_unknown_images(file_session, tmp_path):
    predicted = file_session.explained["a"].target
    wrong = (predicted + 1) % 3
    rows = f"a.png,{wrong}\nnowhere.png,0\nbroken.png,1\n"
    file_session.settings.expectations = expectations_for(file_session, rows, tmp_path)
    result = by_name(run_checks(file_session, ["expected-classes"]))["expected-classes"]
    assert result.status == FAIL
    mismatches = {m["image"]: m for m in result.data["mismatches"]}
    assert mismatches["a"]["expected"] == wrong and mismatches["a"]["predicted"] == predicted
    assert mismatches["broken"]["predicted"] is None
    assert result.data["unmatched"] == [{"line": 2, "image": "nowhere.png"}]
    names = file_session.loaded.labels
    assert f"a expected {wrong} ({names[wrong]}), got {predicted} ({names[predicted]})" in (
        result.detail)
    assert "line 2 'nowhere.png'" in result.detail


def test_expectations_file_errors_name_the_line(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("a.png,1\nb.png\n")
    with pytest.raises(ValueError, match="line 2: expected 'image,class'"):
        read_expectations(bad)
    unknown = tmp_path / "unknown.csv"
    unknown.write_text("a.png,zebra\n")
    with pytest.raises(ClassNameError, match="line 1 of expect=FILE: unknown class 'zebra'"):
        resolve_expectations(read_expectations(unknown), ["cat", "dog"], 2)


def test_free_size_model_takes_each_image_at_its_own_size(tmp_path):
    keras.utils.set_random_seed(10)
    inputs = keras.Input((None, None, 3))
    x = keras.layers.Conv2D(4, 3, activation="relu")(keras.layers.Rescaling(1 / 255)(inputs))
    model = keras.Model(inputs, keras.layers.Dense(2)(keras.layers.GlobalAveragePooling2D()(x)))
    rng = np.random.default_rng(4)
    for name, shape in (("wide.png", (10, 14, 3)), ("tall.png", (14, 10, 3)),
                        ("wide2.png", (10, 14, 3))):
        Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8)).save(tmp_path / name)
    loaded = load_model(model)
    items = collect_inputs([str(tmp_path)]).items
    session = CheckSession(loaded, image_files(items, loaded.input_shape, 3, "none"))
    results = by_name(run_checks(session, ["loads", "finite", "self-test"]))
    assert [r.status for r in results.values()] == [PASS, PASS, PASS]
    assert {key: r.map.shape for key, r in session.explained.items()} == {
        "tall": (14, 10, 3), "wide": (10, 14, 3), "wide2": (10, 14, 3)}


# -- baselines -----------------------------------------------------------------------------


def saved_baseline(session, folder, options=None):
    options = options or {"method": "guided", "preprocess": "none", "resize": "stretch",
                          "size": [SIZE, SIZE], "inputs": "generated: 4, seed 0"}
    entries = [{"key": image.key, "path": image.path, "class": session.explained[image.key].target,
                "map": session.explained[image.key].map} for image in session.usable]
    save_baseline(str(folder), "relu.keras", options, entries)
    return options


def test_baseline_round_trip_passes_and_other_weights_drift(relu_results, tmp_path):
    session, _ = relu_results
    options = saved_baseline(session, tmp_path)
    document = json.loads((tmp_path / BASELINE_FILE).read_text())
    assert [entry["key"] for entry in document["images"]] == [f"generated/{i}" for i in range(4)]
    assert (tmp_path / "generated" / "0.npy").is_file()
    assert document["options"]["preprocess"] == "none" and document["model"] == "relu.keras"

    baseline = load_baseline(str(tmp_path))
    same = session_of(session.loaded.model, baseline=baseline, run_options=options)
    result = by_name(run_checks(same, ["baseline"]))["baseline"]
    assert result.status == PASS, result.detail
    assert set(result.data["similarity"].values()) == {1.0}

    other = session_of(relu_cnn(seed=8), baseline=baseline, run_options=options)
    drifted = by_name(run_checks(other, ["baseline"]))["baseline"]
    assert drifted.status == FAIL
    assert [item.split(" ")[0] for item in drifted.data["drifted"]] == [
        f"generated/{i}" for i in range(4)]
    assert all(value < 0.9 for value in drifted.data["similarity"].values())
    assert "4 of 4 maps drifted (Spearman < 0.9): generated/0 (" in drifted.detail


def test_drifted_maps_get_a_diff_picture_each(relu_results, tmp_path):
    from guidedbp.render.diff import render_difference

    session, _ = relu_results
    options = saved_baseline(session, tmp_path / "baseline")
    baseline = load_baseline(str(tmp_path / "baseline"))
    other = session_of(relu_cnn(seed=8), baseline=baseline, run_options=options,
                       diff_folder=str(tmp_path / "diffs"))
    result = by_name(run_checks(other, ["baseline"]))["baseline"]
    assert result.status == FAIL
    keys = [f"generated/{i}" for i in range(4)]
    paths = [str(tmp_path / "diffs" / "generated" / f"{i}-diff.png") for i in range(4)]
    assert result.data["diff_pictures"] == dict(zip(keys, paths))
    assert result.attachments == tuple(paths)
    assert (f"diff pictures (baseline | current | |difference|): {paths[0]}, {paths[1]}"
            in result.detail)
    # Each picture, read back, shows the stored map and this run's map of the same class.
    targets = [baseline.images[key].target for key in keys]
    current = other.maps("guided", other.usable, targets)
    for key, path, target, now in zip(keys, paths, targets, current):
        stored = baseline.load_map(key)
        similarity = result.data["similarity"][key]
        with Image.open(path) as picture:
            seen = np.asarray(picture)
        np.testing.assert_array_equal(seen, render_difference(
            stored, now, explained=f"class {target}",
            caption=f"{key}: Spearman {similarity:.3f} < 0.9"), err_msg=key)
    # Without a diff folder (the library's default) nothing is written.
    quiet = session_of(relu_cnn(seed=8), baseline=baseline, run_options=options)
    assert by_name(run_checks(quiet, ["baseline"]))["baseline"].data["diff_pictures"] == {}


def test_baseline_fails_on_missing_images_and_changed_options(relu_results, tmp_path):
    session, _ = relu_results
    options = saved_baseline(session, tmp_path)
    baseline = load_baseline(str(tmp_path))
    more = generated_images((SIZE, SIZE, 3), "none", count=6, seed=0)
    result = by_name(run_checks(session_of(session.loaded.model, more, baseline=baseline,
                                           run_options=options), ["baseline"]))["baseline"]
    assert result.status == FAIL
    assert result.data["missing"] == ["generated/4", "generated/5"]
    assert "2 images not in the baseline: generated/4, generated/5" in result.detail

    changed = dict(options, preprocess="scale01")
    result = by_name(run_checks(session_of(session.loaded.model, baseline=baseline,
                                           run_options=changed), ["baseline"]))["baseline"]
    assert result.status == FAIL
    assert "preprocess: baseline 'none', now 'scale01'" in result.detail


# -- SavedModels -------------------------------------------------------------------------


def test_saved_model_self_test_and_randomization_copy(relu_model, tmp_path):
    relu_model.export(str(tmp_path / "exported"), verbose=False)
    loaded = load_model(str(tmp_path / "exported"))
    graph = loaded.model
    assert isinstance(graph, FrozenGraph)
    graph_bytes = graph.graph_def.SerializeToString()
    weights = {name: value.numpy().copy() for name, value in graph.weights.items()}
    labels = [label for _, label in frozen_kernels(graph)]
    # Top layer first; export's trace adds "_1"-style suffixes to the scopes.
    assert [label.split("/")[-1].split("_")[0] for label in labels] == [
        "logits", "conv3", "conv2", "conv1"]

    session = CheckSession(loaded, generated_images(loaded.input_shape, "none", 2, 0),
                           CheckSettings(randomization_steps=4))
    results = by_name(run_checks(session, ["self-test", "randomization", "guided-differs"]))
    assert results["self-test"].status == PASS
    assert results["self-test"].data["relative_error"] <= 1e-4
    assert results["guided-differs"].status == PASS
    assert [s["layer"] for s in results["randomization"].data["steps"]] == labels
    assert results["randomization"].data["steps"][-1]["spearman"] < 0.9
    steps = list(cascade(graph, 2, seed=0))
    assert all(copy is not graph and copy.graph_def is not graph.graph_def for _, copy in steps)
    # Each step re-draws one more kernel, as weights of a new graph.
    assert [label for label, _ in steps] == labels[:2]
    (_, one), (_, two) = steps
    top, below = (name for name, _ in frozen_kernels(graph)[:2])
    original = {name: value.numpy() for name, value in
                graph.with_lifted([top, below]).weights.items()}
    assert not np.array_equal(one.weights[top].numpy(), original[top])
    assert np.array_equal(one.weights[below].numpy(), original[below])
    assert np.array_equal(two.weights[top].numpy(), one.weights[top].numpy())
    assert not np.array_equal(two.weights[below].numpy(), original[below])
    # The user's graph is untouched: same GraphDef, same weight values.
    assert graph.graph_def.SerializeToString() == graph_bytes
    assert dict(graph.weights).keys() == weights.keys()
    assert all(np.array_equal(graph.weights[name].numpy(), value)
               for name, value in weights.items())


# -- reports -------------------------------------------------------------------------------


def test_json_document_and_junit_xml(relu_results):
    import xml.etree.ElementTree as ET

    _, results = relu_results
    listed = list(results.values()) + [suite.CheckResult("baseline", FAIL, "drift <&>",
                                                         {"x": float("nan")})]
    document = json.loads(to_json(to_document("m.keras", ["generated/0"], listed, 1.5)))
    assert document["passed"] is False and document["summary"]["fail"] == 1
    assert document["checks"][-1]["data"] == {"x": None}
    root = ET.fromstring(junit_xml("m.keras", listed, 1.5))
    suite_element = root.find("testsuite")
    assert suite_element.get("name") == "guidedbp check"
    assert suite_element.get("tests") == str(len(listed)) and suite_element.get("failures") == "1"
    names = [case.get("name") for case in suite_element.iter("testcase")]
    assert names == [*DEFAULT, "baseline"]
    failure = suite_element.findall("testcase")[-1].find("failure")
    assert failure.get("message") == "drift <&>"


@pytest.mark.parametrize("module", ["guidedbp.render.diff", "guidedbp.pytest_plugin",
                                    "guidedbp.pytest_plugin.baselines"])
def test_diff_and_plugin_docstring_examples_run(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0, result
