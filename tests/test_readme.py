"""Every snippet of README.md and of the documentation pages (docs/**/*.md) runs, so that
none can drift from the code.

The ```python blocks of a section (a page's heading above them) run in order in one
namespace; the ``guidedbp`` commands of its ```sh blocks run in order through the command
line (in-process, click's runner) and must exit 0, and a ``# -> PATH, ...`` comment is
checked: each path (a glob; an ``s3://`` URL on the test's S3 server) must exist
afterwards. A block that starts with ``# tests/test_*.py`` is a test file of the reader's:
it is written there and run with pytest, twice (the first run records the baselines). A
```yaml or ```json block must parse. Other commands (``pip``, ``make``, ``pytest``,
``tensorboard``, ``moto_server``, a shell's completion set-up) set up the reader's machine
and are not run.

Everything runs in a copy of one folder that holds what the pages take as the reader's
own (:data:`GIVEN_FILES`), and the Python blocks start with :data:`GIVEN` defined. The
sections of :data:`ON_S3` run against moto's S3 server (the ``s3_server`` fixture), their
Python blocks first (they make the bucket), then their commands. :data:`SKIPPED` names,
page by page, the few snippets that cannot run here, each with its reason; a test checks
that each still names a snippet of its page. :data:`DRAWN` names the pictures of the
pages that a section's commands draw: they must still look the same.
"""

from __future__ import annotations

import hashlib
import re
import shlex
import shutil
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from guidedbp.demo import CLASS_NAMES
from guidedbp.demo.samples import packaged_samples
from tests import zoo
from tests.helpers import REPO, run_cli

pytest_plugins = ["pytester"]

README = REPO / "README.md"

#: The pages whose snippets run: the README, then every page of the documentation site.
PAGES = [README, *sorted((REPO / "docs").rglob("*.md"))]

#: Per page, snippets that cannot run here: a text each contains -> why. Each must name a
#: snippet of its page.
SKIPPED = {
    "docs/batch-runs.md": {
        "/data/": "paths on a cluster's shared volume (the commands above run the same here)",
    },
    "docs/detectors.md": {
        'name = "clip_vit_base_patch16"': "downloads keras-hub's CLIP; the block after it "
                                          "saves the same three objects of a local preset",
    },
    "docs/getting-started.md": {
        "guidedbp explain keras:ResNet50 sample_images/cat.jpg": "downloads ImageNet weights",
    },
    "docs/scaling.md": {
        "/data/": "paths on a cluster's shared volume, run by Ray, Slurm or Kubernetes",
        "s3://my-bucket/": "a reader's buckets and credentials; tests/test_store.py and "
                           "tests/test_store_hostile.py run these commands against moto's "
                           "S3 server, as the try-out on moto here does",
        "s3://photos/2024/": "a reader's MinIO and credentials",
    },
    "docs/metrics.md": {
        "guidedbp evaluate demo-silu --shapes 500": "minutes of work (make eval runs it); "
                                                    "tests/test_demo_silu.py evaluates 6 "
                                                    "shapes",
        "guidedbp evaluate demo-seg --shapes 200": "minutes of work (make eval runs it); "
                                                   "tests/test_demo_seg.py evaluates 4 shapes",
    },
}

#: Sections whose Python blocks take minutes: marked ``heavy`` (make test-all and CI run
#: them, make test does not): (page, heading) -> why.
HEAVY = {("docs/getting-started.md", "A model of your own on the shapes"):
         "trains a CNN for 165 CPU-seconds (the time the page states)"}

#: Sections whose snippets run against moto's S3 server: (page, heading).
ON_S3 = {("docs/scaling.md", "Try it locally on moto")}

#: Pictures of the pages that a section's commands draw: picture -> the output it shows.
#: After the commands ran, each must look like what they drew (regenerate it from there).
DRAWN = {f"docs/methods-{name}.png": f"{name}/star_0.png.panel.png"
         for name in ("gradients", "averaged", "cams", "more-cams", "blackbox")}
