"""ConsumeStatsList: the GET_BROKER_CONSUME_STATS (317) body, every group's ConsumeStats on one broker."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orbitmq.protocol.bodies.admin import ConsumeStats
from orbitmq.protocol.bodies.base import JsonBody, as_int


@dataclass(slots=True)
class ConsumeStatsList(JsonBody):
    """consumeStatsList: [{group: [ConsumeStats, ...]}, ...] (one map per group, as the Java broker builds it)."""

    consume_stats_list: list[dict[str, list[ConsumeStats]]] = field(default_factory=list)
    broker_addr: str = ""
    total_diff: int = 0

    def to_json_obj(self) -> dict[str, Any]:
        return {"brokerAddr": self.broker_addr, "totalDiff": self.total_diff,
                "consumeStatsList": [{g: [s.to_json_obj() for s in lst] for g, lst in entry.items()}
                                     for entry in self.consume_stats_list]}

    @classmethod
    def from_json_obj(cls, d: dict[str, Any]) -> ConsumeStatsList:
        entries = [{str(g): [ConsumeStats.from_json_obj(s) for s in lst or []] for g, lst in (entry or {}).items()}
                   for entry in d.get("consumeStatsList") or []]
        return cls(entries, str(d.get("brokerAddr") or ""), as_int(d.get("totalDiff")))
