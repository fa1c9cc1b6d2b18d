"""OrbitMQ broker: RocketMQ 4.x compatible broker process (facade: Broker, BrokerConfig, load_broker_conf).

Attributes are resolved lazily so that light modules (context, config) import without pulling in the store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orbitmq.broker.app import Broker
    from orbitmq.broker.config import BrokerConfig
    from orbitmq.broker.config_file import load_broker_conf

__all__ = ["Broker", "BrokerConfig", "load_broker_conf"]


def __getattr__(name: str) -> Any:
    if name == "Broker":
        from orbitmq.broker.app import Broker

        return Broker
    if name == "BrokerConfig":
        from orbitmq.broker.config import BrokerConfig

        return BrokerConfig
    if name == "load_broker_conf":
        from orbitmq.broker.config_file import load_broker_conf

        return load_broker_conf
    raise AttributeError(f"module 'orbitmq.broker' has no attribute {name!r}")
