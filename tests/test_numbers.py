"""Numbers are read one way everywhere (issue 39, item 19): ASCII digits only.

Python's ``int`` and ``float`` read other scripts' digits (``int("٣")`` is 3) and
``str.isdigit`` passes superscripts that ``int`` refuses (``"²"``): ``--detections top:²``
printed a 42-line traceback, ``top:٣`` was taken as 3, ``--top-k ٣``, ``--size ٣x٣`` and a
box of Arabic-Indic digits were taken as numbers, and ``--detection-threshold nan`` passed
click's range check. Each flag, spec and API field now reads its numbers through
:mod:`guidedbp._numbers`, and refuses the rest in one line before anything is loaded.
"""

from __future__ import annotations

import pytest

from guidedbp._numbers import decimal_number, whole_number
from guidedbp.errors import ArgumentError
from guidedbp.io.shard import ShardError, parse_shard
from guidedbp.pipeline.options import ClassOptions, InputOptions
from guidedbp.pipeline.target_specs import parse_target

from .helpers import run_cli


@pytest.mark.parametrize(("args", "fragment"), [
    (["--detections", "top:²"], "'top:²' must be top:K, K a whole number from 1 to 100"),
    (["--detections", "top:٣"], "'top:٣' must be top:K"),
    (["--top-k", "٣"], "'٣' is not a valid integer (ASCII digits 0-9)"),
    (["--top-k", "1_0"], "'1_0' is not a valid integer"),
    (["--smooth", "١"], "'١' is not a valid integer (ASCII"),
    (["--size", "٣٢x٣٢"], "'٣٢x٣٢' is not HxW, e.g. 224x224"),
    (["--shard", "٠/٢"], "'٠/٢' is not K/N"),
    (["--detection-threshold", "nan"], "'nan' is not a finite number"),
    (["--alpha", "٠.٥"], "'٠.٥' is not a valid number (ASCII digits 0-9"),
    (["--target", "box:١,٢,٣٠,٤٠"], "'١' is not a number"),
], ids=["superscript", "arabic-indic", "top-k", "underscore", "smooth", "size", "shard",
        "nan", "alpha", "box"])
def test_a_number_in_other_digits_is_a_one_line_usage_error(tmp_path, args, fragment):
    result = run_cli("explain", "demo", tmp_path / "a.png", "-o", tmp_path / "out", *args)
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    line = result.stderr.strip().splitlines()[-1]  # click's usage lines come first
    assert line.startswith("Error: Invalid value for '--") and fragment in line, line
    assert not (tmp_path / "out").exists()


def test_ascii_numbers_are_read_as_ever(tmp_path):
    assert whole_number(" 12 ") == 12 and whole_number("+3", signed=True) == 3
    assert decimal_number("1e-3") == 0.001 and decimal_number(".5") == 0.5
    assert ClassOptions(detections="top:3").detections == 3
    assert ClassOptions(model_output="1").model_output == 1
    assert InputOptions(shard=None).shard is None and parse_shard("1/4") == (1, 4)
    assert parse_target("box:1,2.5,3e1,40").value.corners == (1.0, 2.5, 30.0, 40.0)


def test_the_library_reads_numbers_as_the_cli_does():
    with pytest.raises(ArgumentError, match=r"detections='top:٣' must be top:K"):
        ClassOptions(detections="top:٣")
    with pytest.raises(ArgumentError, match=r"detections='top:²' must be top:K"):
        ClassOptions(detections="top:²")
    # Not a number: an output's name, as any other text is.
    assert ClassOptions(model_output="٣").model_output == "٣"
    with pytest.raises(ShardError, match=r"is not K/N"):
        parse_shard("٠/٢")
    spec = parse_target("class:٣")  # not an index: a class name, which labels may hold
    assert spec.value == "٣" and isinstance(spec.value, str)


def test_the_examples_of_the_number_and_box_modules_hold():
    import doctest

    from guidedbp import _numbers
    from guidedbp.cli import numbers
    from guidedbp.pipeline import boxes

    for module in (_numbers, numbers, boxes):
        assert doctest.testmod(module).failed == 0, module.__name__
