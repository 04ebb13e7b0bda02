"""``make test-pythons``: the built package, installed as a user installs it, on every
supported Python.

Builds the wheel and the sdist once (``python -m build``) and checks that both carry every
file of ``guidedbp/``, and that ``pip install -e .`` (``make install``'s) prints no boxed
warning (:func:`check_editable`). Then, for each interpreter, a fresh venv under ``build/pythons/``
gets the package (never editable, never the source tree) and, from an empty folder, runs

- ``guidedbp --version``, which must name every dependency at its installed version;
- ``make demo``'s command, ``guidedbp demo -o demo-out``, in a folder of its own with
  no ``sample_images/``: the wheel carries the samples it explains;
- there, the README's detector example after ``guidedbp demo --write-samples
  sample_images`` (the wheel carries the clone's ``sample_images/``, scenes included);
- ``guidedbp check demo`` and ``guidedbp evaluate demo --shapes 20``;
- a smoke subset of the tests, on a copy of ``tests/``, so that ``import guidedbp`` can
  only find the installed package: ``SMOKE`` at the floors and the newest, the shorter
  ``SMOKE_PACKAGING`` for the wheel and the sdist in between.

What each interpreter installs:

====  ========  ==================================================================
3.10  floors    every runtime dependency at its floor in ``pyproject.toml`` (``==``)
3.11  wheel     what pip resolves
3.12  sdist     what pip resolves; the package built from the sdist
3.13  newest    the newest release of everything (``--upgrade-strategy eager``)
====  ========  ==================================================================

Usage: ``python tests/pythons.py [VERSION ...]`` (all four when none is named).
Interpreters are found as ``pythonX.Y`` on PATH or under pyenv's ``versions/``; a missing
one fails the run. Exit status: 0 all passed, 1 a step failed, 2 the build or an
interpreter is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "build" / "pythons"

# One test file per part users rely on: exact engine values, the demo and its shipped model,
# the library API, the pytest plugin (via its entry point) and shell completion (via the
# installed console script). (`guidedbp check demo` runs the engine against the reference
# chain.) About two minutes each.
SMOKE = (
    "tests/test_engine_exact.py",
    # The generalised rule reads how TensorFlow and Keras build each activation: check
    # every kind on every interpreter, at the floors too.
    "tests/test_activation_regions.py",
    "tests/test_demo.py",
    "tests/test_library.py",
    # Targets read each Keras's multi-output models (dict order, output names).
    "tests/test_targets_api.py",
    # SavedModels are inlined through TensorFlow's variable-to-constant converter's
    # internals (guidedbp/models/inlining.py): check them at the floor and the newest.
    "tests/test_savedmodel_inlining.py",
    "tests/test_pytest_plugin.py",
    "tests/test_completion.py",
    # The newer methods and the metrics: ViT tokens, SavedModel export and Sobol sequences
    # differ between TensorFlow and Keras releases.
    "tests/test_gradient_family.py",
    "tests/test_blackbox_methods.py",
    "tests/test_metrics.py",
    # Object storage through fsspec and s3fs (the s3 extra at its floor on 3.10), against
    # moto's S3 server.
    "tests/test_store.py",
)
#: The wheel and the sdist on 3.11 and 3.12 resolve the same releases as the newest on 3.13:
#: there the smoke checks what packaging can break (the engine's values, the demo and its
#: shipped model, the library, both entry points), in a third of the time.
SMOKE_PACKAGING = (
    "tests/test_engine_exact.py",
    "tests/test_demo.py",
    "tests/test_library.py",
    "tests/test_pytest_plugin.py",
    "tests/test_completion.py",
)
RUNTIME = ("tensorflow", "keras", "numpy", "pillow", "click")
TEST_TOOLS = ("pytest", "hypothesis")
#: The s3 extra's library: at its floor with the runtime floors (aiobotocore pinned to a
#: release of that time, which pip would otherwise search for), else the newest. moto's
#: server, which tests/test_store.py talks to, runs in a process of its own from this
#: checkout's venv (GUIDEDBP_TEST_MOTO_PYTHON): its Flask needs a newer click than the floor.
S3_FLOOR = ("s3fs==2024.12.0", "aiobotocore==2.15.2")
INSTALL_TIMEOUT = 1200  # s: a cold pip cache downloads TensorFlow
STEP_TIMEOUT = 600


@dataclass(frozen=True)
class Plan:
    version: str
    kind: str  # floors | wheel | sdist | newest


PLANS = (Plan("3.10", "floors"), Plan("3.11", "wheel"), Plan("3.12", "sdist"),
         Plan("3.13", "newest"))


@dataclass
class Outcome:
    plan: Plan
    versions: dict[str, str] = field(default_factory=dict)
    steps: list[tuple[str, bool, float, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.steps) and all(passed for _, passed, _, _ in self.steps)

    def record(self, name: str, passed: bool, seconds: float, summary: str) -> None:
        """Keep a step's result and print its line."""
        self.steps.append((name, passed, seconds, summary))
        print(f"  {'ok  ' if passed else 'FAIL'} {name:<10} {seconds:5.0f} s  {summary}",
              flush=True)


