"""Every snippet of README.md runs, so that none can drift from the code.

The ```python blocks of a section (the heading above them) run in order in one namespace;
the ``guidedbp`` commands of its ```sh blocks run in order through the command line
(in-process, click's runner) and must exit 0, and a ``# -> PATH, ...`` comment is checked:
each path (a glob) must exist afterwards. A block that starts with ``# tests/test_*.py``
is a test file of the reader's: it is written there and run with pytest, twice (the first
run records the baselines). Other commands (``pip``, ``make``, ``pytest``, ``tensorboard``,
a shell's completion set-up) set up the reader's machine and are not run.

Everything runs in a copy of one folder that holds what the README takes as the reader's
own (:data:`GIVEN_FILES`), and the Python blocks start with :data:`GIVEN` defined.
:data:`SKIPPED` names the few snippets that cannot run here, each with its reason; a test
checks that each still names a snippet of the README.
"""

from __future__ import annotations

import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from guidedbp.demo import CLASS_NAMES
from guidedbp.demo.samples import packaged_samples
from tests.helpers import REPO, run_cli

pytest_plugins = ["pytester"]

README = REPO / "README.md"

#: Snippets that cannot run here: a text each contains -> why. Each must name a snippet.
SKIPPED = {
    "guidedbp explain keras:ResNet50 sample_images/cat.jpg": "downloads ImageNet weights",
    "/data/": "paths on a cluster's shared volume, run by Ray, Slurm or Kubernetes",
    "s3://": "a reader's buckets and credentials; tests/test_store.py and "
             "tests/test_store_hostile.py run these commands against moto's S3 server",
    "guidedbp evaluate demo-silu --shapes 500": "minutes of work (make eval runs it); "
                                                "tests/test_demo_silu.py evaluates 6 shapes",
    "guidedbp evaluate demo-seg --shapes 200": "minutes of work (make eval runs it); "
                                               "tests/test_demo_seg.py evaluates 4 shapes",
}

#: What the README's snippets take as the reader's own files, made in the folder they run in.
GIVEN_FILES = {
    "sample_images/": "a copy of the repository's",
    "model.keras, model.h5, saved_model_dir/": "the demo model, as a .keras file, an H5 file "
                                                "and a SavedModel (model.export)",
    "cat.jpg": "sample_images/cat.jpg",
    "photos/, shots/, tests/images/": "sample shapes (photos/ with a subfolder)",
    "tests/expected.csv": "each sample shape's class index (model.keras has no class names)",
    "tests/images/circle.png, tests/images/batch.npy": "a sample shape; the six, preprocessed",
}

#: The names the Python blocks use as the reader's own, defined before they run.
GIVEN = {
    "model": "the demo model, compiled for fit() (in 'Methods to compare with': ResNet50 "
             "with random weights, whose layer names the block uses)",
    "images": "the six sample shapes in the demo model's input space, float32 (6, 96, 96, 3)",
    "x_train, y_train": "12 shapes and their classes",
    "x_val, y_val": "the six sample shapes and their classes",
    "pictures": "the six sample shapes as uint8",
    "my_model": "(a pytest fixture in the test file's conftest.py) the demo model",
}

#: After a section's Python blocks ran: what the README says of the values, as expressions.
STATED = {
    "Python API": [
        "maps.dtype == np.float32 and maps.shape == images.shape",
        "(summary.done, summary.failures, summary.exit_code) == (6, [], 0)",
        "result.label == 'circle' and result.maps['guided'].shape == (96, 96, 3)",
        "result.original_maps()['guided'].shape[:2] == result.image.shape[:2]",
    ],
    "In a notebook": ["type(figure).__name__ == 'Figure'"],
}


@dataclass(frozen=True)
class Snippet:
    section: str  # the heading above it
    language: str  # python, sh, yaml, or "" for plain text
    code: str
    line: int  # of its first code line in README.md


def readme_snippets(text: str) -> list[Snippet]:
    """The fenced blocks of a Markdown text, each with the heading above it."""
    snippets, section, fence, body, start = [], "", None, [], 0
    for number, line in enumerate(text.splitlines(), 1):
        if fence is None:
            if line.startswith("```"):
                fence, body, start = line[3:].strip(), [], number + 1
            elif line.startswith("#"):
                section = line.lstrip("#").strip().strip("`")
        elif line.startswith("```"):
            snippets.append(Snippet(section, fence, "\n".join(body) + "\n", start))
            fence = None
        else:
            body.append(line)
    return snippets


