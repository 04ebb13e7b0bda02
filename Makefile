# Every target builds .venv/ at the repo root first if it is missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install test test-pythons bench demo demo-model eval clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test,ray,plot]"
	touch $(STAMP)

# Two pytest workers, one test file each (module fixtures are built once).
test: $(STAMP)
	$(PY) -m ruff check guidedbp tests benchmarks
	$(PY) -m pytest -q -n 2 --dist loadfile

# The wheel and sdist, built once, installed in a fresh venv per Python 3.10-3.13 (3.10 at
# every runtime floor, 3.13 at the newest releases): make demo's command, check, evaluate and
# a smoke subset of the tests there. Needs the pyenv interpreters; about 10 min.
test-pythons: $(STAMP)
	$(PY) tests/pythons.py $(PYTHONS)

bench: $(STAMP)
	$(PY) benchmarks/bench.py

# The main job on the bundled default model: panels for the sample shapes the package ships
# (the same as `guidedbp explain demo sample_images/shapes --render panel,overlay`).
demo: $(STAMP)
	$(VENV)/bin/guidedbp demo -o demo-out
	@echo "Open demo-out/index.html (one samples/*.panel.png per shape: original | color | gray | overlay)."

# Retrain the bundled shapes models, ReLU (demo) and SiLU (demo-silu): fixed seeds,
# about ten minutes each on 2 cores; then the segmentation model (demo-seg), a few minutes.
demo-model: $(STAMP)
	$(PY) -m guidedbp.demo.train
	$(PY) -m guidedbp.demo.train --activation silu
	$(PY) -m guidedbp.demo.train_seg

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
