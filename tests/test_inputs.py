"""guidedbp.io.inputs.collect_inputs: which files a run explains, in what order, named how."""

from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from guidedbp.io.inputs import InputError, collect_inputs, output_stem
from guidedbp.io.write import encode_png

from .imagetree import make_tree

# Everything make_tree writes that is an image by extension, in walk order: a folder's
# files by name (code-point order: upper case first), then its subfolders by name.
TREE_ORDER = [
    "top.png",
    "a/cat.jpg",
    "b/cat.jpg",
    "b/deep/er/gray.png",
    "bad/corrupt.png",
    "bad/empty.jpg",
    "bad/text.jpg",
    "bad/truncated.jpg",
    "bad/truncated.png",
    "formats/big.TIFF",
    "formats/photo.jpeg",
    "formats/pic.bmp",
    "formats/pic.webp",
    "formats/scan.tif",
    "mixed/UPPER.JPG",
    "mixed/cat.jpg",
    "mixed/cat.png",
    "mixed/cmyk.jpg",
    "mixed/palette.gif",
    "mixed/rgba.png",
    "mixed/sixteen.png",
]


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return make_tree(tmp_path_factory.mktemp("inputs") / "tree")


def _relative(collected, root) -> list[str]:
    return [Path(os.path.relpath(item.path, root)).as_posix() for item in collected.items]


def _stems(collected) -> list[str]:
    return [item.output_stem for item in collected.items]