class Missing(Exception):
    """The build or an interpreter is not there: exit 2."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("versions", nargs="*", help="e.g. 3.10 3.13 (default: all four)")
    args = parser.parse_args(argv)
    known = {plan.version: plan for plan in PLANS}
    unknown = [v for v in args.versions if v not in known]
    if unknown:
        parser.error(f"unknown version {', '.join(unknown)}: choose from {', '.join(known)}")
    plans = [known[v] for v in args.versions] or list(PLANS)
    started = time.monotonic()
    try:
        interpreters = {plan.version: find_python(plan.version) for plan in plans}
        wheel, sdist = build()
        check_contents(wheel, sdist)
        check_editable()
        floors = runtime_floors(wheel)
        print(f"floors: {', '.join(f'{name} {floor}' for name, floor in floors.items())}")
        outcomes = [run_plan(plan, interpreters[plan.version], wheel, sdist, floors)
                    for plan in plans]
    except Missing as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except AssertionError as error:
        print(f"FAIL: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    print(f"\n{'python':<8}{'install':<9}{'result':<8}versions")
    for outcome in outcomes:
        versions = ", ".join(f"{name} {outcome.versions.get(name, '?')}" for name in RUNTIME)
        status = "ok" if outcome.ok else "FAILED"
        print(f"{outcome.plan.version:<8}{outcome.plan.kind:<9}{status:<8}{versions}")
    print(f"test-pythons: {sum(o.ok for o in outcomes)} of {len(outcomes)} interpreters "
          f"passed in {time.monotonic() - started:.0f} s")
    return 0 if all(outcome.ok for outcome in outcomes) else 1


def find_python(version: str) -> Path:
    """``pythonX.Y`` on PATH, else pyenv's newest ``X.Y.*``."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = sorted(pyenv.glob(f"{version}.*/bin/python{version}"),
                        key=lambda p: [int(n) for n in re.findall(r"\d+", p.parts[-3])])
    on_path = shutil.which(f"python{version}")
    for candidate in [*candidates[::-1], *([Path(on_path)] if on_path else [])]:
        probe = subprocess.run([str(candidate), "-c", "import sys, venv; print(sys.version)"],
                               capture_output=True, text=True)
        if probe.returncode == 0 and probe.stdout.startswith(version + "."):
            return candidate
    raise Missing(f"no Python {version}: install it (pyenv install {version}) or put "
                  f"python{version} on PATH")


def build() -> tuple[Path, Path]:
    """The wheel and the sdist, built from the source tree by ``python -m build``."""
    dist = OUT / "dist"
    shutil.rmtree(OUT, ignore_errors=True)
    dist.mkdir(parents=True)
    print(f"building the wheel and the sdist into {dist.relative_to(ROOT)}/ ...", flush=True)
    done = subprocess.run([sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)],
                          capture_output=True, text=True, timeout=INSTALL_TIMEOUT)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        raise Missing(f"python -m build failed (is the test extra installed?):\n{tail}")
    wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        raise Missing(f"expected one wheel and one sdist in {dist}, found "
                      f"{[p.name for p in dist.iterdir()]}")
    return wheels[0], sdists[0]


def shipped_files() -> list[str]:
    """Every file of the package in the source tree: code, models, colormaps, names, assets."""
    package = ROOT / "guidedbp"
    return sorted(str(path.relative_to(ROOT)) for path in package.rglob("*")
                  if path.is_file() and "__pycache__" not in path.parts)


def check_contents(wheel: Path, sdist: Path) -> None:
    files = shipped_files()
    with zipfile.ZipFile(wheel) as archive:
        in_wheel = set(archive.namelist())
        info = next(name for name in in_wheel if name.endswith(".dist-info/entry_points.txt"))
        entry_points = archive.read(info).decode()
    missing = [name for name in files if name not in in_wheel]
    assert not missing, f"the wheel lacks {missing}"
    assert "guidedbp = guidedbp.__main__:run" in entry_points, entry_points
    assert re.search(r"\[pytest11\]\s+guidedbp = guidedbp\.pytest_plugin", entry_points), \
        entry_points
    with tarfile.open(sdist) as archive:
        top = sdist.name.removesuffix(".tar.gz")
        in_sdist = {name.removeprefix(top + "/") for name in archive.getnames()}
    missing = [name for name in [*files, "pyproject.toml", "README.md"] if name not in in_sdist]
    assert not missing, f"the sdist lacks {missing}"
    print(f"{wheel.name}: all {len(files)} files of guidedbp/ and both entry points; "
          f"{sdist.name}: the same files, pyproject.toml and README.md")


