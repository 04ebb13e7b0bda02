"""``guidedbp check``: exit codes, table, --json, --junit-xml, baselines, for real."""

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from .helpers import run_cli
from .models import tiny_cnn

REPO = Path(__file__).resolve().parents[1]
DEFAULT = ["loads", "relu-coverage", "finite", "guided-differs", "self-test", "randomization"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("check-cli")
    tiny_cnn(2).save(folder / "relu.keras")
    tiny_cnn(9).save(folder / "other.keras")  # same architecture, other weights
    tiny_cnn(2, activation="linear").save(folder / "linear.keras")  # nothing to guide
    images = folder / "images"
    (images / "sub").mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in ("one.png", "two.png", "sub/three.png"):
        Image.fromarray(rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)).save(images / name)
    (folder / "labels.txt").write_text("cat\ndog\nbird\n")
    return folder


def check(*args, code: int = 0):
    return run_cli("check", *args, code=code)


def check_json(*args, code: int = 0) -> dict:
    return json.loads(check(*args, "--json", code=code).stdout)


def statuses(document: dict) -> dict:
    return {c["name"]: c["status"] for c in document["checks"]}


def test_relu_model_passes_with_a_table(files):
    result = check(files / "relu.keras")
    lines = result.stdout.splitlines()
    assert lines[0] == f"guidedbp check {files / 'relu.keras'}: 4 generated 16x16 images (seed 0)"
    assert lines[1].split() == ["check", "status", "detail"]
    rows = {line.split()[0]: line.split()[1] for line in lines[2:-1] if not line.startswith(" ")}
    assert rows == {**{name: "pass" for name in DEFAULT}, "randomization": "info"}
    assert lines[-1].startswith("5 passed, 0 failed, 1 info, 0 skipped in ")
    assert result.stderr == ""


def test_linear_model_fails_with_exit_1_and_json(files):
    document = check_json(files / "linear.keras", code=1)
    assert document["passed"] is False
    assert statuses(document) == {"loads": "pass", "relu-coverage": "fail", "finite": "pass",
                                  "guided-differs": "fail", "self-test": "skip",
                                  "randomization": "info"}
    coverage = document["checks"][1]
    assert coverage["data"]["plain_activations"] == {}
    assert "guided backprop equals the plain gradient for this model" in coverage["detail"]
    assert document["summary"] == {"pass": 2, "fail": 2, "info": 1, "skip": 1}
    assert document["images"] == [f"generated/{i}" for i in range(4)]


def test_junit_xml_names_each_check(files, tmp_path):
    report = tmp_path / "reports" / "check.xml"
    check(files / "linear.keras", "--junit-xml", report, code=1)
    root = ET.parse(report).getroot()
    suites = root.findall("testsuite")
    assert len(suites) == 1 and suites[0].get("name") == "guidedbp check"
    cases = {case.get("name"): case for case in suites[0].findall("testcase")}
    assert list(cases) == DEFAULT
    assert {case.get("classname") for case in cases.values()} == {"guidedbp check"}
    model = suites[0].find("properties/property[@name='model']")
    assert model.get("value") == str(files / "linear.keras")
    assert suites[0].get("failures") == "2" and suites[0].get("skipped") == "1"
    failure = cases["relu-coverage"].find("failure")
    assert "guided backprop equals the plain gradient" in failure.get("message")
    assert cases["self-test"].find("skipped") is not None
    assert cases["loads"].find("failure") is None and cases["loads"].find("skipped") is None
    assert not [p for p in report.parent.iterdir() if p.name.startswith(".")]  # no temp file


def test_checks_subset_and_images(files):
    document = check_json(files / "relu.keras", files / "images", "--checks", "loads,finite")
    assert statuses(document) == {"loads": "pass", "finite": "pass"}
    assert document["images"] == ["one", "two", "sub/three"]
    assert document["checks"][0]["detail"] == "model loaded; 3 images predicted"


def test_checks_all_runs_what_applies(files):
    assert list(statuses(check_json(files / "relu.keras", "--checks", "all",
                                    "--generated", "1"))) == DEFAULT


