"""Shared test set-up: quiet TensorFlow logs, deterministic Keras."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # before any TensorFlow import