def check_editable() -> None:
    """``pip install -e .``, as ``make install`` runs it (this venv's pip, build isolation),
    into a venv of its own: what it prints must hold no boxed warning. setuptools boxes its
    notes between ``!!`` lines; for a flat layout without ``package-dir`` it printed
    "Editable installation ... Please be careful with folders in your working directory"
    on every install, which read like an error."""
    venv = OUT / "editable-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
                           "install", "--quiet", "--no-deps", "--disable-pip-version-check",
                           "-e", str(ROOT)], capture_output=True, text=True,
                          timeout=INSTALL_TIMEOUT)
    output = done.stdout + done.stderr
    if done.returncode != 0:
        tail = "\n".join(output.splitlines()[-15:])
        raise Missing(f"pip install -e . failed:\n{tail}")
    boxed = [line.strip() for line in output.splitlines()
             if line.strip() == "!!" or "Editable installation" in line]
    assert not boxed, f"pip install -e . prints setuptools' boxed warning:\n{output}"
    shutil.rmtree(venv)
    print("pip install -e .: no warning")


def runtime_floors(wheel: Path) -> dict[str, str]:
    """``name -> floor`` of each runtime dependency, read from the wheel's metadata."""
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read(next(n for n in archive.namelist()
                                     if n.endswith(".dist-info/METADATA"))).decode()
    floors = {}
    for line in metadata.splitlines():
        requirement = line.removeprefix("Requires-Dist:").strip()
        if not line.startswith("Requires-Dist:") or ";" in requirement:  # extras: not runtime
            continue
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*>=\s*([0-9][0-9A-Za-z.]*)", requirement)
        assert match, f"runtime requirement {requirement!r} is not NAME>=FLOOR"
        floors[match[1].lower()] = match[2]
    assert sorted(floors) == sorted(RUNTIME), f"runtime requirements {sorted(floors)}"
    return floors


