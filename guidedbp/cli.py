"""The ``guidedbp`` command line.

Heavy imports (TensorFlow, Keras) happen inside commands, so ``guidedbp --help``
and ``guidedbp --version`` answer at once.
"""

from __future__ import annotations

import click

from guidedbp import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "-V", "--version", prog_name="guidedbp")
def main() -> None:
    """Guided backpropagation saliency maps for TensorFlow/Keras image classifiers."""
