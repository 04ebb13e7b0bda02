"""The pytest plugin, run as a user runs it: a test file of theirs, in pytest's ``pytester``.

The runs that explain maps go through ``runpytest_subprocess``: each is then a fresh
process, as a CI run is, that finds the plugin through its entry point; and Keras and
TensorFlow state (traced functions, layer name counters, the models the inner tests
build) can neither leak from one run into the next nor into this session. That costs
a TensorFlow import per run, so the runs are few and share one test file. Only
``--help``, which imports no TensorFlow, runs in process.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

pytest_plugins = ["pytester"]

#: A user's test file: one tiny ReLU network whose weights come from the seed in
#: GUIDEDBP_TEST_SEED (seed 1: a changed model), and one without any ReLU.
USER_TESTS = '''
import os

import keras
import numpy as np
import pytest

SEED = int(os.environ.get("GUIDEDBP_TEST_SEED", "0"))


def relu_net(seed=SEED):
    rng = np.random.default_rng(seed)
    inputs = keras.Input((8, 8, 3))
    hidden = keras.layers.Dense(16, activation="relu")
    top = keras.layers.Dense(3)
    model = keras.Model(inputs, top(hidden(keras.layers.Flatten()(inputs))))
    hidden.set_weights([rng.normal(size=(192, 16)).astype("float32"), np.zeros(16, "float32")])
    top.set_weights([rng.normal(size=(16, 3)).astype("float32"), np.zeros(3, "float32")])
    return model


def linear_net():
    inputs = keras.Input((8, 8, 3))
    return keras.Model(inputs, keras.layers.Dense(3)(keras.layers.Flatten()(inputs)))


PIXELS = np.random.default_rng(7).uniform(0, 1, (2, 8, 8, 3)).astype("float32")


def test_regression_file(saliency_regression):
    saliency_regression.check(relu_net(), "picture.png")


def test_regression_array(saliency_regression):
    saliency_regression.check(relu_net(), PIXELS[0], basename="array", target=2)


def test_smoke_relu(guidedbp_checks):
    model = relu_net(0)
    guidedbp_checks.assert_relu_coverage(model)
    guidedbp_checks.assert_guided_differs_from_plain(model, PIXELS)
    guidedbp_checks.assert_matches_reference(model, PIXELS)


@pytest.mark.parametrize("name", ["assert_relu_coverage", "assert_guided_differs_from_plain",
                                  "assert_matches_reference"])
def test_smoke_linear(guidedbp_checks, name):
    getattr(guidedbp_checks, name)(linear_net(), PIXELS)
'''

FILE_BASELINE = Path("test_user", "test_regression_file")
ARRAY_BASELINE = Path("test_user", "test_regression_array-array")
DIFF_LINE = re.compile(r"diff picture \(baseline \| current \| \|difference\|\): (\S+)")


@pytest.mark.heavy  # a whole pytest run of a user's suite, in a subprocess: make test-all
def test_regression_and_smoke_assertions_in_a_users_suite(pytester, monkeypatch):
    pytester.makepyfile(test_user=USER_TESTS)
    picture = np.random.default_rng(3).integers(0, 256, (12, 10, 3), dtype=np.uint8)
    Image.fromarray(picture).save(pytester.path / "picture.png")
    regression = ("-k", "regression", "-p", "no:cacheprovider")

    first = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    first.assert_outcomes(passed=1, failed=5)
    output = first.stdout.str()
    # A missing baseline is recorded, and the test fails saying so.
    assert ("no saliency baseline for picture.png (guided) yet: recorded "
            "test_user/test_regression_file.npy (class ") in output
    assert "no saliency baseline for an image array of shape (8, 8, 3) (guided) yet" in output
    # ... and listed at the end of the run, as new.
    assert re.search(r"=+ guidedbp: 2 saliency baselines recorded =+\n"
                     r"test_user/test_regression_file\.npy: class \d, new\n"
                     r"test_user/test_regression_array-array\.npy: class 2, new\n", output)
    for baseline in (FILE_BASELINE, ARRAY_BASELINE):
        stored = np.load(pytester.path / baseline.with_suffix(".npy"))
        assert stored.dtype == np.float32 and stored.shape == (8, 8)
        assert np.all(stored >= 0) and np.any(stored > 0)
    recorded = json.loads((pytester.path / ARRAY_BASELINE.with_suffix(".json")).read_text())
    assert (recorded["format"], recorded["method"], recorded["class"]) == (1, "guided", 2)
    # The smoke assertions fail on a model without ReLU, with the checks' reasons.
    assert ("AssertionError: relu-coverage check failed: no activation to guide: guided "
            "backprop equals the plain gradient for this model") in output
    assert ("AssertionError: guided-differs check failed: guided map equals the plain "
            "gradient") in output
    assert ("AssertionError: self-test check skipped: no ReLU-family op for the literal "
            "grad_ys chain to gate") in output

    passed = pytester.runpytest_subprocess(*regression)
    passed.assert_outcomes(passed=2)
    assert "saliency baseline" not in passed.stdout.str()  # nothing recorded, nothing listed

    monkeypatch.setenv("GUIDEDBP_TEST_SEED", "1")  # other weights: other maps
    changed = pytester.runpytest_subprocess(*regression)
    changed.assert_outcomes(failed=2)
    output = changed.stdout.str()
    assert re.search(r"saliency map of picture\.png \(guided, class \d\) differs from its "
                     r"baseline: Spearman similarity -?0\.\d{3} < threshold 0\.9", output)
    assert re.search(r"saliency map of an image array of shape \(8, 8, 3\) \(guided, class 2\) "
                     r"differs from its baseline", output)
    assert "baseline: test_user/test_regression_file.npy" in output
    # Compared on the class the baseline explained; the moved prediction is named.
    assert re.search(r"the model now predicts class \d, not the baseline's class \d", output)
    assert "re-record it with: pytest --guidedbp-update" in output
    # Under CI (the CI variable set) pytest's short summary repeats each whole message,
    # so a path may be printed twice: the pictures are the distinct paths.
    diffs = sorted(set(DIFF_LINE.findall(output)))
    assert [Path(diff).name for diff in diffs] == ["test_regression_array-array-diff.png",
                                                   "test_regression_file-diff.png"]
    for diff in diffs:
        path = pytester.path / diff  # relative to the run's folder, or absolute
        with Image.open(path) as shown:
            assert shown.format == "PNG" and shown.width > 2 * shown.height
            shown.load()

    before = (pytester.path / FILE_BASELINE.with_suffix(".npy")).read_bytes()
    old_map = np.load(pytester.path / ARRAY_BASELINE.with_suffix(".npy"))
    junit = pytester.path / "update.xml"
    updated = pytester.runpytest_subprocess(*regression, "--guidedbp-update",
                                            f"--junitxml={junit}")
    updated.assert_outcomes(passed=2)
    assert (pytester.path / FILE_BASELINE.with_suffix(".npy")).read_bytes() != before
    # Each re-recorded baseline is named, with its class and the old map's similarity to
    # the new one (the Spearman correlation of the two stored magnitudes).
    from guidedbp.checks.stats import map_similarity

    new_map = np.load(pytester.path / ARRAY_BASELINE.with_suffix(".npy"))
    similarity = map_similarity(old_map[..., None], new_map[..., None])
    lines = updated.stdout.str().splitlines()
    title = next(i for i, line in enumerate(lines) if "saliency baseline" in line)
    assert re.fullmatch(r"=+ guidedbp: 2 saliency baselines recorded =+", lines[title])
    assert re.fullmatch(r"test_user/test_regression_file\.npy: class \d( \(was class \d\))?, "
                        r"similarity -?0\.\d{3} -> 1 \(re-recorded\)", lines[title + 1])
    assert lines[title + 2] == (f"test_user/test_regression_array-array.npy: class 2, "
                                f"similarity {similarity:.3f} -> 1 (re-recorded)")
    assert similarity < 0.9  # the maps that failed above
    properties = re.findall(r'<property name="guidedbp-recorded" value="([^"]+)"',
                            junit.read_text())
    assert len(properties) == 2

    monkeypatch.setenv("GUIDEDBP_TEST_SEED", "0")  # the old model against the new baseline
    diff_dir = pytester.path / "diffs"
    old = pytester.runpytest_subprocess(*regression, f"--guidedbp-diff-dir={diff_dir}")
    old.assert_outcomes(failed=2)
    assert (diff_dir / "test_user" / "test_regression_file-diff.png").is_file()
    assert (diff_dir / "test_user" / "test_regression_array-array-diff.png").is_file()


def test_the_entry_point_loads_the_plugin(pytester):
    result = pytester.runpytest("--help")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*--guidedbp-update*", "*--guidedbp-diff-dir=DIR*"])


def test_loading_the_plugin_imports_no_tensorflow():
    script = ("import json, sys\nimport guidedbp.pytest_plugin\n"
              "print(json.dumps([m for m in ('tensorflow', 'keras', 'numpy') "
              "if m in sys.modules]))")
    process = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             timeout=120)
    assert process.returncode == 0, process.stderr
    assert json.loads(process.stdout.splitlines()[-1]) == []
