"""``python -m guidedbp`` runs the command line."""

import sys


def run() -> None:
    """The ``guidedbp`` command line; Ctrl-C while it loads ends it as Ctrl-C later does."""
    try:
        from guidedbp.cli import main
    except KeyboardInterrupt:  # before guidedbp.cli.common.Command can catch it
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    main()


if __name__ == "__main__":
    run()
