"""Broker metadata: topic configs, subscription groups and consumer offsets, persisted as RocketMQ JSON files.

Each manager owns one file under <storePathRootDir>/config and writes it atomically (tmp + fsync + .bak + rename).
Managers never touch the network or the message store.
"""

from orbitmq.broker.metadata.data_version import DataVersion
from orbitmq.broker.metadata.groups import SubscriptionGroupConfig, SubscriptionGroupManager
from orbitmq.broker.metadata.offsets import ConsumerOffsetManager
from orbitmq.broker.metadata.topics import TopicConfigManager, is_system_topic_name, validate_topic_name

__all__ = [
    "ConsumerOffsetManager",
    "DataVersion",
    "SubscriptionGroupConfig",
    "SubscriptionGroupManager",
    "TopicConfigManager",
    "is_system_topic_name",
    "validate_topic_name",
]
