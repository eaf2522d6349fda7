"""Shared test setup: the SSH test lab's fixtures (tests/lab) for every test module."""

pytest_plugins = ["tests.lab.fixtures"]
