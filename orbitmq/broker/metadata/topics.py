"""TopicConfigManager: the broker's topic table (config/topics.json), built-in topics and auto-creation on send.

Owns topic validation rules and the system-topic list. Never touches the store or the network: changes are
announced through `on_change` (the app wires it to re-registration with the name servers).
"""

from __future__ import annotations

from typing import Any

from orbitmq.base.errors import ConfigError
from orbitmq.broker.metadata.data_version import DataVersion
from orbitmq.broker.metadata.name_filter import drop_illegal
from orbitmq.broker.metadata.versioned import VersionedTable
from orbitmq.model.enums import Perm
from orbitmq.model.names import TOPIC_MAX_LENGTH as TOPIC_MAX_LENGTH
from orbitmq.model.names import server_name_error, topic_error
from orbitmq.model.topic import TopicConfig

AUTO_CREATE_TOPIC_KEY_TOPIC = "TBW102"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
BENCHMARK_TOPIC = "BenchmarkTest"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
DEFAULT_TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"

SYSTEM_TOPICS = frozenset(
    {
        AUTO_CREATE_TOPIC_KEY_TOPIC,
        SCHEDULE_TOPIC,
        BENCHMARK_TOPIC,
        TRANS_HALF_TOPIC,
        DEFAULT_TRACE_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT,
    }
)

MAX_QUEUE_NUMS = 1024
_PERM_MASK = Perm.READ | Perm.WRITE | Perm.INHERIT  # PERM_PRIORITY (8) is not a valid topic perm


def validate_topic_name(topic: str | None) -> str | None:
    """None if `topic` is a legal name, else the error text Java's TopicValidator gives (orbitmq.model.names)."""
    return topic_error(topic)


def validate_topic_config(tc: TopicConfig) -> str | None:
    """None if queue counts and perm are in range, else a clear error text."""
    err = validate_topic_name(tc.topic_name)
    if err:
        return err
    for label, n in (("readQueueNums", tc.read_queue_nums), ("writeQueueNums", tc.write_queue_nums)):
        if not 1 <= n <= MAX_QUEUE_NUMS:
            return f"{label} {n} is out of range, must be between 1 and {MAX_QUEUE_NUMS}"
    if tc.perm < 0 or tc.perm & ~_PERM_MASK:
        return f"perm {tc.perm} is invalid, must be a combination of 4 (read), 2 (write), 1 (inherit)"
    if tc.topic_filter_type not in ("SINGLE_TAG", "MULTI_TAG"):
        return f"topicFilterType {tc.topic_filter_type!r} is invalid, must be SINGLE_TAG or MULTI_TAG"
    return None


def is_system_topic_name(topic: str) -> bool:
    """The static system topics and the reserved `rmq_sys_` prefix (cluster/broker-name topics need the config)."""
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


