"""Shared test set-up: quiet TensorFlow logs, deterministic Keras."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # before any TensorFlow import
if os.environ.get("PYTEST_XDIST_WORKER"):
    # make test runs one worker per core: one TensorFlow thread pool thread each, not two
    # pools spinning on both cores (about 5 % of the suite's CPU-seconds). The
    # subprocesses the tests start inherit it; the package's own defaults are untouched.
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
    os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")


import itertools  # noqa: E402

import pytest  # noqa: E402

_buckets = itertools.count()


@pytest.fixture(scope="session")
def s3_server():
    """moto's S3 server on 127.0.0.1 for this test session (one per pytest worker), with
    ``AWS_ENDPOINT_URL`` and dummy credentials in the environment; its endpoint URL."""
    from tests import s3server

    process, endpoint = s3server.start()
    saved = {key: os.environ.get(key) for key in s3server.environment(endpoint)}
    os.environ.update(s3server.environment(endpoint))
    try:
        yield endpoint
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        process.terminate()
        process.wait()


@pytest.fixture
def bucket(s3_server):
    """A new, empty bucket on the server: its ``s3://name`` URL."""
    from tests import s3server

    return s3server.make_bucket(f"guidedbp-test-{os.getpid()}-{next(_buckets)}")


#: The slowest test files, slowest first: those whose heavy tests make test-all runs, then
#: make test's (its CPU-seconds summed per file: test_readme.py about 100, the last here
#: about 20). Two workers take whole files in collection order (--dist loadfile): starting
#: with the longest ones leaves no long file alone at the end.
SLOW_FIRST = (
    "tests/hostile/test_blackbox_memory.py", "tests/test_engine_reference.py",
    "tests/test_pytest_plugin.py", "tests/test_detection_hub.py", "tests/test_ray_store.py",
    "tests/test_readme.py", "tests/test_target_checks.py", "tests/test_generalised_guided.py",
    "tests/test_activation_reference.py", "tests/test_cli_detections.py",
    "tests/test_explain_cli.py", "tests/test_fast_errors.py", "tests/test_loading.py",
    "tests/test_cli_targets.py", "tests/test_library.py", "tests/test_demo_detector.py",
    "tests/test_store_hostile.py",
)


def pytest_collection_modifyitems(session, config, items):
    """The files of :data:`SLOW_FIRST` first, in its order; the rest as collected (a
    stable sort: each file's tests keep their order)."""
    rank = {name: index for index, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))
