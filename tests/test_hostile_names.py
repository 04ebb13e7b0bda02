"""What a hostile user types, names or hands over (issue 39, items 20, 22, 23 and 24).

- A prompt that is no text (a command line's bytes that are not UTF-8, a lone surrogate)
  is refused when it is parsed, in one line (it exited 3, "internal error").
- A name printed to the terminal (an input's, OUT's, the model's) never carries a control
  character there raw: an escape sequence in a file name retitled the terminal.
- Two prompts share a file name only when they differ in letter case or punctuation alone
  (those in another script, or alike for their first 48 characters, were refused as if
  they did); a malformed ``metadata.json`` is said to be malformed.
- A keras-hub preset whose config asks for a huge image or vocabulary is refused before
  keras-hub builds (and allocates) it.
"""

from __future__ import annotations

import json
import shutil
import time
from importlib import resources

import pytest

from guidedbp.errors import ArgumentError
from guidedbp.pipeline.naming import target_slug
from guidedbp.pipeline.target_plan import PlannedTarget, _check_unique
from guidedbp.pipeline.target_specs import parse_target
from guidedbp.targets import Text

from . import zoo
from .helpers import assert_one_line_error, run_cli

ESCAPE = "\x1b]0;TITLE\x07"  # "set the terminal's title to TITLE"


# -- item 20: a prompt that is no text ------------------------------------------------------


@pytest.mark.parametrize(("prompt", "why"), [
    ("\udcffcat", "it holds a byte that is not UTF-8 (0xff)"),  # argv's b"\xffcat"
    ("\ud800cat", "it holds a lone surrogate (U+D800)"),
])
def test_a_prompt_that_is_no_text_is_a_usage_error_when_parsed(tmp_path, prompt, why):
    result = run_cli("explain", "demo", tmp_path / "a.png", "--target", f"text:{prompt}",
                     "-o", tmp_path / "out")
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    line = result.stderr.strip().splitlines()[-1]
    assert line == (f"Error: Invalid value for '--target': target {f'text:{prompt}'!r} is no "
                    f"text: {why}; give the prompt in UTF-8")
    assert not (tmp_path / "out").exists()


def test_the_library_refuses_a_prompt_that_is_no_text_in_one_line():
    with pytest.raises(ArgumentError) as caught:
        Text("\ud800cat")
    assert str(caught.value) == ("Text prompt '\\ud800cat' is no text: it holds a lone "
                                 "surrogate (U+D800)")
    with pytest.raises(ArgumentError, match=r"^Text contrast '\\udcffdog' is no text"):
        Text("a cat", contrast=["\udcffdog"])
    with pytest.raises(ArgumentError, match="is no text"):
        parse_target("text:a \udcff cat")


@pytest.mark.heavy
def test_a_preset_given_a_prompt_that_is_no_text_exits_2_not_3(tmp_path):
    pytest.importorskip("keras_hub")
    from PIL import Image

    Image.new("RGB", (32, 32)).save(tmp_path / "a.png")
    result = run_cli("explain", zoo.clip_preset(), tmp_path / "a.png", "--target",
                     "text:\udcffcat", "-o", tmp_path / "out")
    assert result.exit_code == 2 and "is no text" in result.stderr, result.output


# -- item 22: names printed to the terminal -------------------------------------------------


def test_an_escape_sequence_in_a_name_never_reaches_the_terminal_raw(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "photos").mkdir()
    (tmp_path / "photos" / f"{ESCAPE}.png").write_bytes(b"not a png")  # fails: named
    out = f"out{ESCAPE}"
    result = run_cli("explain", "demo", "photos", "-o", out, "--no-report", code=1)
    assert "\x1b" not in result.output and "\x07" not in result.output
    lines = result.stderr.splitlines()
    assert lines[0].endswith(f"in {out + '/'!r}"), lines[0]
    assert lines[1].startswith(f"  failed: {'photos/' + ESCAPE + '.png'!r}: "), lines[1]
    # A model's name: escaped in inspect's description, as in its error messages.
    model = tmp_path / f"m{ESCAPE}.keras"
    shutil.copy(resources.files("guidedbp.demo").joinpath("data", "shapes.keras"), model)
    text = run_cli("inspect", model, code=0).stdout
    assert "\x1b" not in text and text.splitlines()[0] == f"model       {str(model)!r} (keras)"


