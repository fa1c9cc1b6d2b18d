"""Message (what a producer sends) and MessageExt (a stored message as read back)."""

from __future__ import annotations

from dataclasses import dataclass, field

from orbitmq.model.msg_id import offset_msg_id_from_host
from orbitmq.model.properties import Prop


@dataclass(slots=True)
class Message:
    topic: str
    body: bytes
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0

    @property
    def tags(self) -> str | None:
        return self.properties.get(Prop.TAGS)

    @tags.setter
    def tags(self, value: str | None) -> None:
        if value:
            self.properties[Prop.TAGS] = value
        else:
            self.properties.pop(Prop.TAGS, None)

    @property
    def keys(self) -> list[str]:
        raw = self.properties.get(Prop.KEYS)
        return [k for k in raw.split(" ") if k] if raw else []

    @keys.setter
    def keys(self, value: str | list[str] | None) -> None:
        if not value:
            self.properties.pop(Prop.KEYS, None)
        else:
            self.properties[Prop.KEYS] = value if isinstance(value, str) else " ".join(value)

    @property
    def delay_level(self) -> int:
        return int(self.properties.get(Prop.DELAY, "0") or 0)

    @delay_level.setter
    def delay_level(self, level: int) -> None:
        self.properties[Prop.DELAY] = str(level)

    def set_delivery_time_ms(self, deliver_ms: int) -> None:
        """Timer message (RocketMQ 5): deliver at this absolute time, ms since the epoch."""
        self.properties[Prop.TIMER_DELIVER_MS] = str(int(deliver_ms))

    def set_delay_sec(self, seconds: int) -> None:
        """Timer message (RocketMQ 5): deliver this many seconds after the broker stores it."""
        self.properties[Prop.TIMER_DELAY_SEC] = str(int(seconds))


@dataclass(slots=True)
class MessageExt:
    """A message decoded from the stored-record layout (CommitLog, pull/query/view bodies)."""

    topic: str
    body: bytes
    properties: dict[str, str]
    flag: int
    queue_id: int
    queue_offset: int
    phys_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: str
    store_timestamp: int
    store_host: str
    reconsume_times: int
    prepared_transaction_offset: int
    body_crc: int
    store_size: int

    @property
    def tags(self) -> str | None:
        return self.properties.get(Prop.TAGS)

    @property
    def keys(self) -> list[str]:
        raw = self.properties.get(Prop.KEYS)
        return [k for k in raw.split(" ") if k] if raw else []

    @property
    def offset_msg_id(self) -> str:
        return offset_msg_id_from_host(self.store_host, self.phys_offset)

    @property
    def msg_id(self) -> str:
        """The client-visible id: UNIQ_KEY when present, else the offset message id (as Java)."""
        return self.properties.get(Prop.UNIQ_KEY) or self.offset_msg_id
