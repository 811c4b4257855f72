"""The version of smc-steer (also in pyproject.toml; a test checks that they agree)."""

VERSION = "0.2.0"