# -- item 23: prompts that collide, a malformed metadata.json --------------------------------


def test_prompts_share_a_file_name_only_when_they_differ_in_case_or_punctuation():
    assert target_slug("text", "A cat!") == target_slug("text", "a cat") == "text-a-cat"
    apart = [("猫の写真 cat", "犬の写真 cat"), ("une photo d'un chat", "une photo d'un chât"),
             ("a photo of " + "a very " * 6 + "big cat", "a photo of " + "a very " * 6 +
              "big dog")]
    for first, second in apart:
        slugs = target_slug("text", first), target_slug("text", second)
        assert slugs[0] != slugs[1] and all(len(slug) <= 64 for slug in slugs), slugs
        targets = tuple(PlannedTarget("text", f"text:{prompt}", slug=slug)
                        for prompt, slug in zip((first, second), slugs))
        _check_unique(targets)  # no clash
    same = tuple(PlannedTarget("text", f"text:{p}", slug=target_slug("text", p))
                 for p in ("A cat!", "a cat"))
    with pytest.raises(ArgumentError, match="their prompts differ only in letter case or "
                                            "punctuation"):
        _check_unique(same)


@pytest.mark.parametrize(("metadata", "why"), [
    ("{not json", "its metadata.json is malformed: Expecting property name"),
    ('["a list"]', "its metadata.json names no keras_hub_version"),
])
def test_a_malformed_metadata_json_is_named(tmp_path, metadata, why):
    folder = tmp_path / "preset"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "metadata.json").write_text(metadata)
    result = run_cli("inspect", folder)
    assert_one_line_error(result, f"{str(folder)!r} is not a keras-hub preset: {why}")


# -- item 24: a hostile preset config -------------------------------------------------------


@pytest.fixture(scope="module")
def clip_files():
    pytest.importorskip("keras_hub")
    return zoo.clip_preset()


def hostile_preset(tmp_path, source, change) -> str:
    folder = tmp_path / "hostile"
    shutil.copytree(source, folder)
    config = json.loads((folder / "config.json").read_text())
    change(config["config"])
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


@pytest.mark.parametrize(("change", "fragment"), [
    (lambda c: c["text_encoder"]["config"].update(vocabulary_size=2_000_000),
     "its config.json asks for a vocabulary of 2,000,000 tokens, more than guidedbp builds "
     "(1,048,576)"),
    (lambda c: c["vision_encoder"]["config"].update(image_shape=[65536, 65536, 3]),
     "its config.json asks for an image input of shape (65536, 65536, 3) (12,884,901,888 "
     "values), more than guidedbp traces (67,108,864"),
    (lambda c: c["text_encoder"]["config"].update(hidden_dim=40_000, intermediate_dim=40_000),
     "its config.json asks for a layer of intermediate_dim 40,000 by hidden_dim 40,000 "
     "(1,600,000,000 weights)"),
], ids=["vocabulary", "image", "widths"])
def test_a_preset_asking_for_too_much_is_refused_before_it_is_built(clip_files, tmp_path,
                                                                    change, fragment):
    folder = hostile_preset(tmp_path, clip_files, change)
    started = time.perf_counter()
    result = run_cli("inspect", folder)
    assert_one_line_error(result, f"cannot load the keras-hub preset {folder!r}: {fragment}",
                          "refused before building it")
    assert time.perf_counter() - started < 20


def test_the_tiny_preset_is_within_every_bound(clip_files):
    from guidedbp.models.presets import check_sizes

    check_sizes(str(clip_files))  # nothing raised
