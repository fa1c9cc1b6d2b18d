"""Argument types shared by the benchmark scripts' command lines."""

from __future__ import annotations

import argparse


def key_value(text: str) -> tuple[str, str]:
    """argparse type of a KEY=VALUE setting (a broker.conf line): (key, value); an empty key or no '=' is refused
    with a usage error."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"KEY=VALUE, got {text!r}")
    return key, value
