"""RIP-32 bodies: BrokerMemberGroup (GET_BROKER_MEMBER_GROUP, code 901).

Wire shape (GetBrokerMemberGroupResponseBody):
  {"brokerMemberGroup":{"brokerAddrs":{"0":"ip:port","1":"ip:port"},"brokerName":"b","cluster":"c"}}
brokerAddrs is a Map<Long,String>; quoted (standard) and unquoted (fastjson) keys are both accepted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orbitmq.protocol import fastjson
from orbitmq.protocol.bodies.base import JsonBody, as_int

MASTER_ID = 0


@dataclass(slots=True)
class BrokerMemberGroup(JsonBody):
    """The live members of one broker group as the name server sees them (id -> address)."""

    cluster: str = ""
    broker_name: str = ""
    broker_addrs: dict[int, str] = field(default_factory=dict)

    def min_broker_id(self) -> int | None:
        return min(self.broker_addrs) if self.broker_addrs else None

    def master_addr(self) -> str | None:
        return self.broker_addrs.get(MASTER_ID)

    def to_json_obj(self, standard: bool = True) -> dict[str, Any]:
        addrs: dict[Any, str]
        if standard:
            addrs = {str(k): v for k, v in sorted(self.broker_addrs.items())}
        else:
            addrs = dict(sorted(self.broker_addrs.items()))
        return {"brokerMemberGroup": {"brokerAddrs": addrs, "brokerName": self.broker_name,
                                      "cluster": self.cluster}}

    def to_json(self, standard: bool = True) -> bytes:
        return fastjson.dumps(self.to_json_obj(standard), standard=standard)

    @classmethod
    def from_json_obj(cls, d: dict[str, Any]) -> BrokerMemberGroup:
        # accept the response-body wrapper and the bare member group alike
        inner = d.get("brokerMemberGroup", d) if isinstance(d, dict) else d
        if inner is None:
            return cls()
        if not isinstance(inner, dict):
            raise TypeError(f"brokerMemberGroup is a {type(inner).__name__}, not an object")
        raw = inner.get("brokerAddrs") or {}
        if not isinstance(raw, dict):
            raise TypeError("brokerAddrs is not an object")
        return cls(
            cluster=str(inner.get("cluster") or ""),
            broker_name=str(inner.get("brokerName") or ""),
            broker_addrs={as_int(k): str(v) for k, v in raw.items()},
        )
