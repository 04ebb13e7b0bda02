"""`make bench`: speed figures measured side by side in one process.

Each section is a module of ``benchmarks/sections/`` whose docstring says what it
measures; ``--help`` lists them all, ``--only NAME`` runs one (``make bench`` runs every
section, in this order, in one scratch folder).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import textwrap

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the sections package

import warnings  # noqa: E402

from sections import SECTIONS  # noqa: E402

from guidedbp.pipeline.run import ModelWarning  # noqa: E402

# The benchmark's random networks and scale-less test models are known; their notes
# would only clutter the figures.
warnings.simplefilter("ignore", ModelWarning)


def listing() -> str:
    """Every section's name and docstring, for ``--help``."""
    return "sections, in the order they run:\n\n" + "\n\n".join(
        textwrap.indent(textwrap.fill(" ".join(section.__doc__.split()), 88), "  ")
        for section in SECTIONS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=listing(),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--only", choices=[section.NAME for section in SECTIONS])
    parser.add_argument("--methods", default=None,
                        help="With --only costs: a comma list of methods (default: all).")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="guidedbp-bench-") as folder:
        for section in SECTIONS:
            if args.only in (None, section.NAME):
                section.run(folder, args)


if __name__ == "__main__":
    main()
