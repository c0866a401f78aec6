"""Shared constants of the local-training tests (their benchmark is the ``train_bench`` fixture, conftest.py)."""

from __future__ import annotations

DOMAINS = ("ecommerce", "email")
TINY = ["--size", "xs", "--batch-size", "8", "--eval-steps", "3", "--logging-steps", "1"]
"""SFT flags of the tests: the 0.3M-parameter model, three steps between validations."""
