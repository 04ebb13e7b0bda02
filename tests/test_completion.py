"""Shell completion (Click's, for bash, zsh and fish): the scripts a user sources, and the
values they complete for --method, --render, --cmap and evaluate's lists."""

from __future__ import annotations

import functools
import os
import shlex
import subprocess
import sys

import pytest

from guidedbp import METHODS
from guidedbp.checks.metrics_catalog import METRIC_NAMES
from guidedbp.render import COLORMAPS, RENDERS
from tests.helpers import subprocess_environment

BIN = os.path.dirname(sys.executable)  # where the guidedbp script is installed


def environment(**extra) -> dict:
    env = subprocess_environment()
    env["PATH"] = BIN + os.pathsep + env.get("PATH", "")
    return {**env, **extra}


@functools.cache
def bash_source() -> str:
    """The script ``eval "$(_GUIDEDBP_COMPLETE=bash_source guidedbp)"`` sources, generated
    once for the module (each run of guidedbp is a Python start)."""
    result = subprocess.run(["guidedbp"], capture_output=True, text=True, timeout=60,
                            env=environment(_GUIDEDBP_COMPLETE="bash_source"), check=True)
    return result.stdout


def bash_completions(line: str) -> list[str]:
    """What bash offers for ``line`` + TAB: the generated script, sourced in a real bash,
    its completion function (which runs guidedbp) run on the words as bash splits them."""
    words = shlex.split(line) + ([""] if line.endswith(" ") else [])
    script = (
        f"eval {shlex.quote(bash_source())}\n"
        f"COMP_WORDS=({' '.join(shlex.quote(w) for w in words)})\n"
        f"COMP_CWORD={len(words) - 1}\n"
        "_guidedbp_completion guidedbp\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                            env=environment(), timeout=60, check=True)
    return [line for line in result.stdout.splitlines() if line]


def test_bash_completes_method_names_after_a_comma():
    assert bash_completions("guidedbp explain --method gu") == [
        name for name in METHODS if name.startswith("gu")]
    # After a comma: the names not typed yet, the typed part kept.
    offered = bash_completions("guidedbp explain --method guided,gr")
    assert offered == [f"guided,{name}" for name in METHODS if name.startswith("gr")]
    assert "guided,guided" not in bash_completions("guidedbp explain --method guided,")
    assert "all" in bash_completions("guidedbp explain --method ")
    assert not any(o.endswith(",all") for o in bash_completions("guidedbp explain --method v,"))


def test_bash_completes_renders_and_colormaps():
    assert bash_completions("guidedbp explain --render color,") == [
        f"color,{name}" for name in RENDERS if name != "color"]
    assert bash_completions("guidedbp explain --cmap ") == list(COLORMAPS)
    assert bash_completions("guidedbp explain --cmap ma") == ["magma"]


def test_bash_completes_commands_and_evaluate_lists():
    assert "explain" in bash_completions("guidedbp ex")
    assert bash_completions("guidedbp de") == ["demo"]
    assert bash_completions("guidedbp evaluate --metric pointing,") == [
        "pointing,energy", "pointing,deletion", "pointing,insertion",
        *(f"pointing,{name}" for name in METRIC_NAMES)]
    assert "all" in bash_completions("guidedbp evaluate --metric ")
    assert bash_completions("guidedbp evaluate --method occ") == ["occlusion"]


@pytest.mark.parametrize(("shell", "hook"), [
    ("bash", "complete -o nosort -F _guidedbp_completion guidedbp"),
    ("zsh", "#compdef guidedbp"),
    ("fish", "complete --no-files --command guidedbp"),
])
def test_every_shell_gets_a_script_to_source(shell, hook):
    result = subprocess.run(["guidedbp"], capture_output=True, text=True, timeout=60,
                            env=environment(_GUIDEDBP_COMPLETE=f"{shell}_source"))
    assert result.returncode == 0 and hook in result.stdout, result.stdout[:500]


@pytest.mark.parametrize(("shell", "cword", "expected"), [
    ("zsh", "3", "plain\nguided,gradcam\n_\nplain\nguided,gradcam++\n_\n"
                 "plain\nguided,gradient-input\n_\n"),
    ("fish", "guided,gr", "plain,guided,gradcam\nplain,guided,gradcam++\n"
                  "plain,guided,gradient-input\n"),
])
def test_zsh_and_fish_get_the_same_values(shell, cword, expected):
    # The protocol the zsh and fish scripts speak (neither shell is on this machine): zsh
    # passes the word's index, fish the word itself.
    env = environment(_GUIDEDBP_COMPLETE=f"{shell}_complete",
                      COMP_WORDS="guidedbp explain --method guided,gr", COMP_CWORD=cword)
    result = subprocess.run(["guidedbp"], capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0
    assert result.stdout == expected
