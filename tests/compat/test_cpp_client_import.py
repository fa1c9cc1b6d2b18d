"""The official C++ client must import where the compatibility suite runs; otherwise this fails with the reason
(the suite never skips itself)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.compat


def test_official_cpp_client_imports() -> None:
    try:
        from rocketmq.client import Message, Producer, PushConsumer  # noqa: F401
    except Exception as e:
        pytest.fail(f"rocketmq==0.4.4 (official C++ client) does not import: {type(e).__name__}: {e}; install the "
                    "test extras (./dev test or pip install -e '.[test]'); its wheel bundles librocketmq.so for "
                    "x86_64 Linux, which needs libstdc++6", pytrace=False)
