"""Batch runs you can trust: resume without loss, names that do not move, one writer per
OUT, nothing written outside OUT or over the user's files, and the smaller defects the
hostile corpus found. Every case is built here, at test time, and runs the real command
(in-process with click's runner, or in a subprocess where a kill or a second process is
the point).
"""

from __future__ import annotations

import io
import json
import os
import resource
import shutil
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from guidedbp.io.manifest import read_manifest
from guidedbp.io.write import is_own_png

from ..helpers import (
    assert_one_line_error,
    guidedbp_command,
    no_hang,
    run_cli,
    subprocess_environment,
    tinted_noise,
    wait_for_lines,
)
from ..imagetree import make_flat, snapshot
from ..models import colour_cnn

# Kills, full disks, concurrent runs: subprocesses that load TensorFlow:
# make test-all runs these, make test leaves them out (the heavy marker).
pytestmark = pytest.mark.heavy


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("model") / "colour.keras"
    colour_cnn((16, 16, 3)).save(path)
    return str(path)


@pytest.fixture
def here(tmp_path, monkeypatch) -> Path:
    """A fresh current folder: inputs named relative to it give short output stems."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _image(path: Path, seed: int = 0, size=(12, 14)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(tinted_noise(*size, seed=seed)).save(path)
    return path


def _records(out) -> list[dict]:
    return read_manifest(Path(out) / "manifest.jsonl")


# -- 1. resume loses nothing ---------------------------------------------------------------


def test_a_resumed_run_ends_with_the_records_of_an_uninterrupted_one(model, here):
    make_flat(here / "flat", 60, size=(16, 16))
    labels = here / "labels.txt"
    labels.write_text("red\ngreen\nblue\n")
    flags = ["--labels", labels, "--top-k", "2", "--raw", "--batch-size", "4", "-q"]
    run_cli("explain", model, "flat", "-o", "whole", *flags, code=0)
    whole = _records("whole")
    assert [r["label"] for r in whole].count(None) == 0

    process = subprocess.Popen(guidedbp_command("explain", model, "flat", "-o", "cut", *flags),
                               env=subprocess_environment(), stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    wait_for_lines(here / "cut" / "manifest.jsonl", 8, process)
    process.kill()
    process.communicate(timeout=30)
    assert len(_records("cut")) < len(whole)  # it was cut short
    for _ in range(2):  # resumed after the kill, then once more after a complete run
        result = run_cli("explain", model, "flat", "-o", "cut", *flags, "--skip-existing",
                         code=0)
        assert _records("cut") == whole  # labels, scores and classes of skipped inputs too
    assert "60 skipped" not in result.stderr  # -q: no summary line
    final = run_cli("explain", model, "flat", "-o", "cut", *flags[:-1], "--skip-existing")
    assert "0 explained, 60 skipped (outputs exist)" in final.stderr


@pytest.mark.parametrize("damage", ["empty", "truncated", "not a png", "someone else's png"])
def test_a_damaged_output_is_not_a_reason_to_skip(model, here, damage):
    _image(here / "in" / "a.png", 1)
    _image(here / "in" / "b.png", 2)
    run_cli("explain", model, "in", "-o", "out", "-q", code=0)
    first = _records("out")
    victim = here / "out" / first[0]["outputs"]["color"]
    good = victim.read_bytes()
    victim.write_bytes({"empty": b"", "truncated": good[: len(good) // 2],
                        "not a png": b"hello", "someone else's png": _foreign_png()}[damage])
    if damage == "someone else's png":  # not guidedbp's: neither skipped nor overwritten
        result = run_cli("explain", model, "in", "-o", "out", "--skip-existing")
        assert result.exit_code == 1
        assert "was not written by guidedbp" in _records("out")[0]["error"]
        assert victim.read_bytes() == _foreign_png()
        return
    result = run_cli("explain", model, "in", "-o", "out", "--skip-existing", code=0)
    assert "1 explained, 1 skipped" in result.stderr
    assert victim.read_bytes() == good and _records("out") == first


def _foreign_png() -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.zeros((3, 3, 3), np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


# -- 2. output paths that do not move --------------------------------------------------------


def test_an_inputs_outputs_do_not_depend_on_the_other_inputs(model, here):
    _image(here / "colA" / "x.jpg", 1)
    _image(here / "colB" / "x.jpg", 2)
    _image(here / "colA" / "y.jpg", 3)
    run_cli("explain", model, "colA", "-o", "alone", "-q", code=0)
    run_cli("explain", model, "colA", "colB", "-o", "both", "-q", code=0)
    alone = {r["input"]: r["outputs"] for r in _records("alone")}
    both = {r["input"]: r["outputs"] for r in _records("both")}
    assert alone == {k: v for k, v in both.items() if k.startswith("colA")}
    assert alone["colA/x.jpg"]["color"] == "colA/x.jpg.guided.color.png"
    assert both["colB/x.jpg"]["color"] == "colB/x.jpg.guided.color.png"  # never colliding
    # An x.png beside x.jpg does not rename x.jpg's outputs.
    _image(here / "colA" / "x.png", 4)
    run_cli("explain", model, "colA", "-o", "alone", "-q", code=0)
    again = {r["input"]: r["outputs"] for r in _records("alone")}
    assert again["colA/x.jpg"] == alone["colA/x.jpg"]
    assert again["colA/x.png"]["color"] == "colA/x.png.guided.color.png"


def test_resume_works_across_runs_that_name_the_inputs_differently(model, here):
    for index in range(3):
        _image(here / "photos" / f"p{index}.jpg", index)
    run_cli("explain", model, "photos", "-o", "out", "-q", code=0)
    first = _records("out")
    # Every naming that maps under the folder's own name (issue 19, item 20) resumes.
    for naming in (["photos/*.jpg"], [f"{here}/photos"], ["photos/"], ["./photos/../photos"]):
        result = run_cli("explain", model, *naming, "-o", "out", "--skip-existing")
        assert result.exit_code == 0, result.output
        assert "0 explained, 3 skipped" in result.stderr, naming
        assert [r["outputs"] for r in _records("out")] == [r["outputs"] for r in first]
    # Files named one by one go under their own names: other outputs, so recomputed.
    result = run_cli("explain", model, "photos/p0.jpg", "-o", "out", "--skip-existing", code=0)
    assert "1 explained" in result.stderr
    assert _records("out")[0]["outputs"]["color"] == "p0.jpg.guided.color.png"


def test_a_long_file_name_gets_a_short_stable_output_name(model, here):
    name = "n" * 246 + ".png"  # 250 bytes: the file system's limit is 255
    _image(here / "in" / name)
    for _ in range(2):
        run_cli("explain", model, f"in/{name}", "-o", "out", "-q", "--top-k", "2", code=0)
    record = _records("out")[0]
    for target in record["targets"]:
        for path in target["outputs"].values():
            assert len(os.path.basename(path).encode()) <= 255
            assert is_own_png(here / "out" / path)
    assert record["outputs"] == json.loads(json.dumps(record["outputs"]))
    assert len([p for p in (here / "out").iterdir() if p.name.startswith("nnn")]) == 4
    # one name per output, the same in both runs


def test_a_folder_a_thousand_levels_deep(model, here):
    current = here / "deep"
    current.mkdir()
    for _ in range(1000):  # one level at a time: mkdir(parents=True) itself recurses
        current = current / "d"
        current.mkdir()
    _image(current / "bottom.png")
    try:
        result = run_cli("explain", model, "deep", "-o", "out", "-q", code=0)
        assert result.stderr == ""
        assert len(_records("out")) == 1 and _records("out")[0]["status"] == "ok"
    finally:  # pytest's own clean-up recurses once per level
        _remove_chain(here / "deep")
        _remove_chain(here / "out")


def _remove_chain(folder: Path) -> None:
    """Remove a tree that is one long chain of folders, without recursion."""
    chain = [folder]
    while True:
        subfolders = [p for p in chain[-1].iterdir() if p.is_dir() and not p.is_symlink()]
        if not subfolders:
            break
        chain.append(subfolders[0])
    for current in reversed(chain):
        for path in current.iterdir():
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)  # shallow: a chain has one subfolder, removed already
            else:
                path.unlink()
        current.rmdir()


# -- 3. one writer per OUT -------------------------------------------------------------------


def test_a_second_run_on_a_busy_out_is_refused_and_a_killed_one_leaves_no_lock(model, here):
    make_flat(here / "flat", 200, size=(16, 16))
    slow = ["--batch-size", "2", "--smooth", "40", "-q"]
    first = subprocess.Popen(guidedbp_command("explain", model, "flat", "-o", "out", *slow),
                             env=subprocess_environment(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
    wait_for_lines(here / "out" / "manifest.jsonl", 2, first)
    first.send_signal(signal.SIGSTOP)  # mid-run, holding its lock, however slow the second
    second = subprocess.run(guidedbp_command("explain", model, "flat", "-o", "out", "-q"),
                            env=subprocess_environment(), capture_output=True, text=True,
                            timeout=120)
    assert first.poll() is None  # still running
    assert second.returncode == 2
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and "being written by another guidedbp run" in lines[0]
    assert f"pid {first.pid}" in lines[0]
    first.kill()
    first.communicate(timeout=30)
    records = _records("out")  # whole lines only, all the first run's
    assert records and all(r["status"] == "ok" for r in records)
    # The killed run's lock went with it: the next run proceeds.
    run_cli("explain", model, "flat", "-o", "out", *slow[:-1], "--skip-existing", code=0)
    assert len(_records("out")) == 200
    assert not (here / "out" / ".manifest.jsonl.lock").exists()


def test_shards_of_one_run_may_share_out(model, here):
    make_flat(here / "flat", 6, size=(16, 16))
    processes = [subprocess.Popen(guidedbp_command("explain", model, "flat", "-o", "out", "-q",
                                           "--shard", f"{k}/2"),
                                  env=subprocess_environment(), stderr=subprocess.PIPE)
                 for k in range(2)]
    for process in processes:
        assert process.wait(timeout=180) == 0, process.stderr.read()
    run_cli("merge-manifests", "out", code=0)
    assert len(_records("out")) == 6


def test_a_failed_manifest_write_leaves_no_partial_line(model, here):
    make_flat(here / "flat", 40, size=(16, 16))

    def small_files():  # every file, the manifest too, may grow to 3 KiB only
        resource.setrlimit(resource.RLIMIT_FSIZE, (3000, 3000))

    result = subprocess.run(guidedbp_command("explain", model, "flat", "-o", "out", "-q",
                                     "--render", "gray"),
                            env=subprocess_environment(), capture_output=True, text=True,
                            timeout=180, preexec_fn=small_files)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "manifest.jsonl" in lines[0] and "Traceback" not in result.stderr
    data = (here / "out" / "manifest.jsonl").read_bytes()
    assert data.endswith(b"\n") and len(data) <= 3000
    assert all(isinstance(json.loads(line), dict) for line in data.splitlines())


# -- 4. nothing outside OUT, nothing of the user's overwritten ---------------------------------


def test_a_glob_through_dotdot_writes_under_out_only(model, here):
    _image(here / "photos" / "a" / "p.png", 1)
    _image(here / "other" / "q.png", 2)
    before = snapshot(here)
    result = run_cli("explain", model, "photos/*/../../other/*.png", "-o", "out", "-q", code=0)
    assert result.stderr == ""
    after = snapshot(here)
    new = sorted(set(after) - set(before))
    assert new and all(path.startswith("out/") for path in new)
    assert {k: v for k, v in after.items() if k in before} == before
    assert _records("out")[0]["outputs"]["color"] == "other/q.png.guided.color.png"
    run_cli("explain", model, "../" + here.name + "/other/q.png", "-o", "up", "-q", code=0)
    # Each argument under its own last component: no %2E%2E for '..' (issue 19, item 20).
    assert _records("up")[0]["outputs"]["color"] == "q.png.guided.color.png"


def test_links_in_out_are_never_followed(model, here):
    _image(here / "in" / "a.png")
    victim = here / "victim.txt"
    victim.write_text("precious")
    (here / "out").mkdir()
    os.symlink(victim, here / "out" / "manifest.jsonl")
    result = run_cli("explain", model, "in", "-o", "out")
    assert_one_line_error(result, "manifest.jsonl", "symbolic link")
    assert victim.read_text() == "precious"
    os.unlink(here / "out" / "manifest.jsonl")
    # A link inside OUT where an output folder goes: that input fails, nothing outside.
    elsewhere = here / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, here / "out" / "in")
    result = run_cli("explain", model, "in", "-o", "out")
    assert result.exit_code == 1
    assert "symbolic link" in _records("out")[0]["error"]
    assert list(elsewhere.iterdir()) == []


def test_out_inside_the_input_folder_touches_nothing_of_the_users(model, here):
    photos = here / "photos"
    _image(photos / "cat.png", 1)
    (photos / "manifest.jsonl").write_text("my own notes\n")
    os.chdir(photos)
    result = run_cli("explain", model, ".", "-o", ".")
    assert_one_line_error(result, "manifest.jsonl", "not a guidedbp manifest")
    assert (photos / "manifest.jsonl").read_text() == "my own notes\n"
    os.unlink(photos / "manifest.jsonl")
    # An image of the user's named like the output another input would write.
    _image(photos / "cat.png.guided.color.png", 2)
    mine = (photos / "cat.png.guided.color.png").read_bytes()
    result = run_cli("explain", model, ".", "-o", ".")
    assert result.exit_code == 1
    records = {Path(r["input"]).name: r for r in _records(photos)}
    assert "was not written by guidedbp" in records["cat.png"]["error"]
    assert records["cat.png.guided.color.png"]["status"] == "ok"  # explained, not skipped
    assert (photos / "cat.png.guided.color.png").read_bytes() == mine
    # guidedbp's own outputs, panels of several methods included, are never inputs.
    run_cli("explain", model, ".", "-o", ".", "--method", "guided,gradcam",
            "--render", "panel,color")
    second = run_cli("explain", model, ".", "-o", ".", "--method", "guided,gradcam",
                     "--render", "panel,color")
    assert sorted(Path(r["input"]).name for r in _records(photos)) == [
        "cat.png", "cat.png.guided.color.png"]
    assert second.exit_code == 1  # cat.png's color map still may not replace the user's


# -- 9. the smaller ones ----------------------------------------------------------------------


def test_quiet_keeps_the_failures_and_counts_read_right(model, here):
    _image(here / "in" / "good.png")
    (here / "in" / "bad.png").write_bytes(b"")
    (here / "in" / "notes.txt").write_text("x")
    loud = run_cli("explain", model, "in", "-o", "out")
    assert loud.exit_code == 1
    assert "1 explained, 1 failed, 1 other file passed over in " in loud.stderr
    assert "s loading the model" in loud.stderr
    quiet = run_cli("explain", model, "in", "-o", "out2", "-q")
    assert quiet.exit_code == 1
    assert quiet.stderr.splitlines() == ["  failed: in/bad.png: empty file"]


def test_explain_says_what_inspect_warns_of(here):
    import keras

    inputs = keras.Input((8, 8, 3))
    x = keras.layers.Conv2D(2, 3, activation="relu")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(3)(keras.layers.GlobalAveragePooling2D()(x)))
    model.save(here / "plain.keras")
    (here / "two.txt").write_text("a\nb\n")
    _image(here / "x.png")
    result = run_cli("explain", here / "plain.keras", "x.png", "-o", "out", "--labels",
                     here / "two.txt", code=0)
    warned = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    assert any("no Rescaling/Normalization layer" in line and "--preprocess MODE" in line
               for line in warned)
    assert any("2 class names for 3 classes" in line for line in warned)
    # Once preprocessing is chosen, the hint to choose it is moot.
    chosen = run_cli("explain", here / "plain.keras", "x.png", "-o", "out2", "--preprocess",
                     "tf", code=0)
    assert "Rescaling" not in chosen.stderr


def test_an_out_that_cannot_be_created_fails_before_the_model_loads(here):
    _image(here / "x.png")
    result = run_cli("explain", here / "no-such-model.keras", "x.png", "-o", "/proc/x/out")
    assert_one_line_error(result, "/proc/x/out")  # not the missing model: OUT comes first
    (here / "file").write_text("x")
    result = run_cli("explain", here / "no-such-model.keras", "x.png", "-o", "file/out")
    assert_one_line_error(result, "cannot create the output folder")


def test_a_failed_start_leaves_no_empty_out_behind(here):
    _image(here / "x.png")
    result = run_cli("explain", here / "missing.keras", "x.png", "-o", "new/out")
    assert result.exit_code == 2
    assert not (here / "new").exists()


def test_names_differing_in_case_only_never_share_outputs(model, here):
    _image(here / "in" / "a.png", 1)
    _image(here / "in" / "A.PNG", 2)
    result = run_cli("explain", model, "in", "-o", "out")
    assert result.exit_code == 1
    records = {r["input"]: r for r in _records("out")}
    assert records["in/A.PNG"]["status"] == "ok"
    assert "only in letter case" in records["in/a.png"]["error"]


def test_the_summary_names_the_files_it_did_not_write(model, here):
    _image(here / "in" / "a.png")
    shutil.copy(here / "in" / "a.png", here / "in" / "b.png")
    result = run_cli("explain", model, "in", "-o", "out", code=0)
    assert "2 explained in " in result.stderr


def test_a_fifo_as_the_model_or_custom_objects_never_hangs(model, here):
    _image(here / "x.png")
    os.mkfifo(here / "model.keras")
    os.mkfifo(here / "objects.py")
    for args in (["model.keras"], [model, "--custom-objects", "objects.py"]):
        with no_hang(30):
            result = run_cli("explain", *args, "x.png", "-o", "out")
        assert_one_line_error(result, "FIFO")


def test_a_closed_pipe_ends_check_quietly(here):
    command = " ".join(guidedbp_command("check", "demo", "--checks", "loads"))
    # A reader that is gone before anything is written (`| head -1` may be too slow to
    # go): the write fails for sure.
    gone = subprocess.run(f"{command} | true; echo $PIPESTATUS", shell=True,
                          executable="/bin/bash", env=subprocess_environment(),
                          capture_output=True, text=True, timeout=120)
    assert gone.stderr == "" and gone.stdout.strip() in ("0", "141")


# -- issue 19, item 7: a full disk at start is the user's environment, not a bug -------------


def _assert_full_disk_refused(result, out: Path) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith(f"Error: cannot create the lock file "
                               f"'{out.name}/.manifest.jsonl.lock': "), lines[0]
    assert "internal error" not in lines[0]
    assert not out.exists()  # the folder it made, and the lock file, are gone


def test_a_folder_that_takes_no_bytes_at_start_is_exit_2_with_nothing_left(model, here):
    _image(here / "in" / "a.png")

    def no_bytes():  # a write past byte 16 fails with EFBIG (Python ignores SIGXFSZ);
        # 16 bytes leave room for tempfile's probe, which TensorFlow's import needs
        resource.setrlimit(resource.RLIMIT_FSIZE, (16, 16))

    result = subprocess.run(guidedbp_command("explain", model, "in", "-o", "out"),
                            env=subprocess_environment(), capture_output=True, text=True,
                            timeout=180, preexec_fn=no_bytes)
    _assert_full_disk_refused(result, here / "out")
    assert "File too large" in result.stderr


def test_a_full_file_system_at_start_is_exit_2_with_nothing_left(model, here):
    full = here / "full"
    full.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(full)],
                             capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        with open(full / "filler", "wb", buffering=0) as filler:  # to the last block
            try:
                while True:
                    filler.write(b"\0" * 4096)
            except OSError:
                pass
        _image(here / "in" / "a.png")
        result = subprocess.run(guidedbp_command("explain", model, "in", "-o", full / "out"),
                                env=subprocess_environment(), capture_output=True, text=True,
                                timeout=180)
        assert result.returncode == 2, result.stderr
        assert "No space left on device" in result.stderr
        assert "internal error" not in result.stderr and len(result.stderr.splitlines()) == 1
        assert sorted(os.listdir(full)) == ["filler"]
    finally:
        subprocess.run(["umount", str(full)], check=False)