DRAWN["docs/detectors-panel.png"] = "dets/scenes/scene_0.png.det-2-star.panel.png"

#: What the pages' snippets take as the reader's own files, made in the folder they run in.
GIVEN_FILES = {
    "sample_images/": "a copy of the repository's",
    "model.keras, model.h5, saved_model_dir/": "the demo model, as a .keras file, an H5 file "
                                                "and a SavedModel (model.export)",
    "cat.jpg": "sample_images/cat.jpg",
    "clip-preset/": "a tiny keras-hub CLIP built from a config, saved as a preset folder "
                    "with its tokenizer (tests/zoo.py)",
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

#: After a section's Python blocks ran: what its page says of the values, as expressions.
STATED = {
    ("README.md", "Quick start (5 minutes)"): [
        "result.by_method['guided'].shape == images.shape",
        "result.by_method['guided'].dtype == np.float32",
        "list(result.targets) == list(y_val)",  # each shape's class
        "one.label == 'circle' and one.maps['guided'].shape == (96, 96, 3)",
    ],
    ("docs/getting-started.md", "In Python"): [
        "result.by_method['guided'].shape == images.shape",
        "list(result.targets) == list(y_val)",
        "one.label == 'circle' and 0.5 < one.probability <= 1",
    ],
    ("docs/python-api.md", "Python API"): [
        "maps.dtype == np.float32 and maps.shape == images.shape",
        "(summary.done, summary.failures, summary.exit_code) == (6, [], 0)",
        "result.label == 'circle' and result.maps['guided'].shape == (96, 96, 3)",
        "result.original_maps()['guided'].shape[:2] == result.image.shape[:2]",
    ],
    ("docs/python-api.md", "In a notebook"): ["type(figure).__name__ == 'Figure'"],
    ("docs/getting-started.md", "A model of your own on the shapes"): [
        "accuracy >= 0.93",  # the page says 0.952, "a point or two away" elsewhere
        "mine.count_params() < 120_000",
        "__import__('os').path.isfile('shapes_mine.keras')",
    ],
    ("docs/detectors.md", "Making a preset folder"): [
        "all(__import__('os').path.isfile(f'my-clip/{name}') for name in ('config.json', "
        "'model.weights.h5', 'tokenizer.json', 'image_converter.json'))",
        "mine.loaded.preprocess_source.startswith(\"the preset's image converter rescales raw "
        "0-255 pixels\")",
        "mine.text is not None and mine.text.tokenize is not None",
        "cat_result.maps['guided'].shape == (32, 32, 3)",
    ],
}


@dataclass(frozen=True)
class Snippet:
    section: str  # the heading above it
    language: str  # python, sh, yaml, or "" for plain text
    code: str
    line: int  # of its first code line in its page
    page: str = "README.md"  # relative to the repository

    @property
    def key(self) -> tuple[str, str]:
        return self.page, self.section

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def readme_snippets(text: str, page: str = "README.md") -> list[Snippet]:
    """The fenced blocks of a Markdown text, each with the heading above it. A fence is
    found at the start of a line only: a block indented into a list item is part of the
    item's text."""
    snippets, section, fence, body, start = [], "", None, [], 0
    for number, line in enumerate(text.splitlines(), 1):
        if fence is None:
            if line.startswith("```"):
                fence, body, start = line[3:].strip(), [], number + 1
            elif line.startswith("#"):
                section = line.lstrip("#").strip().strip("`")
        elif line.startswith("```"):
            snippets.append(Snippet(section, fence, "\n".join(body) + "\n", start, page))
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


def page_name(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


SNIPPETS = [snippet for path in PAGES
            for snippet in readme_snippets(path.read_text(encoding="utf-8"), page_name(path))]


def skip_reason(page: str, text: str) -> str | None:
    return next((why for marker, why in SKIPPED.get(page, {}).items() if marker in text), None)


def _commands(snippet: Snippet) -> list[ShellCommand]:
    """The ``guidedbp`` commands of a shell block that run here."""
    return [c for c in shell_commands(snippet)
            if c.argv[:1] == ["guidedbp"] and not skip_reason(snippet.page, c.text)]


def _python_sections() -> list[tuple[str, str]]:
    return list(dict.fromkeys(s.key for s in SNIPPETS if s.language == "python"
                              and not skip_reason(s.page, s.code) and s.key not in ON_S3))


def _shell_sections() -> list[tuple[str, str]]:
    return list(dict.fromkeys(s.key for s in SNIPPETS if s.language == "sh" and _commands(s)))


def _section_id(key: tuple[str, str]) -> str:
    return f"{key[0]}: {key[1]}"


# -- the reader's folder ----------------------------------------------------------------------


def _demo_file() -> Path:
    from guidedbp.demo.samples import PACKAGED_SAMPLES

    return PACKAGED_SAMPLES.with_name("shapes.keras")


def _demo_model(compiled: bool = True):
    import keras

    model = keras.models.load_model(_demo_file())
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
    # The demo model as .keras, .h5 and a SavedModel, saved once (tests/zoo.py).
    bundled = _demo_file()
    models = zoo.saved("demo", partial(_demo_model, compiled=False),
                       key=hashlib.sha256(bundled.read_bytes()).hexdigest())
    shutil.copy(models["keras"], folder / "model.keras")
    shutil.copy(models["h5"], folder / "model.h5")
    shutil.copytree(models["savedmodel"], folder / "saved_model_dir")
    shutil.copytree(zoo.clip_preset(), folder / "clip-preset")
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


def test_the_pages_have_snippets_of_each_kind():
    assert {page_name(path) for path in PAGES} >= {"README.md", "docs/methods.md",
                                                   "docs/python-api.md", "docs/scaling.md"}
    python, shell = _python_sections(), _shell_sections()
    assert ("README.md", "Quick start (5 minutes)") in python
    assert ("README.md", "Quick start (5 minutes)") in shell
    assert {("docs/python-api.md", "In a notebook"), ("docs/python-api.md", "Python API"),
            ("docs/ci.md", "In your own pytest suite")} <= set(python)
    assert ON_S3 <= set(shell)


def test_every_skip_and_stated_value_names_a_snippet_that_exists():
    stale = []
    for page, markers in SKIPPED.items():
        texts = [s.code for s in SNIPPETS if s.page == page] + [
            c.text for s in SNIPPETS if s.page == page and s.language == "sh"
            for c in shell_commands(s)]
        stale += [f"{page}: {marker}" for marker in markers
                  if not any(marker in text for text in texts)]
    assert not stale, f"SKIPPED names no snippet of its page any more: {stale}"
    assert not set(STATED) - set(_python_sections()), "STATED names a section that is gone"
    assert not ON_S3 - set(_shell_sections()), "ON_S3 names a section that is gone"
    assert not set(HEAVY) - set(_python_sections()), "HEAVY names a section that is gone"
    stated = {path for s in SNIPPETS if s.language == "sh" for c in _commands(s)
              for path in c.stated}
    assert set(DRAWN.values()) <= stated, "DRAWN names an output no command states"
    assert all((REPO / picture).is_file() for picture in DRAWN)


@pytest.mark.parametrize("language", ["yaml", "json"])
def test_configuration_blocks_parse(language):
    """The pages' CI, Kubernetes and manifest examples are well-formed (they cannot run),
    those indented into a list item too."""
    import json
    import textwrap

    import yaml

    blocks = [(page_name(path), block) for path in PAGES for block in re.findall(
        rf"^([ \t]*)```{language}\n(.*?)^\1```", path.read_text(encoding="utf-8"),
        re.M | re.S)]
    assert blocks
    for page, (_, code) in blocks:
        code = textwrap.dedent(code)
        try:
            yaml.safe_load(code) if language == "yaml" else json.loads(code)
        except ValueError as error:  # yaml.YAMLError and json.JSONDecodeError are ValueErrors
            raise AssertionError(f"{page}: {error}") from error


def test_shell_commands_are_parsed_as_a_shell_would():
    snippet = Snippet("s", "sh", "guidedbp explain m.keras 'a b/*.png' \\\n    -o out"
                                 "   # -> out/x.png, ...\n# a comment\n\nmake demo\n", 10)
    first, second = shell_commands(snippet)
    assert first.argv == ["guidedbp", "explain", "m.keras", "a b/*.png", "-o", "out"]
    assert (first.stated, first.line) == (["out/x.png"], 10)
    assert (second.argv, second.line) == (["make", "demo"], 14)


@pytest.mark.parametrize("key", [pytest.param(key, marks=pytest.mark.heavy) if key in HEAVY
                                 else key for key in _python_sections()], ids=_section_id)
def test_python_blocks_of_the_section_run(key, in_reader_folder, request):
    namespace = _run_python_blocks(key, in_reader_folder, request)
    namespace["np"] = np
    for expression in STATED.get(key, []):
        assert eval(expression, namespace), f"{_section_id(key)}: {expression}"
    if "figure" in namespace:
        import matplotlib.pyplot as plt

        plt.close("all")


def _run_python_blocks(key: tuple[str, str], folder: Path, request) -> dict:
    """Run the section's Python blocks in order, in one namespace; returns it."""
    page, section = key
    blocks = [s for s in SNIPPETS if s.key == key and s.language == "python"
              and not skip_reason(page, s.code)]
    namespace = given_namespace(section)
    for block in blocks:
        test_file = re.match(r"# (tests/test_\w+\.py)\n", block.code)
        if test_file:
            _run_test_file(block, test_file[1], folder, request.getfixturevalue("pytester"))
            continue
        code = block.code
        if section == "In a notebook":  # keep the figure Jupyter would show
            code = code.replace("guidedbp.plot.plot(", "figure = guidedbp.plot.plot(")
        try:
            exec(compile(code, block.where, "exec"), namespace)
        except Exception as error:
            raise AssertionError(f"{block.where} ({section}): "
                                 f"{type(error).__name__}: {error}") from error
    return namespace


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


@pytest.mark.parametrize("key", _shell_sections(), ids=_section_id)
def test_guidedbp_commands_of_the_section_run(key, in_reader_folder, request):
    page = key[0]
    if key in ON_S3:  # the server, then the section's Python blocks: they make the bucket
        request.getfixturevalue("s3_server")
        _run_python_blocks(key, in_reader_folder, request)
    commands = [c for s in SNIPPETS if s.key == key and s.language == "sh"
                for c in _commands(s)]
    for command in commands:
        where = f"{page}:{command.line}: {command.text}"
        result = run_cli(*command.argv[1:])
        assert result.exit_code == 0, (where, result.output, result.exception)
        for stated in command.stated:
            assert _exists(stated, in_reader_folder), f"{where}: no {stated}"
    for picture, output in DRAWN.items():
        if any(output in c.stated for c in commands):
            _assert_looks_the_same(REPO / picture, in_reader_folder / output)


def _exists(stated: str, folder: Path) -> bool:
    """Whether a stated output exists: a glob below the folder, or of an ``s3://`` URL."""
    if stated.startswith("s3://"):
        from tests import s3server

        return bool(s3server.filesystem().glob(stated.removeprefix("s3://")))
    return bool(list(folder.glob(stated)))


def _assert_looks_the_same(picture: Path, drawn: Path) -> None:
    """A page's picture against what its command drew now: the same size, and all but a
    few pixels within 3 levels (another CPU may round a gradient differently)."""
    from PIL import Image

    shown = np.asarray(Image.open(picture).convert("RGB"), dtype=np.int16)
    now = np.asarray(Image.open(drawn).convert("RGB"), dtype=np.int16)
    how = f"{picture.relative_to(REPO)} is not what its command draws now (copy {drawn.name} " \
          f"of that command's output over it)"
    assert shown.shape == now.shape, (how, shown.shape, now.shape)
    assert np.mean(np.abs(shown - now) > 3) < 0.01, how