@dataclass(frozen=True)
class ShellCommand:
    text: str  # as written, continuation lines joined
    argv: list[str]
    stated: list[str]  # the paths of a `# -> PATH, ...` comment
    line: int


def shell_commands(snippet: Snippet) -> list[ShellCommand]:
    """Each command line of a shell block (backslash continuations joined)."""
    commands, pending, first = [], "", 0
    for offset, line in enumerate(snippet.code.splitlines()):
        first = first if pending else snippet.line + offset
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        text, pending = (pending + line).strip(), ""
        if not text or text.startswith("#"):
            continue
        arrow = re.search(r"\s#\s*->\s*(.*)$", text)
        stated = [path.strip() for path in arrow[1].split(",")] if arrow else []
        commands.append(ShellCommand(text, shlex.split(text, comments=True),
                                     [p for p in stated if p and p != "..."], first))
    return commands


SNIPPETS = readme_snippets(README.read_text(encoding="utf-8"))


def skip_reason(text: str) -> str | None:
    return next((why for marker, why in SKIPPED.items() if marker in text), None)


def _python_sections() -> list[str]:
    return list(dict.fromkeys(s.section for s in SNIPPETS
                              if s.language == "python" and not skip_reason(s.code)))


def _shell_sections() -> list[str]:
    return list(dict.fromkeys(
        s.section for s in SNIPPETS if s.language == "sh"
        for c in shell_commands(s) if c.argv[:1] == ["guidedbp"] and not skip_reason(c.text)))


# -- the reader's folder ----------------------------------------------------------------------


def _demo_model(compiled: bool = True):
    import keras

    from guidedbp.demo.samples import PACKAGED_SAMPLES

    model = keras.models.load_model(PACKAGED_SAMPLES.with_name("shapes.keras"))
    if compiled:
        model.compile("adam", "sparse_categorical_crossentropy")
    return model


def _samples() -> tuple[np.ndarray, np.ndarray]:
    from PIL import Image

    paths = packaged_samples()
    pixels = np.stack([np.asarray(Image.open(path).convert("RGB")) for path in paths])
    labels = np.array([CLASS_NAMES.index(path.stem.removesuffix("_0")) for path in paths])
    return pixels, labels


@pytest.fixture(scope="module")
def reader_folder(tmp_path_factory) -> Path:
    """The folder of :data:`GIVEN_FILES`, made once; each test works in a copy."""
    folder = tmp_path_factory.mktemp("reader")
    shutil.copytree(REPO / "sample_images", folder / "sample_images")
    shutil.copy(REPO / "sample_images" / "cat.jpg", folder / "cat.jpg")
    model = _demo_model(compiled=False)
    model.save(folder / "model.keras")
    model.save(folder / "model.h5")
    model.export(str(folder / "saved_model_dir"), verbose=False)
    shapes = packaged_samples()
    for name in ("photos/a", "shots", "tests/images"):
        (folder / name).mkdir(parents=True)
    for path in shapes:
        shutil.copy(path, folder / "shots" / path.name)
        shutil.copy(path, folder / "tests" / "images" / path.name)
    shutil.copy(shapes[0], folder / "photos" / "a" / shapes[0].name)
    shutil.copy(shapes[1], folder / "photos" / shapes[1].name)
    shutil.copy(shapes[0], folder / "tests" / "images" / "circle.png")
    pixels, labels = _samples()
    np.save(folder / "tests" / "images" / "batch.npy", pixels.astype(np.float32))
    (folder / "tests" / "expected.csv").write_text(
        "image,class\n" + "".join(f"{p.name},{c}\n" for p, c in zip(shapes, labels, strict=True)))
    return folder


