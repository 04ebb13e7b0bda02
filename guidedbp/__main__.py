"""``python -m guidedbp`` runs the command line."""

from guidedbp.cli import main

main()
