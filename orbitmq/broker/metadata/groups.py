"""SubscriptionGroupManager: consumer group configs (config/subscriptionGroup.json), built-in groups, auto-create.

Java JSON shape; unknown keys written by newer brokers (5.x attributes, retry policy) are kept and written back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orbitmq.broker.metadata.data_version import DataVersion
from orbitmq.broker.metadata.name_filter import drop_illegal
from orbitmq.broker.metadata.versioned import VersionedTable
from orbitmq.model.names import group_error

SYS_CONSUMER_GROUP_PREFIX = "CID_RMQ_SYS_"
BUILTIN_GROUPS = (
    "TOOLS_CONSUMER",
    "FILTERSRV_CONSUMER",
    "SELF_TEST_C_GROUP",
    "CID_ONS-HTTP-PROXY",
    "CID_ONSAPI_PULL",
    "CID_ONSAPI_PERMISSION",
    "CID_ONSAPI_OWNER",
    "CID_RMQ_SYS_TRANS",
)

_FIELDS = {
    "groupName": "group_name",
    "consumeEnable": "consume_enable",
    "consumeFromMinEnable": "consume_from_min_enable",
    "consumeBroadcastEnable": "consume_broadcast_enable",
    "retryQueueNums": "retry_queue_nums",
    "retryMaxTimes": "retry_max_times",
    "brokerId": "broker_id",
    "whichBrokerWhenConsumeSlowly": "which_broker_when_consume_slowly",
    "notifyConsumerIdsChangedEnable": "notify_consumer_ids_changed_enable",
}
_BOOL_FIELDS = frozenset(
    {"consumeEnable", "consumeFromMinEnable", "consumeBroadcastEnable", "notifyConsumerIdsChangedEnable"}
)


def _to_bool(v: Any) -> bool:
    if isinstance(v, str):
        return v.strip().lower() == "true"
    return bool(v)


@dataclass(slots=True)
class SubscriptionGroupConfig:
    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    extra: dict[str, Any] = field(default_factory=dict)  # keys this version does not model, kept verbatim

    def to_json_obj(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.extra)
        for key, attr in _FIELDS.items():
            out[key] = getattr(self, attr)
        return dict(sorted(out.items()))

    @classmethod
    def from_json_obj(cls, d: dict[str, Any]) -> SubscriptionGroupConfig:
        if not isinstance(d, dict):
            raise ValueError("subscription group config is not an object")
        name = d.get("groupName")
        if not isinstance(name, str) or not name:
            raise ValueError("subscription group config has no groupName")
        kwargs: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in d.items():
            attr = _FIELDS.get(key)
            if attr is None:
                extra[key] = value
            elif key == "groupName":
                kwargs[attr] = value
            elif key in _BOOL_FIELDS:
                kwargs[attr] = _to_bool(value)
            else:
                kwargs[attr] = int(value)
        return cls(extra=extra, **kwargs)


class SubscriptionGroupManager(VersionedTable[SubscriptionGroupConfig]):
    """Group table with Java-compatible persistence; every change bumps the DataVersion and persists."""

    FILE_NAME = "subscriptionGroup.json"
    TABLE_KEY = "subscriptionGroupTable"

    def __init__(self, config_dir: str, config: Any) -> None:
        super().__init__(config_dir)
        self._config = config
        self._table.update({g: SubscriptionGroupConfig(g) for g in BUILTIN_GROUPS})

    def _decode(self, obj: Any) -> tuple[dict[str, SubscriptionGroupConfig], DataVersion]:
        return decode_group_wrapper(obj)

    def get(self, group: str) -> SubscriptionGroupConfig | None:
        return self._table.get(group)

    def all(self) -> dict[str, SubscriptionGroupConfig]:
        return dict(self._table)

    def __contains__(self, group: object) -> bool:
        return group in self._table

    def find_or_create(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config; created with defaults when auto-create is on or the group is a system group."""
        cfg = self._table.get(group)
        if cfg is not None:
            return cfg
        if not (self._config.auto_create_subscription_group or group.startswith(SYS_CONSUMER_GROUP_PREFIX)):
            return None
        if self.quota is not None:
            self.quota.admit(f"subscription group [{group}]")  # AutoCreateRefused over the per-client cap
        cfg = SubscriptionGroupConfig(group)
        self._table[group] = cfg
        self._changed()
        return cfg

    def update(self, cfg: SubscriptionGroupConfig) -> None:
        self._table[cfg.group_name] = cfg
        self._changed()

    def delete(self, group: str) -> bool:
        if self._table.pop(group, None) is None:
            return False
        self._changed()
        return True

def decode_group_wrapper(obj: Any) -> tuple[dict[str, SubscriptionGroupConfig], DataVersion]:
    if not isinstance(obj, dict):
        raise ValueError("top level is not a JSON object")
    raw = obj.get("subscriptionGroupTable") or {}
    if not isinstance(raw, dict):
        raise ValueError("subscriptionGroupTable is not an object")
    table: dict[str, SubscriptionGroupConfig] = {}
    for name, d in raw.items():
        if isinstance(d, dict) and "groupName" not in d:
            d = {**d, "groupName": name}
        cfg = SubscriptionGroupConfig.from_json_obj(d)
        if cfg.group_name != name:  # lookups use the key: a mismatching groupName follows it
            cfg.group_name = str(name)
        table[str(name)] = cfg
    return drop_illegal(table, group_error, "subscriptionGroupTable"), DataVersion.from_json_obj(obj.get("dataVersion"))
