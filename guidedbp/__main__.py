"""``python -m guidedbp`` runs the command line."""

import sys


def run() -> None:
    """The ``guidedbp`` command line; Ctrl-C while it loads ends it as Ctrl-C later does.

    A finished command leaves without the interpreter's teardown where that is safe
    (:func:`guidedbp.cli.process.may_skip_teardown`): TensorFlow's takes a second or more,
    a fifth of a cold ``guidedbp explain``. Only here, in the program: ``main()`` called
    from Python returns or raises ``SystemExit`` as click's commands do."""
    try:
        from guidedbp.cli import main
        from guidedbp.cli.process import exit_now, may_skip_teardown
    except KeyboardInterrupt:  # before guidedbp.cli.process.Command can catch it
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    try:
        main()
    except SystemExit as exit_:
        if may_skip_teardown(exit_.code):
            exit_now(exit_.code or 0)
        raise


if __name__ == "__main__":
    run()
