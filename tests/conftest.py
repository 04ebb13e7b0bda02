"""Shared test set-up: quiet TensorFlow logs, deterministic Keras."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # before any TensorFlow import


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
