"""The ``guidedbp`` command line: click commands wiring models, engine and render.

Heavy imports (TensorFlow, Keras) happen inside commands, so ``guidedbp --help``
and ``guidedbp --version`` answer at once; each command's module is imported only when
that command runs (or ``--help`` lists it), so ``guidedbp explain`` does not import what
``check`` and ``evaluate`` need. Ctrl-C at any moment prints
``interrupted`` and exits 130 within 2 seconds (:class:`~guidedbp.cli.process.Command`).
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict

import click

from guidedbp import __version__
from guidedbp.cli.process import Command
from guidedbp.models.bundled import model_help

#: What ``guidedbp --version`` reports beside itself: these import names' distributions.
VERSION_MODULES = ("tensorflow", "keras", "numpy", "PIL", "click")


def version_line() -> str:
    """``guidedbp 0.1.0 (Python 3.11.7; tensorflow 2.21.0, keras 3.15.1, ...)``: what a bug
    report needs, from the installed packages' metadata (nothing is imported). Each module
    is named by the distribution that installed it (``tensorflow-cpu 2.21.0``, ``pillow``)."""
    from importlib import metadata

    providers = distributions_by_module(VERSION_MODULES)
    parts = []
    for module in VERSION_MODULES:
        names = {re.sub(r"[-_.]+", "-", name).lower(): name  # as pip shows it
                 for name in providers.get(module, [])}
        parts += [f"{shown} {metadata.version(names[shown])}" for shown in sorted(names)] \
            or [f"{module} missing"]
    python = ".".join(map(str, sys.version_info[:3]))
    return f"guidedbp {__version__} (Python {python}; {', '.join(parts)})"


def distributions_by_module(modules: tuple[str, ...]) -> dict[str, list[str]]:
    """``module -> names of the distributions that install it``, for these import names.

    As Python 3.11's ``importlib.metadata.packages_distributions`` finds them: from a
    distribution's ``top_level.txt`` or, where it has none (numpy's and click's wheels,
    built by meson-python and flit), from the top names of the files in its ``RECORD``.
    Python 3.10's reads ``top_level.txt`` only, and so reported numpy and click missing.
    """
    from importlib import metadata

    wanted, providers = set(modules), defaultdict(list)
    for distribution in metadata.distributions():
        declared = (distribution.read_text("top_level.txt") or "").split()
        tops = declared or {file.parts[0] if len(file.parts) > 1 else file.name.split(".")[0]
                            for file in distribution.files or ()}  # six.py: six
        for module in wanted.intersection(tops):
            providers[module].append(distribution.metadata["Name"])
    return dict(providers)


def _print_version(ctx: click.Context, param, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(version_line())
        ctx.exit()


#: The first line of ``guidedbp --help``.
_TITLE = "Guided backpropagation saliency maps for TensorFlow/Keras image classifiers."

#: The commands, by the name each declares: name -> (module, attribute). ``--help``
#: lists them sorted, as click lists a group's commands.
COMMANDS = {
    "check": ("guidedbp.cli.check", "check_command"),
    "demo": ("guidedbp.cli.demo", "demo_command"),
    "evaluate": ("guidedbp.cli.evaluate", "evaluate_command"),
    "explain": ("guidedbp.cli.explain", "explain_command"),
    "inspect": ("guidedbp.cli.inspect", "inspect_command"),
    "merge-manifests": ("guidedbp.cli.merge", "merge_command"),
    "report": ("guidedbp.cli.report", "report_command"),
}


class Main(Command):
    """The ``guidedbp`` group, importing a command's module when it is asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        import importlib

        module, attribute = COMMANDS[name]
        command = getattr(importlib.import_module(module), attribute)
        assert command.name == name, (name, command.name)
        return command


@click.group(cls=Main, help=f"{_TITLE}\n\n{model_help()}",
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("-V", "--version", is_flag=True, expose_value=False, is_eager=True,
              callback=_print_version,
              help="Show guidedbp's version, Python's and its dependencies', and exit.")
def main() -> None:
    """The ``guidedbp`` group; its help is :data:`_TITLE` and what MODEL may be
    (:func:`~guidedbp.models.bundled.model_help`, the bundled models from their list)."""

