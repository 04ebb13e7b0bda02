"""The ``guidedbp`` command line: click commands wiring models, engine and render.

Heavy imports (TensorFlow, Keras) happen inside commands, so ``guidedbp --help``
and ``guidedbp --version`` answer at once. Ctrl-C at any moment prints
``interrupted`` and exits 130 within 2 seconds (:class:`~guidedbp.cli.common.Command`).
"""

from __future__ import annotations

import click

from guidedbp import __version__
from guidedbp.cli.check import check_command
from guidedbp.cli.common import Command
from guidedbp.cli.evaluate import evaluate_command
from guidedbp.cli.explain import explain_command
from guidedbp.cli.inspect import inspect_command
from guidedbp.cli.merge import merge_command
from guidedbp.cli.report import report_command


@click.group(cls=Command,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "-V", "--version", prog_name="guidedbp")
def main() -> None:
    """Guided backpropagation saliency maps for TensorFlow/Keras image classifiers.

    MODEL is a .keras or .h5 file, a SavedModel folder, keras:NAME for a
    keras.applications model (keras:ResNet50, keras:MobileNetV2, ...), or demo for
    the bundled shapes classifier.
    """


main.add_command(explain_command)
main.add_command(inspect_command)
main.add_command(check_command)
main.add_command(evaluate_command)
main.add_command(merge_command)
main.add_command(report_command)