def run_plan(plan: Plan, python: Path, wheel: Path, sdist: Path,
             floors: dict[str, str]) -> Outcome:
    outcome = Outcome(plan)
    home = OUT / plan.version
    venv, work = home / "venv", home / "work"
    print(f"\n== Python {plan.version} ({plan.kind}): {python}", flush=True)

    def step(name: str, command: list[str], cwd: Path = work, timeout: int = STEP_TIMEOUT,
             check=None) -> bool:
        began = time.monotonic()
        env = {key: value for key, value in os.environ.items()
               if key not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
        env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        env["GUIDEDBP_TEST_MOTO_PYTHON"] = sys.executable  # has moto[server] (make install)
        try:
            done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                                  timeout=timeout)
            output, passed = done.stdout + done.stderr, done.returncode == 0
        except subprocess.TimeoutExpired as expired:
            output, passed = f"timed out after {expired.timeout} s", False
        problem = check(output) if passed and check else None
        passed = passed and not problem
        seconds = time.monotonic() - began
        last = [line for line in output.splitlines()
                if line.strip() and not line.startswith("WARNING:")][-1:] or [""]
        summary = problem or last[0][:110]
        outcome.record(name, passed, seconds, summary)
        if not passed:
            print("\n".join("       | " + line for line in output.splitlines()[-25:]))
        return passed

    work.mkdir(parents=True)
    if not step("venv", [str(python), "-m", "venv", str(venv)], cwd=home):
        return outcome
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
           "--disable-pip-version-check"]
    if plan.kind == "floors":
        target = [str(wheel), *(f"{name}=={floor}" for name, floor in floors.items())]
    elif plan.kind == "newest":
        pip += ["--upgrade", "--upgrade-strategy", "eager"]
        target = [str(wheel)]
    else:
        target = [str(sdist if plan.kind == "sdist" else wheel)]
    s3 = S3_FLOOR if plan.kind == "floors" else ("s3fs",)
    if not step("install", [*pip, *target, *TEST_TOOLS, *s3], timeout=INSTALL_TIMEOUT):
        return outcome
    outcome.versions = installed_versions(venv)
    print(f"  installed: {', '.join(f'{n} {v}' for n, v in outcome.versions.items())}")
    if plan.kind == "floors":
        off = {name: outcome.versions.get(name) for name, floor in floors.items()
               if outcome.versions.get(name) != floor}
        outcome.record("floors", not off, 0.0, f"not at the floor: {off}" if off
                       else "every runtime dependency at its floor")

    python_in_venv = str(venv / "bin" / "python")
    site = f"{venv}{os.sep}"
    step("import", [python_in_venv, "-c", "import guidedbp; print(guidedbp.__file__)"],
         check=lambda out: None if out.strip().startswith(site) else
         f"guidedbp imported from outside the venv: {out.strip()}")
    # A copy of the samples and the tests for the smoke subset (test_demo.py compares the
    # samples the package ships with sample_images/); pytest's rootdir is this folder,
    # which holds no guidedbp/.
    shutil.copytree(ROOT / "tests", work / "tests",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "sample_images", work / "sample_images")
    guidedbp = str(venv / "bin" / "guidedbp")
    # Python 3.10's importlib.metadata once made this say "numpy missing, click missing".
    step("version", [guidedbp, "--version"],
         check=lambda out: version_problem(out, outcome.versions))
    # Outside any clone: nothing here but what the package installed.
    bare = home / "bare"
    bare.mkdir()
    step("demo", [guidedbp, "demo", "-o", "demo-out"], cwd=bare,
         check=lambda out: demo_problem(bare / "demo-out", ROOT / "sample_images" / "shapes"))
    step("samples", [guidedbp, "demo", "--write-samples", "sample_images"], cwd=bare,
         check=lambda out: samples_problem(bare / "sample_images", ROOT / "sample_images"))
    step("detector", [guidedbp, "explain", "demo-det", "sample_images/scenes", "-o", "dets",
                      "--detections", "top:2"], cwd=bare,
         check=lambda out: None if (bare / "dets" / "scenes" /
                                    "scene_0.png.det-1-ring.guided.color.png").is_file()
         else "no dets/scenes/scene_0.png.det-1-ring.guided.color.png")
    step("check", [guidedbp, "check", "demo"])
    step("evaluate", [guidedbp, "evaluate", "demo", "--shapes", "20"],
         check=lambda out: None if re.search(r"^overall\s+20\s", out, re.M) else
         "no 'overall 20' row in the table")
    smoke = SMOKE if plan.kind in ("floors", "newest") else SMOKE_PACKAGING
    step("smoke", [python_in_venv, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                   "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(work), *smoke],
         timeout=1200)
    return outcome


def demo_problem(out: Path, shapes: Path) -> str | None:
    """What is missing from ``guidedbp demo``'s outputs: a panel and an overlay per shape."""
    written = sorted(path.name for path in (out / "samples").glob("*.png"))
    expected = sorted(f"{path.name}.guided.{render}.png" for path in shapes.glob("*.png")
                      for render in ("panel", "overlay"))
    if not expected or written != expected:
        return f"wrote {written}, expected {expected}"
    if not (out / "index.html").is_file() or not (out / "manifest.jsonl").is_file():
        return "no index.html or manifest.jsonl"
    records = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    wrong = [(r["input"], r["status"], r.get("label")) for r in records
             if r["status"] != "ok" or r.get("label") != Path(r["input"]).stem.split("_")[0]]
    return f"records not ok or not labelled by their shape: {wrong}" if wrong else None


def samples_problem(written: Path, clone: Path) -> str | None:
    """How ``guidedbp demo --write-samples``'s folder differs from the clone's
    ``sample_images/``."""
    def tree(root: Path) -> dict[str, bytes]:
        return {path.relative_to(root).as_posix(): path.read_bytes()
                for path in root.rglob("*") if path.is_file()}

    ours, theirs = tree(written), tree(clone)
    differ = sorted(name for name in set(ours) | set(theirs) if ours.get(name) != theirs.get(name))
    return f"sample_images/ differs from the clone's in {differ}" if differ else None


def version_problem(out: str, versions: dict[str, str]) -> str | None:
    """What ``guidedbp --version`` got wrong: a dependency said missing, or not at the
    version installed (``tensorflow-cpu`` would stand for ``tensorflow``; not installed here)."""
    if "missing" in out:
        return f"--version says a dependency is missing: {out.strip()}"
    wrong = [f"{name} {version}" for name, version in versions.items()
             if f" {name} {version}" not in out]
    return f"--version lacks {', '.join(wrong)}: {out.strip()}" if wrong else None


def installed_versions(venv: Path) -> dict[str, str]:
    script = ("import importlib.metadata as m\n"
              f"for name in {list(RUNTIME)!r}:\n"
              "    print(name, m.version(name))")
    done = subprocess.run([str(venv / "bin" / "python"), "-c", script], capture_output=True,
                          text=True)
    return dict(line.split(" ", 1) for line in done.stdout.splitlines())


if __name__ == "__main__":
    sys.exit(main())
