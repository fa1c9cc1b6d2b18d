"""Per-request CPU cost of the ACL: the SDK signing a SEND_MESSAGE_V2 (13 header fields, 1 KiB body) and the
broker's AclGuard.check of it (signature recomputed, PUB checked), plus a HEART_BEAT (body decoded for its groups).
Usage: .venv/bin/python bench/micro/acl_check.py [requests]; µs of process CPU per request, best of 3 rounds.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from types import SimpleNamespace

from orbitmq.acl.guard import AclGuard
from orbitmq.protocol import RemotingCommand, RequestCode
from orbitmq.protocol.acl_sign import sign_request
from orbitmq.protocol.bodies import ConsumerData, HeartbeatData, SubscriptionData
from orbitmq.testing.acl import APP, write_plain_acl

HEADER = {"a": "PG_bench", "b": "TopicAcl", "c": "TBW102", "d": "4", "e": "1", "f": "0", "g": "1764000000000",
          "h": "0", "i": "UNIQ_KEY\u0001C0A80001\u0002WAIT\u0001true\u0002TAGS\u0001TagA", "j": "0", "k": "false",
          "l": "0", "m": "false"}


def _best(fn, n: int) -> float:
    best = float("inf")
    for _ in range(3):
        t0 = time.process_time()
        fn(n)
        best = min(best, (time.process_time() - t0) / n * 1e6)
    return best


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    body = os.urandom(1024)
    hb = HeartbeatData("bench@1", [], [ConsumerData("CG_bench", subscription_data_set=[
        SubscriptionData("TopicAcl", "*")])]).to_json()
    with tempfile.TemporaryDirectory() as d:
        guard = AclGuard(str(write_plain_acl(os.path.join(d, "plain_acl.yml"))))
        conn = SimpleNamespace(remote_addr="127.0.0.1:40000")
        send = sign_request(RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, dict(HEADER), body), APP)
        beat = sign_request(RemotingCommand.request(RequestCode.HEART_BEAT, None, hb), APP)
        assert guard.check(conn, send) is None and guard.check(conn, beat) is None

        def sign(k: int) -> None:
            for _ in range(k):
                sign_request(RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, HEADER, body), APP)

        def check(cmd: RemotingCommand):
            def run(k: int) -> None:
                for _ in range(k):
                    guard.check(conn, cmd)
            return run

        print(f"sign SEND_MESSAGE_V2 (1 KiB body)      {_best(sign, n):7.2f} µs")
        print(f"check SEND_MESSAGE_V2 (1 KiB body)     {_best(check(send), n):7.2f} µs")
        print(f"check HEART_BEAT (1 group, 1 topic)    {_best(check(beat), n):7.2f} µs")


if __name__ == "__main__":
    main()