class TopicConfigManager(VersionedTable[TopicConfig]):
    """Topic table with Java-compatible persistence; every change bumps the DataVersion and persists."""

    FILE_NAME = "topics.json"
    TABLE_KEY = "topicConfigTable"

    def __init__(self, config_dir: str, config: Any) -> None:
        super().__init__(config_dir)
        self._config = config
        self._system_topics: set[str] = set(SYSTEM_TOPICS)
        self._add_builtin_topics()

    def _decode(self, obj: Any) -> tuple[dict[str, TopicConfig], DataVersion]:
        return _decode_wrapper(obj)

    # ---- built-ins -------------------------------------------------------------------------------------
    def _add_builtin_topics(self) -> None:
        cfg = self._config
        # the broker and cluster names become topics (and so directories): a name outside the safe set is a
        # configuration error, refused before anything is built from it
        err = (server_name_error(cfg.broker_name, "brokerName")
               or server_name_error(cfg.broker_cluster_name, "brokerClusterName"))
        if err is not None:
            raise ConfigError(err)
        rw = Perm.READ | Perm.WRITE
        builtin: list[TopicConfig] = [TopicConfig(SELF_TEST_TOPIC, 1, 1, rw)]
        if cfg.auto_create_topic_enable:
            n = cfg.default_topic_queue_nums
            builtin.append(TopicConfig(AUTO_CREATE_TOPIC_KEY_TOPIC, n, n, rw | Perm.INHERIT))
        builtin.append(TopicConfig(BENCHMARK_TOPIC, 1024, 1024, rw))
        cluster = cfg.broker_cluster_name
        builtin.append(TopicConfig(cluster, 16, 16, Perm.INHERIT | (rw if cfg.cluster_topic_enable else 0)))
        broker = cfg.broker_name
        builtin.append(TopicConfig(broker, 1, 1, Perm.INHERIT | (rw if cfg.broker_topic_enable else 0)))
        builtin.append(TopicConfig(OFFSET_MOVED_EVENT, 1, 1, rw))
        builtin.append(TopicConfig(SCHEDULE_TOPIC, 18, 18, rw))
        if getattr(cfg, "trace_topic_enable", False):
            trace = getattr(cfg, "msg_trace_topic_name", "") or DEFAULT_TRACE_TOPIC
            builtin.append(TopicConfig(trace, 1, 1, rw))
            self._system_topics.add(trace)
        builtin.append(TopicConfig(f"{cluster}_REPLY_TOPIC", 1, 1, rw))
        for tc in builtin:
            self._table[tc.topic_name] = tc
        self._system_topics.update((cluster, broker))

    def is_system_topic(self, topic: str) -> bool:
        return topic in self._system_topics or topic.startswith(SYSTEM_TOPIC_PREFIX)

    # ---- queries ---------------------------------------------------------------------------------------
    def get(self, topic: str) -> TopicConfig | None:
        return self._table.get(topic)

    def all(self) -> dict[str, TopicConfig]:
        return dict(self._table)

    def __contains__(self, topic: object) -> bool:
        return topic in self._table

    def __len__(self) -> int:
        return len(self._table)

    # ---- changes ---------------------------------------------------------------------------------------
    def create_or_update(self, tc: TopicConfig) -> None:
        self._table[tc.topic_name] = tc
        self._changed()

    def delete(self, topic: str) -> bool:
        if self._table.pop(topic, None) is None:
            return False
        self._changed()
        return True

    def create_on_send(
        self, topic: str, default_topic: str, default_queue_nums: int, topic_sys_flag: int = 0
    ) -> TopicConfig | None:
        """Create `topic` from the template `default_topic` if the template may be inherited (§6.10)."""
        existing = self._table.get(topic)
        if existing is not None:
            return existing
        template = self._table.get(default_topic)
        if template is None:
            return None
        perm = template.perm
        if default_topic == AUTO_CREATE_TOPIC_KEY_TOPIC and not self._config.auto_create_topic_enable:
            perm = Perm.READ | Perm.WRITE
        if not perm & Perm.INHERIT:
            return None
        if self.quota is not None:
            self.quota.admit(f"topic [{topic}]")  # AutoCreateRefused over the per-client cap
        queue_nums = max(0, min(default_queue_nums, template.write_queue_nums))
        tc = TopicConfig(
            topic_name=topic,
            read_queue_nums=queue_nums,
            write_queue_nums=queue_nums,
            perm=perm & ~Perm.INHERIT,
            topic_filter_type=template.topic_filter_type,
            topic_sys_flag=topic_sys_flag,
        )
        self._table[topic] = tc
        self._changed()
        return tc

    def adopt_topics_with_data(self, queue_max: dict[tuple[str, int], int]) -> list[TopicConfig]:
        """Controller mode, a broker becoming master: a TopicConfig (queue count = highest queue id with data + 1,
        read/write) for every topic whose ConsumeQueues hold data but which has no config here. A message
        acknowledged under allAckInSyncStateSet is on every member, so the data proves the topic existed even if
        this broker never synced its config. System and illegal names are left out. Returns what was added."""
        highest: dict[str, int] = {}
        for (topic, queue_id), max_offset in queue_max.items():
            if max_offset > 0 and queue_id >= 0:
                highest[topic] = max(highest.get(topic, -1), queue_id)
        added: list[TopicConfig] = []
        for topic, top in sorted(highest.items()):
            if topic in self._table or self.is_system_topic(topic) or validate_topic_name(topic) is not None:
                continue
            n = min(top + 1, MAX_QUEUE_NUMS)
            tc = TopicConfig(topic, n, n, Perm.READ | Perm.WRITE)
            self._table[topic] = tc
            added.append(tc)
        if added:
            self._changed()
        return added

    def create_system_topic(self, topic: str, queue_nums: int, perm: int = 6, topic_sys_flag: int = 0) -> TopicConfig:
        """Get or create an internal topic (%RETRY%/%DLQ% groups, transaction topics, ...)."""
        existing = self._table.get(topic)
        if existing is not None:
            return existing
        tc = TopicConfig(topic, queue_nums, queue_nums, perm, topic_sys_flag=topic_sys_flag)
        self._table[topic] = tc
        self._changed()
        return tc

def _decode_wrapper(obj: Any) -> tuple[dict[str, TopicConfig], DataVersion]:
    if not isinstance(obj, dict):
        raise ValueError("top level is not a JSON object")
    raw = obj.get("topicConfigTable") or {}
    if not isinstance(raw, dict):
        raise ValueError("topicConfigTable is not an object")
    table: dict[str, TopicConfig] = {}
    for name, d in raw.items():
        if not isinstance(d, dict):
            raise ValueError(f"topic {name!r}: config is not an object")
        d = dict(d)
        d.setdefault("topicName", name)
        tc = TopicConfig.from_json_obj(d)
        if tc.topic_name != name:  # the key is what lookups use: a mismatching topicName follows the key
            tc.topic_name = str(name)
        table[str(name)] = tc
    return drop_illegal(table, topic_error, "topicConfigTable"), DataVersion.from_json_obj(obj.get("dataVersion"))
