"""Errors that need no TensorFlow come before it is imported (issue 19, item 5).

Each case runs the real command in a subprocess whose last act is to say whether
``tensorflow`` was ever imported: deterministic, not a timing. The answer must be one
``Error:`` line, exit 2, nothing written.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from .helpers import subprocess_environment

# Runs the CLI, then reports on stderr whether TensorFlow was imported on the way.
_WRAPPER = (
    "import sys\n"
    "from guidedbp.cli import main\n"
    "if sys.argv[1] == '--no-matplotlib':\n"
    "    sys.argv.pop(1)\n"
    "    sys.modules['matplotlib'] = None  # import matplotlib raises ImportError\n"
    "try:\n"
    "    main(sys.argv[1:], prog_name='guidedbp')\n"
    "finally:\n"
    "    if 'tensorflow' in sys.modules:\n"
    "        sys.stderr.write('TENSORFLOW WAS IMPORTED\\n')\n"
)


def _run(*args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _WRAPPER, *map(str, args)], cwd=cwd,
                          env=subprocess_environment(), capture_output=True, text=True,
                          timeout=120)


def _assert_fast_error(result: subprocess.CompletedProcess, *fragments: str) -> str:
    lines = result.stderr.splitlines()
    assert result.returncode == 2, result.stderr
    assert "TENSORFLOW WAS IMPORTED" not in result.stderr
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert result.stdout == ""
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


@pytest.fixture
def here(tmp_path):
    Image.fromarray(np.full((8, 8, 3), 90, np.uint8)).save(tmp_path / "x.png")
    (tmp_path / "notes.txt").write_text("not a model\n")
    return tmp_path


@pytest.mark.parametrize("command", ["explain", "inspect", "check", "evaluate"])
def test_a_missing_model_is_reported_before_tensorflow(here, command):
    args = [command, "nosuch.keras", *{"inspect": [], "evaluate": ["--shapes", "2"]}.get(
        command, ["x.png"])]
    result = _run(*args, cwd=here)
    assert _assert_fast_error(result) == "Error: model 'nosuch.keras' not found"


def test_a_model_that_cannot_be_a_model_is_reported_before_tensorflow(here):
    _assert_fast_error(_run("explain", "notes.txt", "x.png", cwd=here),
                       "'notes.txt' is not a model file")
    os.mkfifo(here / "pipe.keras")
    _assert_fast_error(_run("explain", "pipe.keras", "x.png", cwd=here), "a FIFO")
    (here / "folder").mkdir()
    _assert_fast_error(_run("explain", "folder", "x.png", cwd=here), "not a SavedModel")
    (here / "empty.keras").write_bytes(b"")
    _assert_fast_error(_run("inspect", "empty.keras", cwd=here), "is empty, not a model file")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file")
def test_an_unreadable_model_is_reported_before_tensorflow(here):
    model = here / "locked.keras"
    model.write_bytes(b"PK\x03\x04")
    model.chmod(0)
    _assert_fast_error(_run("explain", model.name, "x.png", cwd=here),
                       "cannot read model 'locked.keras': Permission denied")


def test_missing_inputs_are_reported_before_tensorflow(here):
    line = _assert_fast_error(_run("explain", "demo", "x.png", "gone.jpg", cwd=here))
    assert line == "Error: input 'gone.jpg' not found"
    (here / "empty").mkdir()
    (here / "empty" / "..photo.jpg").write_bytes(b"x")  # hidden: said, not silent
    _assert_fast_error(_run("explain", "demo", "empty", cwd=here),
                       "no images found in empty", "1 hidden image or folder")


def test_an_output_folder_that_cannot_be_ours_is_reported_before_tensorflow(here):
    before = sorted(p.name for p in here.iterdir())
    _assert_fast_error(_run("explain", "demo", "x.png", "-o", "notes.txt/out", cwd=here),
                       "cannot create the output folder 'notes.txt/out'")
    (here / "out").mkdir()
    (here / "out" / "manifest.jsonl").write_text("my own notes\n")
    _assert_fast_error(_run("explain", "demo", "x.png", "-o", "out", cwd=here),
                       "is not a guidedbp manifest")
    assert (here / "out" / "manifest.jsonl").read_text() == "my own notes\n"
    assert sorted(p.name for p in here.iterdir()) == sorted([*before, "out"])
    assert [p.name for p in (here / "out").iterdir()] == ["manifest.jsonl"]


def test_two_inputs_of_one_name_are_refused_before_tensorflow(here):
    (here / "a").mkdir()
    (here / "b").mkdir()
    (here / "a" / "x.png").write_bytes((here / "x.png").read_bytes())
    line = _assert_fast_error(_run("explain", "demo", "a/x.png", "x.png", cwd=here))
    assert line.startswith("Error: inputs 'a/x.png' and 'x.png' would both write their maps "
                           "under 'x.png' in the output folder")
    assert not (here / "guidedbp-out").exists()


def test_a_figure_without_matplotlib_is_reported_before_tensorflow(here):
    _assert_fast_error(_run("--no-matplotlib", "explain", "demo", "x.png", "--figure", "pdf",
                            cwd=here), "figures need matplotlib")
    assert not (here / "guidedbp-out").exists()


@pytest.mark.parametrize("kind", ["folder", "link", "fifo"])
def test_something_of_the_users_where_the_lock_goes_is_exit_2(here, kind):
    # Issue 19, item 7: a user's environment is never "an internal error ... a bug".
    lock = here / "out" / ".manifest.jsonl.lock"
    lock.parent.mkdir()
    {"folder": lock.mkdir, "link": lambda: lock.symlink_to(here / "notes.txt"),
     "fifo": lambda: os.mkfifo(lock)}[kind]()
    line = _assert_fast_error(_run("explain", "demo", "x.png", "-o", "out", cwd=here))
    shown = {"folder": "a folder", "link": "a symbolic link", "fifo": "a FIFO"}[kind]
    assert line == (f"Error: 'out/.manifest.jsonl.lock' is {shown}, where guidedbp keeps the "
                    "output folder's lock file: remove it, or choose another output folder")
    assert os.path.lexists(lock) and [p.name for p in lock.parent.iterdir()] == [lock.name]
    assert (here / "notes.txt").read_text() == "not a model\n"


def test_the_library_checks_the_same_way_and_takes_what_it_checked(here):
    from guidedbp import explain_files
    from guidedbp.errors import GuidedbpError
    from guidedbp.pipeline.preflight import CheckedRun, check_run

    checked = check_run("demo", [str(here / "x.png")], here / "out", methods="guided")
    assert isinstance(checked, CheckedRun) and checked.output == str(here / "out")
    assert [item.output_stem for item in checked.items] == ["x.png"]
    assert not (here / "out").exists()  # checked, not created
    with pytest.raises(GuidedbpError, match="checked for another output folder"):
        explain_files("demo", checked, here / "elsewhere")
    with pytest.raises(GuidedbpError, match="model 'nosuch.keras' not found"):
        check_run("nosuch.keras", [str(here / "x.png")], here / "out")
    assert not (here / "out").exists() and not (here / "elsewhere").exists()


# Issue 22, item 4: a command imports only its own module; the others' (the checks'
# suite, the evaluation's metrics) load only when they run or when --help lists them.
_MODULES = (
    "import sys\n"
    "from guidedbp.cli import main\n"
    "try:\n"
    "    main(sys.argv[1:], prog_name='guidedbp')\n"
    "finally:\n"
    "    print(sorted(m for m in sys.modules if m.startswith('guidedbp.cli.')))\n"
)


@pytest.mark.parametrize(("args", "commands"), [
    (["explain", "demo", "gone.png"], ["explain"]),
    (["inspect", "--help"], ["inspect"]),
    (["--help"], ["check", "demo", "evaluate", "explain", "inspect", "merge", "report"]),
])
def test_a_command_imports_only_its_own_module(here, args, commands):
    result = subprocess.run([sys.executable, "-c", _MODULES, *args], cwd=here,
                            env=subprocess_environment(), capture_output=True, text=True,
                            timeout=120)
    shown = result.stdout.strip().splitlines()[-1]
    imported = {name.split(".")[2] for name in eval(shown)}  # noqa: S307 (our own print)
    helpers = {"flags", "exits", "process", "numbers", "target_options", "evaluate_output",
               "progress"}  # shared
    assert imported - helpers == set(commands), result.stdout + result.stderr
    if args == ["--help"]:
        listed = [line.split()[0] for line in result.stdout.split("Commands:")[1].splitlines()
                  if line.strip() and not line.startswith("[")]
        assert listed == ["check", "demo", "evaluate", "explain", "inspect", "merge-manifests",
                          "report"]
    if "gone.png" in args:
        assert result.returncode == 2 and "input 'gone.png' not found" in result.stderr


# Issue 22, item 4: a finished command leaves without the interpreter's teardown, which
# takes TensorFlow a second or more; the exit status and every file are as before.
_TEARDOWN = (
    "import atexit, sys\n"
    "atexit.register(lambda: print('TEARDOWN RAN', flush=True))\n"
    "from guidedbp.__main__ import run\n"
    "sys.argv = ['guidedbp', *sys.argv[1:]]\n"
    "run()\n"
)


@pytest.mark.parametrize(("args", "code", "teardown"), [
    (["explain", "demo", "x.png", "-o", "out", "-q"], 0, False),
    (["explain", "demo", "x.png", "notes.txt", "-o", "out", "-q"], 1, False),
    (["explain", "demo", "gone.png"], 2, True),  # before TensorFlow: nothing to skip
])
def test_a_finished_command_skips_the_interpreters_teardown(here, args, code, teardown):
    result = subprocess.run([sys.executable, "-c", _TEARDOWN, *args], cwd=here,
                            env=subprocess_environment(), capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == code, result.stderr
    assert ("TEARDOWN RAN" in result.stdout) == teardown, result.stdout
    if code != 2:
        written = sorted(p.name for p in (here / "out").iterdir())
        assert "x.png.guided.color.png" in written and "manifest.jsonl" in written
        records = (here / "out" / "manifest.jsonl").read_text().splitlines()
        assert len(records) == (1 if code == 0 else 2)


def test_main_called_from_python_keeps_its_teardown(here):
    # Only the program (guidedbp.__main__.run) leaves early: a caller of main() gets its
    # SystemExit, and its own finally and exit handlers run.
    script = ("import atexit, sys\n"
              "atexit.register(lambda: print('TEARDOWN RAN', flush=True))\n"
              "from guidedbp.cli import main\n"
              "try:\n"
              "    main(sys.argv[1:], prog_name='guidedbp')\n"
              "except SystemExit as exit_:\n"
              "    print('CAUGHT', exit_.code, flush=True)\n")
    result = subprocess.run([sys.executable, "-c", script, "explain", "demo", "x.png", "-o",
                             "out", "-q"], cwd=here, env=subprocess_environment(),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-2:] == ["CAUGHT 0", "TEARDOWN RAN"], result.stdout
