"""Tests for guidedbp.models.labels: the ImageNet list, label files and resolve_class."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from guidedbp.models.labels import ClassNameError, imagenet_labels, load_labels, resolve_class

HINT = "run `guidedbp inspect MODEL` to list the classes"

# --- the ImageNet-1k list --------------------------------------------------------------


def test_imagenet_labels_count_and_ends():
    labels = imagenet_labels()
    assert len(labels) == 1000
    assert labels[0] == "tench"
    assert labels[1] == "goldfish"
    assert labels[999] == "toilet tissue"


@pytest.mark.parametrize(
    ("index", "name"),
    [
        (2, "great white shark"),
        (11, "goldfinch"),
        (134, "crane bird"),
        (207, "golden retriever"),
        (281, "tabby"),
        (285, "Egyptian cat"),
        (340, "zebra"),
        (388, "giant panda"),
        (409, "analog clock"),
        (517, "crane"),
        (638, "maillot"),
        (639, "maillot tank suit"),
        (954, "banana"),
    ],
)
def test_imagenet_spot_checks(index, name):
    # Values from torchvision 0.29.1, torchvision/models/_meta.py, _IMAGENET_CATEGORIES.
    assert imagenet_labels()[index] == name


def test_imagenet_names_are_clean_and_unique():
    labels = imagenet_labels()
    assert len(set(labels)) == 1000
    assert all(name and name == name.strip() and "\n" not in name for name in labels)


def test_imagenet_data_file_is_pure_data():
    text = (
        resources.files("guidedbp.models")
        .joinpath("data", "imagenet_classes.txt")
        .read_text(encoding="utf-8")
    )
    lines = text.split("\n")
    assert lines[0] == "tench"  # no comment or header line
    assert lines[-1] == "" and len(lines) == 1001  # 1000 names and a final newline
    sources = resources.files("guidedbp.models").joinpath("data", "SOURCES.md").read_text()
    assert "torchvision" in sources and "0.29.1" in sources and "BSD" in sources


def test_imagenet_labels_returns_a_fresh_list():
    first = imagenet_labels()
    first[0] = "changed"
    first.append("extra")
    again = imagenet_labels()
    assert again[0] == "tench" and len(again) == 1000


# --- load_labels -----------------------------------------------------------------------


def test_text_file(tmp_path):
    path = tmp_path / "labels.txt"
    path.write_text("cat\n  dog  \nbird\n\n\n")
    assert load_labels(path) == ["cat", "dog", "bird"]


def test_text_file_crlf_bom_and_no_final_newline(tmp_path):
    path = tmp_path / "labels.txt"
    path.write_bytes("\ufeffcat\r\nhot dog\r\nbird".encode())
    assert load_labels(path) == ["cat", "hot dog", "bird"]


def test_text_file_accepts_str_path(tmp_path):
    path = tmp_path / "labels.names"
    path.write_text("a\nb\n")
    assert load_labels(str(path)) == ["a", "b"]


def test_imagenet_round_trip_through_text_file(tmp_path):
    path = tmp_path / "imagenet.txt"
    path.write_text("\n".join(imagenet_labels()) + "\n")
    assert load_labels(path) == imagenet_labels()


def test_json_list(tmp_path):
    path = tmp_path / "labels.json"
    path.write_text(json.dumps(["cat", "dog"]))
    assert load_labels(path) == ["cat", "dog"]


def test_json_object_out_of_order(tmp_path):
    path = tmp_path / "labels.json"
    path.write_text(json.dumps({"2": "bird", "0": "cat", "1": "dog"}))
    assert load_labels(path) == ["cat", "dog", "bird"]


def test_keras_class_index_form(tmp_path):
    path = tmp_path / "imagenet_class_index.json"
    path.write_text(
        json.dumps(
            {"0": ["n01440764", "tench"], "1": ["n01443537", "goldfish"], "2": ["x", "shark"]}
        )
    )
    assert load_labels(path) == ["tench", "goldfish", "shark"]


def test_json_detected_by_content(tmp_path):
    path = tmp_path / "labels.txt"
    path.write_text('  {"1": "dog", "0": "cat"}\n')
    assert load_labels(path) == ["cat", "dog"]


def _error(tmp_path, name: str, content: str) -> str:
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(ValueError) as caught:
        load_labels(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ")
    assert "\n" not in message
    return message


@pytest.mark.parametrize("content", ["", "\n\n", "   \n"])
def test_empty_file(tmp_path, content):
    assert "labels file is empty" in _error(tmp_path, "labels.txt", content)


def test_blank_line_inside(tmp_path):
    assert "line 2 is blank" in _error(tmp_path, "labels.txt", "cat\n\ndog\n")


def test_gap_in_indices(tmp_path):
    message = _error(tmp_path, "labels.json", json.dumps({"0": "cat", "2": "bird"}))
    assert "must run 0..1 without gaps (missing 1)" in message


def test_duplicate_index(tmp_path):
    message = _error(tmp_path, "labels.json", '{"0": "cat", "00": "cat again"}')
    assert "without gaps" in message


def test_non_index_key(tmp_path):
    message = _error(tmp_path, "labels.json", json.dumps({"0": "cat", "dog": "dog"}))
    assert "key 'dog' is not a class index" in message


def test_unreadable_json(tmp_path):
    assert "not valid JSON" in _error(tmp_path, "labels.json", '["cat", "dog"')


@pytest.mark.parametrize("data", [[], {}, 5, "cat"])
def test_json_of_wrong_kind(tmp_path, data):
    message = _error(tmp_path, "labels.json", json.dumps(data))
    assert "no class names" in message or "expected a JSON list" in message


@pytest.mark.parametrize("data", [["cat", 3], ["cat", ""], {"0": []}, ["cat", None]])
def test_json_bad_name(tmp_path, data):
    assert "has no name" in _error(tmp_path, "labels.json", json.dumps(data))


def test_missing_file(tmp_path):
    path = tmp_path / "nope.txt"
    with pytest.raises(ValueError) as caught:
        load_labels(path)
    assert str(caught.value).startswith(f"{path}: cannot read labels file")


def test_not_utf8(tmp_path):
    path = tmp_path / "labels.txt"
    path.write_bytes(b"caf\xe9\n")
    with pytest.raises(ValueError, match="not UTF-8"):
        load_labels(path)


# --- resolve_class ---------------------------------------------------------------------

LABELS = ["cat", "catamount", "dog", "Apple", "apple", "blackbird", "black swan"]


def test_index_int_and_digit_string():
    labels = imagenet_labels()
    assert resolve_class(5, labels, 1000) == 5
    assert resolve_class("207", labels, 1000) == 207
    assert resolve_class(" 7 ", labels, 1000) == 7
    assert resolve_class("0", None, 3) == 0
    assert resolve_class(2, None, 3) == 2


@pytest.mark.parametrize("spec", [1000, "1000", -1, "-1"])
def test_index_out_of_range(spec):
    with pytest.raises(ClassNameError) as caught:
        resolve_class(spec, imagenet_labels(), 1000)
    message = str(caught.value)
    assert message.startswith(f"class index {int(spec)} is out of range")
    assert "(0..999)" in message
    assert message.endswith(HINT)


def test_names_on_imagenet():
    labels = imagenet_labels()
    assert resolve_class("tench", labels, 1000) == 0
    assert resolve_class("Tench", labels, 1000) == 0
    assert resolve_class("egyptian cat", labels, 1000) == 285
    assert resolve_class("golden retr", labels, 1000) == 207
    assert resolve_class("crane", labels, 1000) == 517  # exact beats prefix of "crane bird"
    assert resolve_class("crane b", labels, 1000) == 134


def test_case_sensitive_match_wins_then_case_insensitive():
    assert resolve_class("Apple", LABELS, len(LABELS)) == 3
    assert resolve_class("apple", LABELS, len(LABELS)) == 4
    assert resolve_class("DOG", LABELS, len(LABELS)) == 2
    with pytest.raises(ClassNameError, match="'APPLE' is ambiguous: it matches 'Apple' \\(3\\)"):
        resolve_class("APPLE", LABELS, len(LABELS))


def test_exact_beats_prefix_and_unique_prefix_works():
    assert resolve_class("cat", LABELS, len(LABELS)) == 0
    assert resolve_class("cata", LABELS, len(LABELS)) == 1
    assert resolve_class("BLACKB", LABELS, len(LABELS)) == 5


def test_ambiguous_prefix_lists_candidates():
    with pytest.raises(ClassNameError) as caught:
        resolve_class("black", LABELS, len(LABELS))
    assert str(caught.value) == (
        "class 'black' is ambiguous: it matches 'blackbird' (5), 'black swan' (6); " + HINT
    )


def test_ambiguous_prefix_shows_at_most_five():
    labels = imagenet_labels()
    matches = [name for name in labels if name.lower().startswith("black")]
    assert len(matches) == 7
    with pytest.raises(ClassNameError) as caught:
        resolve_class("black", labels, 1000)
    message = str(caught.value)
    assert message.count("' (") == 5
    assert "and 2 more;" in message
    assert message.endswith(HINT)


def test_unknown_name_lists_the_classes_when_they_are_few():
    with pytest.raises(ClassNameError) as caught:
        resolve_class("zebu", LABELS, len(LABELS))
    assert str(caught.value) == ("unknown class 'zebu': the classes are cat, catamount, dog, "
                                 "Apple, apple, blackbird, black swan")
    with pytest.raises(ClassNameError) as caught:
        resolve_class("blakbird", LABELS, len(LABELS))
    assert str(caught.value).startswith("unknown class 'blakbird' (did you mean 'blackbird'?): "
                                        "the classes are cat, ")


def test_unknown_name_suggests_close_ones():
    with pytest.raises(ClassNameError) as caught:
        resolve_class("goldfsh", imagenet_labels(), 1000)
    message = str(caught.value)
    assert message.startswith("unknown class 'goldfsh' (did you mean 'goldfish'")
    assert message.endswith(f"{HINT} (all 1000)")
    with pytest.raises(ClassNameError) as caught:
        resolve_class("hexagon", imagenet_labels(), 1000)
    assert str(caught.value) == f"unknown class 'hexagon'; {HINT} (all 1000)"


def test_name_without_labels():
    with pytest.raises(ClassNameError) as caught:
        resolve_class("cat", None, 10)
    message = str(caught.value)
    assert "no class names" in message and "labels=FILE" in message
    assert "index 0..9" in message


def test_labels_count_must_match_model():
    with pytest.raises(ClassNameError, match="has 7 names but the model has 10 classes"):
        resolve_class("dog", LABELS, 10)


def test_messages_are_one_line():
    with pytest.raises(ClassNameError) as caught:
        resolve_class("two\nlines", LABELS, len(LABELS))
    assert "\n" not in str(caught.value)


def test_empty_name():
    with pytest.raises(ClassNameError, match="class name is empty"):
        resolve_class("  ", LABELS, len(LABELS))


@pytest.mark.parametrize("spec", [True, 1.0, None, ["cat"]])
def test_bad_spec_type(spec):
    with pytest.raises(ValueError, match="class must be an index") as caught:
        resolve_class(spec, LABELS, len(LABELS))
    assert not isinstance(caught.value, ClassNameError)


@pytest.mark.parametrize("num_classes", [0, -3, True, 2.0])
def test_bad_num_classes(num_classes):
    with pytest.raises(ValueError, match="num_classes must be a positive int"):
        resolve_class(0, None, num_classes)


def test_class_name_error_is_value_error():
    assert issubclass(ClassNameError, ValueError)