def test_expected_classes_pass_and_fail(files, tmp_path):
    predicted = check_json(files / "relu.keras", files / "images", "--checks", "loads")
    classes = {k: v["class"] for k, v in predicted["checks"][0]["data"]["predictions"].items()}
    names = ["cat", "dog", "bird"]
    good = tmp_path / "good.csv"
    good.write_text("image,class\n" + "".join(
        f"{os.path.basename(key)}.png,{names[cls]}\n" for key, cls in classes.items()))
    document = check_json(files / "relu.keras", files / "images", "--labels", files / "labels.txt",
                          "--expect", good)
    assert statuses(document)["expected-classes"] == "pass"
    bad = tmp_path / "bad.csv"
    wrong = (classes["one"] + 1) % 3
    bad.write_text(f"{files / 'images' / 'one.png'},{wrong}\n")
    document = check_json(files / "relu.keras", files / "images", "--expect", bad,
                          "--checks", "expected-classes", code=1)
    mismatch = document["checks"][0]["data"]["mismatches"]
    assert mismatch == [{"image": "one", "line": 1, "expected": wrong,
                         "predicted": classes["one"], "probability": mismatch[0]["probability"]}]


def test_baseline_save_pass_drift_and_options(files, tmp_path):
    baseline = tmp_path / "baseline"
    saved = check(files / "relu.keras", files / "images", "--save-baseline", baseline)
    assert saved.stderr == f"baseline saved: {baseline / 'baseline.json'}\n"
    stored = json.loads((baseline / "baseline.json").read_text())
    assert [image["key"] for image in stored["images"]] == ["one", "two", "sub/three"]
    assert stored["options"] == {"method": "guided", "preprocess": "none", "resize": "stretch",
                                 "size": [16, 16], "inputs": "files"}
    assert stored["model"] == str(files / "relu.keras") and stored["guidedbp_version"]
    assert np.load(baseline / "sub" / "three.npy").shape == (16, 16, 3)

    same = check_json(files / "relu.keras", files / "images", "--baseline", baseline)
    assert statuses(same)["baseline"] == "pass"
    assert set(same["checks"][-1]["data"]["similarity"].values()) == {1.0}

    drifted = check_json(files / "other.keras", files / "images", "--baseline", baseline,
                         "--checks", "baseline", code=1)
    data = drifted["checks"][0]["data"]
    assert [item.split(" ")[0] for item in data["drifted"]] == ["one", "two", "sub/three"]
    assert "maps drifted (Spearman < 0.9)" in drifted["checks"][0]["detail"]

    other_options = check_json(files / "relu.keras", files / "images", "--baseline", baseline,
                               "--preprocess", "scale01", "--checks", "baseline", code=1)
    assert ("preprocess: baseline 'none', now 'scale01'"
            in other_options["checks"][0]["detail"])


def test_drifted_maps_get_diff_pictures_named_in_the_table_and_junit_xml(files, tmp_path):
    import tempfile

    from guidedbp.render.diff import render_difference

    baseline = tmp_path / "baseline"
    check(files / "relu.keras", files / "images", "--checks", "loads", "--save-baseline",
          baseline)
    stored = json.loads((baseline / "baseline.json").read_text())["images"]
    keys = [entry["key"] for entry in stored]

    # Default: a new temporary folder, each picture named on the console line.
    report = tmp_path / "check.xml"
    table = check(files / "other.keras", files / "images", "--baseline", baseline,
                  "--checks", "baseline", "--junit-xml", report, code=1).stdout
    assert "diff pictures (baseline | current | |difference|): " in " ".join(table.split())
    shown = [word.rstrip(",") for word in table.split() if word.rstrip(",").endswith(
        "-diff.png")]
    folder = Path(shown[0]).parent
    assert folder.name.startswith("guidedbp-check-diffs-")
    assert folder.parent == Path(tempfile.gettempdir())
    try:
        assert shown == [str(folder / f"{key}-diff.png") for key in keys]
        # JUnit XML links every picture from the failing testcase.
        case = ET.parse(report).getroot().find("testsuite/testcase")
        assert case.find("failure") is not None
        assert case.find("system-out").text.splitlines() == [
            f"[[ATTACHMENT|{path}]]" for path in shown]
        # Each picture, opened, is baseline | current | |difference| (its pixels are
        # compared in test_check.py, where the current maps of the baseline's class are
        # at hand): the baseline's map is its first column.
        for entry, path in zip(stored, shown):
            old = np.load(baseline / entry["map"])
            with Image.open(path) as picture:
                seen = np.asarray(picture.convert("RGB"))
            drawn = render_difference(old, old, explained=f"class {entry['class']}",
                                      caption=f"{entry['key']}: Spearman 0.123 < 0.9")
            assert seen.shape == drawn.shape and seen.shape[1] > 3 * 224
            left = slice(None, 8 + 224)  # the margin and the first tile
            np.testing.assert_array_equal(seen[40:, left], drawn[40:, left])
    finally:
        import shutil

        shutil.rmtree(folder)

    # --diff-dir chooses the folder; a run that does not drift leaves no temporary one.
    document = check_json(files / "other.keras", files / "images", "--baseline", baseline,
                          "--checks", "baseline", "--diff-dir", tmp_path / "diffs", code=1)
    pictures = document["checks"][0]["data"]["diff_pictures"]
    assert pictures == {key: str(tmp_path / "diffs" / f"{key}-diff.png") for key in keys}
    assert all(Path(path).is_file() for path in pictures.values())
    before = set(Path(tempfile.gettempdir()).glob("guidedbp-check-diffs-*"))
    same = check_json(files / "relu.keras", files / "images", "--baseline", baseline,
                      "--checks", "baseline")
    assert same["checks"][0]["data"]["diff_pictures"] == {}
    assert set(Path(tempfile.gettempdir()).glob("guidedbp-check-diffs-*")) == before