@pytest.fixture
def in_reader_folder(reader_folder, tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "work"
    shutil.copytree(reader_folder, folder, symlinks=True)
    monkeypatch.chdir(folder)
    return folder


def given_namespace(section: str) -> dict:
    """The names of :data:`GIVEN`, fresh for each section (fit() trains ``model``)."""
    from guidedbp.demo import make_shapes

    pixels, labels = _samples()
    x_train, _, y_train = make_shapes(12, seed=7)
    namespace = {
        "model": _demo_model(), "images": pixels.astype(np.float32),
        "x_train": x_train.astype(np.float32), "y_train": y_train,
        "x_val": pixels.astype(np.float32), "y_val": labels, "pictures": pixels,
    }
    if section == "Methods to compare with":
        import keras

        namespace["model"] = keras.applications.ResNet50(weights=None)
    return namespace


# -- the tests ----------------------------------------------------------------------------------


def test_the_readme_has_snippets_of_each_kind():
    assert _python_sections() and _shell_sections()
    assert "In a notebook" in _python_sections() and "Python API" in _python_sections()


def test_every_skip_and_stated_value_names_a_snippet_that_exists():
    texts = [s.code for s in SNIPPETS] + [c.text for s in SNIPPETS if s.language == "sh"
                                         for c in shell_commands(s)]
    stale = [marker for marker in SKIPPED if not any(marker in text for text in texts)]
    assert not stale, f"SKIPPED names no README snippet any more: {stale}"
    assert not set(STATED) - set(_python_sections()), "STATED names a section that is gone"


def test_shell_commands_are_parsed_as_a_shell_would():
    snippet = Snippet("s", "sh", "guidedbp explain m.keras 'a b/*.png' \\\n    -o out"
                                 "   # -> out/x.png, ...\n# a comment\n\nmake demo\n", 10)
    first, second = shell_commands(snippet)
    assert first.argv == ["guidedbp", "explain", "m.keras", "a b/*.png", "-o", "out"]
    assert (first.stated, first.line) == (["out/x.png"], 10)
    assert (second.argv, second.line) == (["make", "demo"], 14)


@pytest.mark.parametrize("section", _python_sections())
def test_python_blocks_of_the_section_run(section, in_reader_folder, request):
    blocks = [s for s in SNIPPETS if s.section == section and s.language == "python"]
    namespace = given_namespace(section)
    for block in blocks:
        test_file = re.match(r"# (tests/test_\w+\.py)\n", block.code)
        if test_file:
            _run_test_file(block, test_file[1], in_reader_folder,
                           request.getfixturevalue("pytester"))
            continue
        code = block.code
        if section == "In a notebook":  # keep the figure Jupyter would show
            code = code.replace("guidedbp.plot.plot(", "figure = guidedbp.plot.plot(")
        try:
            exec(compile(code, f"README.md:{block.line}", "exec"), namespace)
        except Exception as error:
            raise AssertionError(f"README.md line {block.line} ({section}): "
                                 f"{type(error).__name__}: {error}") from error
    namespace["np"] = np
    for expression in STATED.get(section, []):
        assert eval(expression, namespace), expression
    if "figure" in namespace:
        import matplotlib.pyplot as plt

        plt.close("all")


def _run_test_file(block: Snippet, name: str, folder: Path, pytester) -> None:
    """A reader's test file: the first run records its baselines (each test that uses
    ``saliency_regression`` fails saying so), the second passes."""
    tests = re.findall(r"^def (test_\w+)\((.*)\)", block.code, re.M)
    recording = [test for test, fixtures in tests if "saliency_regression" in fixtures]
    for path in folder.iterdir():
        shutil.move(str(path), pytester.path / path.name)
    (pytester.path / name).write_text(block.code)
    pytester.makeconftest("import pytest\n\n"
                          "@pytest.fixture\n"
                          "def my_model():\n"
                          "    import keras\n"
                          "    return keras.models.load_model('model.keras')\n")
    first = pytester.runpytest_inprocess("-p", "no:cacheprovider", name)
    first.assert_outcomes(passed=len(tests) - len(recording), failed=len(recording))
    second = pytester.runpytest_inprocess("-p", "no:cacheprovider", name)
    second.assert_outcomes(passed=len(tests))


@pytest.mark.parametrize("section", _shell_sections())
def test_guidedbp_commands_of_the_section_run(section, in_reader_folder):
    commands = [c for s in SNIPPETS if s.section == section and s.language == "sh"
                for c in shell_commands(s)
                if c.argv[:1] == ["guidedbp"] and not skip_reason(c.text)]
    for command in commands:
        result = run_cli(*command.argv[1:])
        assert result.exit_code == 0, (f"README.md line {command.line}: {command.text}",
                                       result.output, result.exception)
        for stated in command.stated:
            assert list(in_reader_folder.glob(stated)), \
                f"README.md line {command.line}: {command.text}: no {stated}"
