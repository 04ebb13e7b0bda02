# Every target builds .venv/ at the repo root first if it is missing. make demo installs what
# the demo needs (guidedbp and the plot extra); make test adds the test extras.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
DEMO_STAMP := $(VENV)/.demo-installed
STAMP := $(VENV)/.installed

# The peer library, Xplique, in its own venv: `pip install xplique` pins TensorFlow <= 2.20,
# and guidedbp is never installed there (tests/peer_xplique.py runs in it, by subprocess).
PEER_VENV := build/xplique-venv
PEER_STAMP := $(PEER_VENV)/.installed
# A Python 3.10-3.12 for it: $(PYTHON) when it is one, else pyenv's 3.12, 3.11 or 3.10.
PEER_PYTHON ?= $(firstword $(shell for p in $(PYTHON) \
	$$(ls -d $${PYENV_ROOT:-$$HOME/.pyenv}/versions/3.1[210]*/bin/python3 2>/dev/null | sort -r); do \
	$$p -c 'import sys; sys.exit(not (3, 10) <= sys.version_info[:2] <= (3, 12))' \
	2>/dev/null && echo $$p; done))

.PHONY: install test test-all test-pythons test-peers peer-venv bench demo demo-model eval docs docs-cli clean

install: $(STAMP)

$(DEMO_STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[plot]"
	touch $(DEMO_STAMP)

$(STAMP): $(DEMO_STAMP) pyproject.toml
	$(PY) -m pip install --quiet -e ".[test,ray,plot,segments]"
	touch $(STAMP)

# Two pytest workers, one test file each (module fixtures are built once). make test leaves
# out the tests marked `heavy`; make test-all, which CI runs, has them too. Tests marked
# `peer` (they need build/xplique-venv): make test-peers.
# make test's time (the figure the README, pyproject.toml and the docs refer to): about 9
# minutes on 2 idle cores. Measured 2026-12-08, 2,467 tests: 1,034 CPU-seconds (983 user +
# 51 sys of `/usr/bin/time make test`; 8 min 59 s wall), the two workers keeping both cores
# busy; wall time is that over 2 only on idle cores (a 2-core machine shared with other
# jobs takes longer, and its contention adds up to 15 % to the CPU-seconds too). Each
# worker runs TensorFlow on one thread (tests/conftest.py): two workers on two cores.
test: $(STAMP)
	$(PY) -m ruff check guidedbp tests benchmarks docs/hooks
	$(PY) -m pytest -q -n 2 --dist loadfile -m "not peer and not heavy" --durations=25

test-all: $(STAMP)
	$(PY) -m ruff check guidedbp tests benchmarks docs/hooks
	$(PY) -m pytest -q -n 2 --dist loadfile -m "not peer" --durations=25

# guidedbp's metrics against Xplique 2.0.2's on the same model and maps (-s prints the
# table the README shows).
test-peers: $(STAMP) $(PEER_STAMP)
	$(PY) -m pytest -q -s -m peer

peer-venv: $(PEER_STAMP)

$(PEER_STAMP):
	@test -x $(PEER_VENV)/bin/python || test -n "$(PEER_PYTHON)" || \
		{ echo "make peer-venv needs a Python 3.10-3.12: set PEER_PYTHON=..."; exit 1; }
	test -x $(PEER_VENV)/bin/python || $(PEER_PYTHON) -m venv $(PEER_VENV)
	$(PEER_VENV)/bin/python -m pip install --quiet 'xplique==2.0.2' 'tensorflow>=2.16,<=2.20'
	touch $(PEER_STAMP)

# The wheel and sdist, built once, installed in a fresh venv per Python 3.10-3.13 (3.10 at
# every runtime floor, 3.13 at the newest releases): make demo's command, check, evaluate and
# a smoke subset of the tests there. Needs the pyenv interpreters; about 10 min.
test-pythons: $(STAMP)
	$(PY) tests/pythons.py $(PYTHONS)

# Every section of benchmarks/sections/, in one process; ONLY=NAME runs one (bench.py --only
# NAME; bench.py --help lists them).
bench: $(STAMP)
	$(PY) benchmarks/bench.py $(if $(ONLY),--only $(ONLY))

# The documentation site (mkdocs.yml, pages under docs/) into build/site: --strict makes every
# warning an error (a broken link or anchor, an API name that does not exist). Then
# tests/test_site.py opens it from the file system in headless Chromium: every link names a
# file, the navigation lands on pages, the search finds a word, nothing comes from the
# network. The docs extra goes into .venv/ once, with its own stamp.
DOCS_STAMP := $(VENV)/.docs-installed

# docs/cli.md holds each command's --help as click prints it (so that it reads on GitHub):
# make docs-cli writes it again after a command's help changed (tests/test_docs.py fails
# until then).
docs-cli: $(DEMO_STAMP)
	$(PY) docs/hooks/cli_help.py

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict -d build/site
	GUIDEDBP_SITE=build/site $(PY) -m pytest -q tests/test_site.py
	@echo "Open build/site/index.html: from the file system (no server), links and search work."

$(DOCS_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e ".[docs]"
	touch $(DOCS_STAMP)

# The main job on the bundled default model: panels for the sample shapes the package ships
# (the same as `guidedbp explain demo sample_images/shapes --render panel,overlay`).
demo: $(DEMO_STAMP)
	$(VENV)/bin/guidedbp demo -o demo-out
	@echo "Open demo-out/index.html (one samples/*.panel.png per shape: original | color | gray | overlay)."
	@echo "The guidedbp command is .venv/bin/guidedbp: run '. .venv/bin/activate' to call it as guidedbp in this shell."

# Retrain the bundled shapes models, ReLU (demo) and SiLU (demo-silu): fixed seeds,
# about ten minutes each on 2 cores; then the segmentation model (demo-seg) and the
# detector (demo-det), a few minutes each.
demo-model: $(STAMP)
	$(PY) -m guidedbp.demo.train
	$(PY) -m guidedbp.demo.train --activation silu
	$(PY) -m guidedbp.demo.train_seg
	$(PY) -m guidedbp.demo.train_det

# The README's tables for the bundled models (demo, then demo-silu under both --guide
# scopes, then demo-seg's regions): localisation against the shapes' masks, deletion and
# insertion (no masks needed), and each method's cost relative to guided.
eval: $(STAMP)
	$(VENV)/bin/guidedbp evaluate demo --shapes 500 --seed 1000 --method all \
		--metric pointing,energy,deletion,insertion --costs
	$(VENV)/bin/guidedbp evaluate demo --shapes 500 --seed 1000 --distractors
	$(VENV)/bin/guidedbp evaluate demo --shapes 500 --seed 1000 --distractors --explain-distractor
	$(VENV)/bin/guidedbp evaluate demo-silu --shapes 500 --seed 1000 --guide all \
		--method guided,vanilla,deconvnet,gradcam,guided-gradcam --metric pointing,energy,deletion,insertion
	$(VENV)/bin/guidedbp evaluate demo-silu --shapes 500 --seed 1000 --guide relu \
		--method guided,deconvnet,guided-gradcam --metric pointing,energy,deletion,insertion
	$(VENV)/bin/guidedbp evaluate demo-seg --shapes 200 --seed 1000 \
		--method guided,vanilla,deconvnet,gradcam,guided-gradcam,integrated-gradients
	$(VENV)/bin/guidedbp evaluate demo-seg --shapes 200 --seed 1000 --distractors \
		--method guided,vanilla,deconvnet,gradcam,guided-gradcam,integrated-gradients
	$(VENV)/bin/guidedbp evaluate demo-seg --shapes 200 --seed 1000 --distractors \
		--explain-distractor \
		--method guided,vanilla,deconvnet,gradcam,guided-gradcam,integrated-gradients
	$(VENV)/bin/guidedbp evaluate demo-seg --shapes 200 --seed 1000 \
		--method gradcam++,layercam,scorecam,occlusion

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis guidedbp.egg-info demo-out guidedbp-out build dist
