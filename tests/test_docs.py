"""The README and the documentation site: their shape, their links, and the generated parts.

``make docs`` builds the site with ``mkdocs build --strict`` (its own extra, not the test
dependencies); these tests check without MkDocs what that build cannot see or what must
hold before it: the README's links (GitHub shows the README, MkDocs never builds it),
every page in the navigation, the command line page's help equal to the commands' own,
every public name on a reference page, and the docstring markup hook. The code blocks of
every page run in tests/test_readme.py.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from tests.helpers import REPO, run_cli

DOCS = REPO / "docs"
README = REPO / "README.md"
PAGES = [README, *sorted(DOCS.rglob("*.md"))]


def _hook(name: str):
    """A module of docs/hooks/, imported from its file as MkDocs does."""
    path = DOCS / "hooks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"docs_hook_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _without_fences(text: str) -> str:
    """Markdown text without its fenced blocks (indented ones too)."""
    return re.sub(r"^([ \t]*)```.*?^\1```", "", text, flags=re.M | re.S)


def _without_code(text: str) -> str:
    """Markdown text without its fenced blocks and inline code spans."""
    return re.sub(r"`[^`\n]*`", "", _without_fences(text))


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it (and the site: mkdocs.yml's slugify)."""
    text = re.sub(r"<[^>]+>", "", heading.replace("`", "")).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = _without_fences(page.read_text(encoding="utf-8"))
    return ({_slug(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}
            | set(re.findall(r'<a id="([^"]+)">', text)))


# -- the README ------------------------------------------------------------------------------


def test_the_readme_is_short_and_starts_with_the_two_commands():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    first_block = re.search(r"^```(\w*)\n(.*?)^```", text, re.M | re.S)
    assert first_block[1] == "sh"
    commands = [line.split("#")[0].strip() for line in first_block[2].splitlines()]
    assert commands == ["make demo", "make test"]
    assert text.index(first_block[0]) < text.index("\n## ")  # before any section


#: What `make demo` prints last, and what the README and Getting started say before their
#: first `guidedbp` command: the command lives in the clone's venv.
WHERE_THE_COMMAND_IS = (".venv/bin/guidedbp", ". .venv/bin/activate")


def test_make_demo_says_where_the_command_is():
    """`make demo` installs into .venv/: a bare `guidedbp` is "command not found" until
    the venv is activated, so its last line says how (make -n prints the recipe)."""
    import subprocess

    # Under `make test`, a make of its own prints "Leaving directory" after the recipe.
    done = subprocess.run(["make", "--no-print-directory", "-n", "demo"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("echo ") and all(words in last for words in WHERE_THE_COMMAND_IS), \
        last


@pytest.mark.parametrize("page", [README, DOCS / "getting-started.md"], ids=lambda p: p.name)
def test_the_first_guidedbp_command_says_where_it_is(page):
    text = page.read_text(encoding="utf-8")
    first = re.search(r"^guidedbp ", text, re.M)
    assert first, f"{page.name} has no guidedbp command"
    before = text[:first.start()]
    missing = [words for words in WHERE_THE_COMMAND_IS if words not in before]
    assert not missing, f"{page.name} names {missing} only after its first guidedbp command"


def test_the_readme_links_every_top_level_page():
    linked = set(re.findall(r"\]\(docs/([\w-]+\.md)", README.read_text(encoding="utf-8")))
    assert linked >= {page.name for page in DOCS.glob("*.md")} - {"index.md"}


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(REPO).as_posix())
def test_relative_links_and_anchors_resolve(page):
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", _without_code(page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
            broken.append(f"{target}: no heading #{anchor}")
    assert not broken, broken


def test_the_anchor_rule_is_githubs():
    assert _slug("Every activation: the generalised rule (`--guide all|relu`)") == \
        "every-activation-the-generalised-rule---guide-allrelu"
    assert _slug("Gradient×Input, SquareGrad, VarGrad and the newer CAMs") == \
        "gradientinput-squaregrad-vargrad-and-the-newer-cams"


# -- the site --------------------------------------------------------------------------------


def _nav_pages() -> set[str]:
    import yaml

    class Loader(yaml.SafeLoader):  # mkdocs.yml names a Python function (the slugify)
        pass

    Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda *_: None)
    config = yaml.load((REPO / "mkdocs.yml").read_text(encoding="utf-8"), Loader=Loader)

    def walk(entries) -> list[str]:
        found = []
        for entry in entries:
            values = entry.values() if isinstance(entry, dict) else [entry]
            for value in values:
                found += walk(value) if isinstance(value, list) else [value]
        return found

    assert config["docs_dir"] == "docs"
    return set(walk(config["nav"]))


def test_every_page_is_in_the_navigation_and_every_entry_is_a_page():
    pages = {page.relative_to(DOCS).as_posix() for page in DOCS.rglob("*.md")
             if "hooks" not in page.parts}
    assert _nav_pages() == pages


def test_the_command_line_page_shows_each_commands_own_help():
    """docs/cli.md is committed with each command's help in it (GitHub shows the file as
    it is): the text must be what the command prints now."""
    from guidedbp.cli import COMMANDS

    hook = _hook("cli_help")
    page = (DOCS / "cli.md").read_text(encoding="utf-8")
    markers = [name for name, _ in hook.MARKER.findall(page)]
    assert sorted(markers) == sorted(["guidedbp", *COMMANDS])
    stale = []
    for name in markers:
        argv = ["--help"] if name == "guidedbp" else [name, "--help"]
        shown = run_cli(*argv, code=0, prog_name="guidedbp", terminal_width=hook.WIDTH).stdout
        assert hook.help_text(name) + "\n" == shown, name
        if f"<!-- click: {name} -->\n```text\n{shown}```\n" not in page:
            stale.append(name)
    assert not stale, f"docs/cli.md shows an old --help of {stale}: run make docs-cli"
    assert hook.replace_markers(page) == page
    with pytest.raises(Exception, match="guidedbp has no command 'explian'"):
        hook.replace_markers("<!-- click: explian -->")


def test_the_help_block_of_the_command_line_page_is_written_again(tmp_path):
    hook = _hook("cli_help")
    stale = "<!-- click: merge-manifests -->\n```text\nUsage: guidedbp merge-manifests OLD\n```\n"
    fresh = f"<!-- click: merge-manifests -->\n```text\n{hook.help_text('merge-manifests')}\n```\n"
    assert hook.replace_markers(stale) == fresh
    assert hook.replace_markers("<!-- click: merge-manifests -->\n") == fresh


def test_the_help_names_every_bundled_model_and_model_kind():
    import doctest

    from guidedbp.models import bundled
    from guidedbp.models.bundled import BUNDLED
    from guidedbp.models.loading import DEMO_SPECS

    assert doctest.testmod(bundled).failed == 0

    def bare(text: str) -> str:  # click wraps lines at spaces and after hyphens
        return re.sub(r"\s+", "", text)

    shown = bare(run_cli("--help", code=0, prog_name="guidedbp").stdout)
    assert DEMO_SPECS == {model.spec: model.stem for model in BUNDLED}
    missing = [model.spec for model in BUNDLED if bare(f"{model.spec}: {model.what}") not in shown]
    assert not missing, f"guidedbp --help does not name {missing}"
    for kind in (".keras or .h5 file", "SavedModel folder", "keras-hub preset folder",
                 "keras:NAME"):
        assert bare(kind) in shown


def _directives() -> set[str]:
    return {name for page in (DOCS / "reference").glob("*.md")
            for name in re.findall(r"^::: ([\w.]+)$", page.read_text(encoding="utf-8"), re.M)}


def test_every_public_name_has_a_reference_entry():
    import guidedbp

    directives = _directives()
    missing = []
    for name in guidedbp.__all__:
        if name == "__version__":
            continue
        value = getattr(guidedbp, name)
        if name in ("targets", "plot", "checks"):  # public submodules
            module = value.__name__
        else:  # METHODS, a tuple, is the method registry's
            module = "guidedbp.engine.methods.registry" if name == "METHODS" else value.__module__
        if f"{module}.{name}" not in directives and module not in directives:
            missing.append(f"{name} ({module})")
    for dotted in ("guidedbp.keras.SaliencyCallback", "guidedbp.pytest_plugin"):
        if dotted not in directives:
            missing.append(dotted)
    # the demo's data, which Getting started trains a model on
    import guidedbp.demo

    missing += [f"guidedbp.demo.{name}" for name in guidedbp.demo.__all__
                if not any(entry.startswith("guidedbp.demo.") and entry.endswith(f".{name}")
                           for entry in directives)]
    assert not missing, f"no ::: entry in docs/reference/ for {missing}"


#: The command line's rule for what pixels a model takes (``--preprocess``'s help), which
#: the Python API's docstrings and pages say in the same words.
PIXEL_RULE = "raw 0-255 pixels, for models with a Rescaling layer inside"


def _plain(text: str) -> str:
    """Text as the rule is compared: no code marks, ASCII dashes, single spaces."""
    return " ".join(text.replace("`", "").replace("\u2013", "-").split())


def test_the_python_api_says_what_pixels_go_in_as_the_command_line_does():
    """"Preprocessed" alone left a reader with a Rescaling model unsure: raw 0-255 it is."""
    import guidedbp
    from guidedbp.engine import explainer as engine

    places = {
        "explain --help": run_cli("explain", "--help", code=0, terminal_width=200).stdout,
        "guidedbp.Explainer": guidedbp.Explainer.__doc__,
        "guidedbp.engine.explainer.Explainer": engine.Explainer.__doc__,
        **{page.relative_to(REPO).as_posix(): page.read_text(encoding="utf-8")
           for page in (README, DOCS / "python-api.md", DOCS / "getting-started.md")},
    }
    missing = [where for where, text in places.items() if PIXEL_RULE not in _plain(text)]
    assert not missing, f"{missing} do not say {PIXEL_RULE!r}"


def test_the_reference_index_names_every_public_name_and_target():
    """The index's table: every name ``import guidedbp`` gives, and every target class."""
    import guidedbp
    import guidedbp.targets

    rows = [row.split(" | ") for row in re.findall(r"^\| (.+) \|$",
                                                    (DOCS / "reference" / "index.md").read_text(
                                                        encoding="utf-8"), re.M)]
    names = {name for row in rows for name in re.findall(r"`guidedbp\.(\w+)", row[0])}
    missing = [name for name in guidedbp.__all__ if name != "__version__" and name not in names]
    assert not missing, f"docs/reference/index.md's table does not name {missing}"
    targets = next(row[1] for row in rows if row[0] == "`guidedbp.targets`")
    missing = [name for name in guidedbp.targets.__all__ if f"`{name}`" not in targets]
    assert not missing, f"the targets row of docs/reference/index.md lacks {missing}"


# -- the docstring markup of the API reference -----------------------------------------------


def test_doctests_are_fenced_at_their_indentation():
    hook = _hook("doctests")
    text = "Intro.\n    >>> x = [1,\n    ...      2]\n    >>> x\n    [1, 2]\n\nAfter."
    assert hook.fence_doctests(text) == (
        "Intro.\n\n    ```pycon\n    >>> x = [1,\n    ...      2]\n    >>> x\n    [1, 2]\n"
        "    ```\n\nAfter.")
    assert hook.fence_doctests("No doctest: a > b.") == "No doctest: a > b."


def test_sphinx_roles_become_code_and_shared_entries_split():
    hook = _hook("doctests")
    assert hook.convert("See :class:`~guidedbp.targets.Region` and :func:`plot`.") == \
        "See `Region` and `plot`."
    assert hook.convert(":mod:`guidedbp.caveats`, :meth:`.caveats_of`") == \
        "`guidedbp.caveats`, `caveats_of`"
    text = ("Draw.\n\nArgs:\n    a, b: As for plot,\n        both.\n    c: C.\n\n"
            "Returns:\n    x, y: a pair.")
    assert hook.convert(text) == (
        "Draw.\n\nArgs:\n    a: As for plot,\n        both.\n    b: As for plot,\n"
        "        both.\n    c: C.\n\nReturns:\n    x, y: a pair.")