def _png(own: bool) -> bytes:
    if own:
        return encode_png(np.zeros((2, 2), np.uint8))
    buffer = io.BytesIO()
    Image.fromarray(np.zeros((2, 2), np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def _touch(path: Path, data: bytes = b"x") -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return str(path)


# -- folders ------------------------------------------------------------------------------


def test_folder_is_walked_recursively_in_a_stable_order(tree):
    collected = collect_inputs([str(tree.root)])
    assert _relative(collected, tree.root) == TREE_ORDER
    assert sorted(TREE_ORDER) == sorted([*tree.good, *tree.bad])  # every image-named file
    assert collected.passed_over == 2  # notes.txt, b/readme.md


def test_folder_outputs_sit_at_the_paths_as_named(tree, monkeypatch):
    monkeypatch.chdir(tree.root.parent)
    collected = collect_inputs(["tree"])
    stems = dict(zip(_relative(collected, "tree"), _stems(collected)))
    assert stems["top.png"] == "tree/top.png"
    assert stems["b/deep/er/gray.png"] == "tree/b/deep/er/gray.png"
    assert stems["mixed/cat.jpg"] == "tree/mixed/cat.jpg"  # the extension keeps them apart
    assert stems["mixed/cat.png"] == "tree/mixed/cat.png"
    assert len({stem.lower() for stem in stems.values()}) == len(stems)
    # The same folder named absolutely from inside the current folder: the same stems.
    assert _stems(collect_inputs([str(tree.root)])) == list(stems.values())
    # And every item knows its path below the folder it was found in.
    assert [item.relative for item in collected.items] == list(stems)


def test_no_recursive_takes_the_top_folder_only(tree):
    collected = collect_inputs([str(tree.root)], recursive=False)
    assert _relative(collected, tree.root) == ["top.png"]
    assert collected.passed_over == 1  # notes.txt; b/readme.md is not visited


def test_hidden_files_and_folders_are_skipped_and_counted(tmp_path):
    _touch(tmp_path / "shown.png")
    _touch(tmp_path / ".hidden.png")
    _touch(tmp_path / "..photo.jpg")  # hidden too, as `ls` and the shell's * see it
    _touch(tmp_path / ".shown.png.1234.abcd.tmp")  # what a killed run may leave behind
    _touch(tmp_path / ".cache" / "inside.png")
    _touch(tmp_path / "sub" / ".DS_Store")
    collected = collect_inputs([str(tmp_path)])
    assert _relative(collected, tmp_path) == ["shown.png"]
    assert collected.passed_over == 0
    assert collected.hidden == 3  # .hidden.png, ..photo.jpg and .cache: said, not silent
    # Named directly, a hidden file is the user's choice: it is taken.
    assert _stems(collect_inputs([str(tmp_path / "..photo.jpg")])) == ["..photo.jpg"]


def test_arguments_keep_their_order_and_stems_do_not_depend_on_each_other(tree, monkeypatch):
    monkeypatch.chdir(tree.root)
    both = collect_inputs(["mixed", "a"])
    assert _relative(both, ".")[:1] == ["mixed/UPPER.JPG"]
    assert _relative(both, ".")[-1] == "a/cat.jpg"
    assert _stems(both)[0] == "mixed/UPPER.JPG" and _stems(both)[-1] == "a/cat.jpg"
    # An input's stem is the same whatever else the run names.
    alone = {item.path: item.output_stem for item in collect_inputs(["a"]).items}
    assert all(dict(zip([i.path for i in both.items], _stems(both)))[path] == stem
               for path, stem in alone.items())


# -- files -----------------------------------------------------------------------------------


def test_one_file_is_named_after_itself(tree):
    collected = collect_inputs([tree.path("b/deep/er/gray.png")])
    assert [item.path for item in collected.items] == [tree.path("b/deep/er/gray.png")]
    assert _stems(collected) == [output_stem(tree.path("b/deep/er/gray.png"))]
    assert collected.items[0].relative == "gray.png"


def test_same_name_in_two_folders_never_collides(tree, monkeypatch):
    monkeypatch.chdir(tree.root)
    # Two files named directly go under their own names: the same name is refused,
    # naming both, rather than one overwriting the other.
    with pytest.raises(InputError) as caught:
        collect_inputs(["a/cat.jpg", "b/cat.jpg"])
    assert str(caught.value).startswith(
        "inputs 'a/cat.jpg' and 'b/cat.jpg' would both write their maps under 'cat.jpg'")
    # A caller that writes nothing at the stems (check) may take both.
    assert _stems(collect_inputs(["a/cat.jpg", "b/cat.jpg"], unique_names=False)) == [
        "cat.jpg", "cat.jpg"]
    # Different names side by side, and one file or folder named twice, are fine.
    assert _stems(collect_inputs(["a/cat.jpg", "mixed/cat.png", "a/cat.jpg"])) == [
        "cat.jpg", "cat.png"]
    assert _stems(collect_inputs(["a", "a/cat.jpg", "../tree/a/"])) == ["a/cat.jpg"]


def test_two_folders_of_one_name_are_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _touch(tmp_path / "x" / "photos" / "cat.png")
    _touch(tmp_path / "y" / "photos" / "dog.png")  # no file name in common: still one name
    _touch(tmp_path / "z" / "PHOTOS" / "w.png")
    _touch(tmp_path / "here" / "photos" / "v.png")
    with pytest.raises(InputError, match="'x/photos' and 'y/photos' would both write their "
                                         "maps under 'photos'"):
        collect_inputs(["x/photos", "y/photos"])
    with pytest.raises(InputError, match="'x/photos' and 'z/PHOTOS'"):  # any letter case
        collect_inputs(["x/photos", "z/PHOTOS"])
    # A nameless argument ('.', '..') puts its files straight under OUT, each at its path
    # below it: its subfolder 'photos' takes the name too.
    monkeypatch.chdir(tmp_path / "here")
    assert _stems(collect_inputs(["."])) == ["photos/v.png"]
    with pytest.raises(InputError, match="'.' and '../x/photos' would both .* 'photos'"):
        collect_inputs([".", "../x/photos"])
    with pytest.raises(InputError, match="'../x/photos' and '.' would both .* 'photos'"):
        collect_inputs(["../x/photos", "."])
    assert _stems(collect_inputs(["..", "../x/photos"])) == [
        "here/photos/v.png", "x/photos/cat.png", "y/photos/dog.png", "z/PHOTOS/w.png"]


def test_named_file_of_any_extension_is_taken(tree):
    # A named file is the user's choice: it is explained or fails, never passed over.
    collected = collect_inputs([tree.path("notes.txt"), tree.path("bad/empty.jpg")])
    assert _relative(collected, tree.root) == ["notes.txt", "bad/empty.jpg"]
    assert collected.passed_over == 0


def test_same_file_given_twice_is_explained_once(tree):
    spelled_again = os.path.join(tree.path("a"), "..", "a", "cat.jpg")
    collected = collect_inputs([tree.path("a/cat.jpg"), spelled_again, tree.path("a")])
    assert [item.path for item in collected.items] == [tree.path("a/cat.jpg")]
    assert _stems(collected) == ["cat.jpg"]


def test_symlink_to_a_file_already_taken_is_dropped(tmp_path):
    real = _touch(tmp_path / "photos" / "cat.png")
    os.symlink(real, tmp_path / "photos" / "link.png")
    collected = collect_inputs([str(tmp_path / "photos")])
    assert _relative(collected, tmp_path / "photos") == ["cat.png"]


def test_missing_input_is_an_error_naming_it(tmp_path):
    missing = str(tmp_path / "nope.jpg")
    with pytest.raises(InputError, match="nope.jpg") as caught:
        collect_inputs([str(tmp_path), missing])
    assert "\n" not in str(caught.value)


def test_folder_without_images_gives_no_items(tmp_path):
    _touch(tmp_path / "a.txt")
    _touch(tmp_path / "b" / "c.csv")
    collected = collect_inputs([str(tmp_path)])
    assert collected.items == []
    assert collected.passed_over == 2


# -- globs -------------------------------------------------------------------------------------


def test_glob_names_outputs_as_the_folder_would(tree, monkeypatch):
    monkeypatch.chdir(tree.root.parent)
    collected = collect_inputs(["tree/*/cat.*"])
    assert _relative(collected, "tree") == [
        "a/cat.jpg", "b/cat.jpg", "mixed/cat.jpg", "mixed/cat.png"]
    assert _stems(collected) == ["tree/a/cat.jpg", "tree/b/cat.jpg", "tree/mixed/cat.jpg",
                                 "tree/mixed/cat.png"]
    assert [item.relative for item in collected.items] == _relative(collected, "tree")
    by_folder = {i.path: i.output_stem for i in collect_inputs(["tree"]).items}
    assert all(by_folder[i.path] == i.output_stem for i in collected.items)


def test_absolute_and_dotdot_inputs_read_naturally(tree, monkeypatch):
    # Each argument under its own last component: no %2F, no %2E%2E.
    monkeypatch.chdir(tree.root / "b")
    assert _stems(collect_inputs([str(tree.root / "a")])) == ["a/cat.jpg"]
    assert _stems(collect_inputs(["../a/cat.jpg"])) == ["cat.jpg"]
    assert _stems(collect_inputs([f"{tree.root}/*/cat.*"]))[:2] == ["tree/a/cat.jpg",
                                                                    "tree/b/cat.jpg"]
    assert _stems(collect_inputs(["../mixed/*.png"])) == [
        "mixed/cat.png", "mixed/rgba.png", "mixed/sixteen.png"]
    assert _stems(collect_inputs(["*/../../a/*.jpg"])) == ["a/cat.jpg"]  # normalised first
    assert _stems(collect_inputs(["../b/deep/../../top.png"])) == ["top.png"]


def test_double_star_glob_reaches_every_depth(tree):
    collected = collect_inputs([f"{tree.root}/**/*.png"])
    assert _relative(collected, tree.root) == sorted(
        path for path in TREE_ORDER if path.endswith(".png"))
    assert "top.png" in _relative(collected, tree.root)  # ** matches no folder too
    assert "b/deep/er/gray.png" in _relative(collected, tree.root)


def test_double_star_without_recursion_is_one_level(tree):
    collected = collect_inputs([f"{tree.root}/**/*.png"], recursive=False)
    assert _relative(collected, tree.root) == [
        "bad/corrupt.png", "bad/truncated.png", "mixed/cat.png", "mixed/rgba.png",
        "mixed/sixteen.png"]


def test_glob_counts_the_other_files_it_matches(tree):
    collected = collect_inputs([f"{tree.root}/**/*"])
    assert sorted(_relative(collected, tree.root)) == sorted(TREE_ORDER)
    assert collected.passed_over == 2  # folders matched by ** are not counted


def test_glob_matching_nothing_is_an_error(tree):
    with pytest.raises(InputError, match=r"\*\.heic"):
        collect_inputs([f"{tree.root}/*.heic"])


# -- the output folder -----------------------------------------------------------------------


def test_output_folder_inside_an_input_is_not_walked(tmp_path):
    _touch(tmp_path / "photos" / "cat.png")
    _touch(tmp_path / "photos" / "maps" / "cat.guided.color.png")
    _touch(tmp_path / "photos" / "maps" / "manifest.jsonl")
    collected = collect_inputs([str(tmp_path / "photos")], exclude=tmp_path / "photos" / "maps")
    assert _relative(collected, tmp_path / "photos") == ["cat.png"]
    assert collected.passed_over == 0
    # Spelled differently (relative, with ..), it is still the same folder.
    here = os.getcwd()
    try:
        os.chdir(tmp_path)
        collected = collect_inputs(["photos"], exclude="photos/../photos/maps")
    finally:
        os.chdir(here)
    assert [item.path for item in collected.items] == [os.path.join("photos", "cat.png")]


def test_output_folder_inside_a_glob_is_not_taken(tmp_path):
    _touch(tmp_path / "photos" / "cat.png")
    _touch(tmp_path / "photos" / "maps" / "cat.guided.color.png")
    _touch(tmp_path / "photos" / "maps" / "sub" / "cat.guided.gray.png")
    collected = collect_inputs(
        [f"{tmp_path}/photos/**/*.png"], exclude=tmp_path / "photos" / "maps")
    assert _relative(collected, tmp_path / "photos") == ["cat.png"]


def test_maps_written_into_an_input_folder_are_not_taken(tmp_path):
    # OUT is the input folder itself: its images stay inputs, the PNGs guidedbp wrote
    # (they carry its mark) do not, whatever their names; a user's own image named
    # like an output stays an input.
    photos = tmp_path / "photos"
    for name in ["cat.png", "holiday.guided.png", "cat.2-bird.vanilla.color.png"]:
        _touch(photos / name, _png(own=False))
    for name in ["cat.png.guided.color.png", "cat.png.2-bird.vanilla.panel.png",
                 "sub/dog.jpg.deconvnet.gray.png", "cat.png.panel.png"]:
        _touch(photos / name, _png(own=True))
    for name in ["cat.png.guided.npy", "manifest.jsonl"]:
        _touch(photos / name)
    users = ["cat.2-bird.vanilla.color.png", "cat.png", "holiday.guided.png"]
    collected = collect_inputs([str(photos)], exclude=photos)
    assert _relative(collected, photos) == users
    assert collected.passed_over == 2  # the .npy and manifest.jsonl: not images
    collected = collect_inputs([f"{photos}/**/*.png"], exclude=photos)
    assert _relative(collected, photos) == users
    # Outside the output folder guidedbp's PNGs are ordinary images.
    collected = collect_inputs([str(photos)], exclude=tmp_path / "maps")
    assert len(collected.items) == 7


# -- names never collide -----------------------------------------------------------------------


def test_stems_keep_the_extension_and_never_collide(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    names = ["cat.jpg", "cat.png", "cat_jpg.png", "Cat_png.bmp", "100%.png"]
    for name in names:
        _touch(tmp_path / name)
    assert _stems(collect_inputs(names)) == ["cat.jpg", "cat.png", "cat_jpg.png",
                                             "Cat_png.bmp", "100%.png"]


def test_stems_stay_inside_out_and_fit_the_file_system(tmp_path, monkeypatch):
    inside = tmp_path / "here"
    inside.mkdir()
    monkeypatch.chdir(inside)
    _touch(tmp_path / "up.png")
    long_name = "x" * 240 + ".png"
    _touch(inside / long_name)
    assert output_stem("../up.png") == "up.png"
    assert output_stem(str(tmp_path / "up.png")) == "up.png"
    assert output_stem("a/./b/../c.png") == "c.png"
    assert output_stem("a/./b/../c.png", "a/.") == "a/c.png"
    assert output_stem("../../x/y.png", "../..") == "x/y.png"
    assert output_stem("/x/y.png", "/") == "x/y.png"
    stem = output_stem(long_name)
    assert stem == output_stem(long_name)  # the same every time
    assert len(stem.encode()) <= 255 - 120 and "~" in stem
    assert output_stem("y" * 240 + ".png") != stem


_NAMES = st.sampled_from(
    ["a.jpg", "a.png", "A.PNG", "a_jpg.png", "a_png.gif", "b.jpeg", "b_2.png", "c.tif"])
_FOLDERS = st.sampled_from(["", "x", "x/y", "z"])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(_FOLDERS, _NAMES), min_size=1, max_size=12, unique=True))
def test_output_stems_are_unique_and_stay_in_their_folder(files):
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder) / "in"
        for sub, name in files:
            _touch(root / sub / name)
        collected = collect_inputs([str(root)])
        stems = _stems(collected)
        assert len(collected.items) == len(files)
        assert len(set(stems)) == len(stems)  # unique
        for item, stem in zip(collected.items, stems):
            # The folder's name and the path below it, and nothing else: it does not
            # depend on the other files.
            assert stem == output_stem(item.path, str(root))
            assert stem == Path(item.path).relative_to(root.parent).as_posix()