def test_failing_checks_save_no_baseline(files, tmp_path):
    result = check(files / "linear.keras", "--save-baseline", tmp_path / "b", code=1)
    assert "baseline not saved: 2 checks failed (relu-coverage, guided-differs)" in result.stderr
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("args, message", [
    (["missing.keras"], "not found"),
    (["{relu}", "--checks", "nope"], "nope: choose from loads"),
    (["{relu}", "--checks", "baseline"], "the baseline check needs --baseline"),
    (["{relu}", "--baseline", "{folder}"], "holds no baseline.json"),
    (["{relu}", "--baseline", "{folder}", "--save-baseline", "{folder}"],
     "cannot be used together"),
    (["{relu}", "{folder}/nothing-here"], "not found"),
    (["{relu}", "--diff-dir", "{folder}"], "--diff-dir holds the baseline check's pictures"),
    (["{relu}", "--expect", "{folder}/labels.txt"], "line 1: expected 'image,class'"),
])
def test_usage_and_load_errors_exit_2(files, args, message):
    filled = [a.format(relu=files / "relu.keras", folder=files) for a in args]
    result = check(*filled, code=2)
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_a_model_that_does_not_load_exits_2_with_a_junit_failure(tmp_path):
    (tmp_path / "empty.keras").write_bytes(b"")
    report = tmp_path / "check.xml"
    result = check(tmp_path / "empty.keras", "--junit-xml", report, code=2)
    assert "is empty, not a model file" in result.stderr
    case = ET.parse(report).getroot().find("testsuite/testcase")
    assert case.get("name") == "loads"
    assert "is empty, not a model file" in case.find("failure").get("message")


def test_unknown_expected_class_name_exits_2(files, tmp_path):
    expect = tmp_path / "e.csv"
    expect.write_text("one.png,zebra\n")
    result = check(files / "relu.keras", files / "images", "--labels", files / "labels.txt",
                   "--expect", expect, code=2)
    assert "line 1 of --expect FILE: unknown class 'zebra'" in result.stderr


def test_python_m_guidedbp_check_exit_code(files):
    completed = subprocess.run(
        [sys.executable, "-m", "guidedbp", "check", str(files / "linear.keras"), "--checks",
         "loads,relu-coverage"],
        capture_output=True, text=True, cwd=REPO, timeout=120,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert completed.returncode == 1, completed.stderr
    assert "relu-coverage  fail" in completed.stdout
    assert "1 passed, 1 failed, 0 info, 0 skipped" in completed.stdout


def test_images_of_one_name_in_two_folders_are_both_checked(files, tmp_path):
    # explain refuses two INPUTs that would write under one name (issue 19, item 20);
    # check writes nothing at those names and keeps them apart by their folders.
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        shutil.copy(files / "images" / "one.png", tmp_path / folder / "x.png")
    document = check_json(files / "relu.keras", tmp_path / "a" / "x.png",
                          tmp_path / "b" / "x.png", "--checks", "loads")
    assert statuses(document) == {"loads": "pass"}
    assert document["images"] == ["a/x", "b/x"]
