"""What ``pip install -e .`` (``make install``, ``make demo``) makes of pyproject.toml.

The end-to-end check, pip building the editable wheel with setuptools as make install
does, is ``tests/pythons.py``'s :func:`check_editable` (``make test-pythons``: it needs
pip's index for setuptools); this one checks its cause without the network.
"""

from __future__ import annotations

import pytest

from tests.helpers import REPO


def test_the_flat_layout_is_declared_so_an_editable_install_is_a_plain_path_entry():
    """setuptools makes an editable install of a flat layout (``guidedbp/`` at the root)
    with no ``package-dir`` an import hook, and says so in a boxed "Editable installation
    ... Please be careful with folders in your working directory" warning that pip printed
    on every install step and that read like an error. With ``package-dir = {"" = "."}``
    and every package below that folder it writes a ``.pth`` entry, quietly."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    setuptools = config["tool"]["setuptools"]
    assert setuptools["package-dir"] == {"": "."}
    assert setuptools["packages"]["find"]["include"] == ["guidedbp*"]
    assert (REPO / "guidedbp" / "__init__.py").is_file()
