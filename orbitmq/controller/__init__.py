"""orbitmq.controller: the RIP-44 controller (replicated broker-group metadata and master election).

Layer L5: state/election/heartbeat are sans-IO; service wires them to the Raft driver and the remoting server.
"""

from __future__ import annotations

from typing import Any

from orbitmq.controller.config import (
    ControllerConfig,
    controller_config_from_properties,
    load_controller_conf,
)
from orbitmq.controller.election import CandidateInfo, DefaultElectPolicy
from orbitmq.controller.heartbeat import BrokerLiveTable
from orbitmq.controller.state import ControllerResult, ControllerStateMachine, ReplicasInfoManager


def __getattr__(name: str) -> Any:
    if name == "ControllerService":  # imported on first use: it pulls in the Raft driver and the remoting layer
        from orbitmq.controller.service import ControllerService

        return ControllerService
    raise AttributeError(name)


__all__ = [
    "BrokerLiveTable",
    "CandidateInfo",
    "ControllerConfig",
    "ControllerResult",
    "ControllerService",
    "ControllerStateMachine",
    "DefaultElectPolicy",
    "ReplicasInfoManager",
    "controller_config_from_properties",
    "load_controller_conf",
]
