"""orbitmq.replication: CommitLog replication — classic master/slave HA and RIP-44 AutoSwitch HA (sans-IO cores
+ asyncio drivers).

Layer L4: imports store, base, model only. The broker wires it as a service (broker/services/ha.py).
"""

from orbitmq.replication.autoswitch_driver import AutoSwitchConfig, AutoSwitchHAService
from orbitmq.replication.autoswitch_master import AutoSwitchMaster
from orbitmq.replication.autoswitch_slave import AutoSwitchSlave
from orbitmq.replication.driver import HAClient, HAServer, ReplicationConfig
from orbitmq.replication.epoch import EpochCache
from orbitmq.replication.frames import DataDecoder, DataFrame, ReportDecoder, encode_data, encode_report
from orbitmq.replication.master import HAMaster
from orbitmq.replication.slave import HASlave, Verdict

__all__ = [
    "AutoSwitchConfig",
    "AutoSwitchHAService",
    "AutoSwitchMaster",
    "AutoSwitchSlave",
    "DataDecoder",
    "DataFrame",
    "EpochCache",
    "HAClient",
    "HAMaster",
    "HASlave",
    "HAServer",
    "ReplicationConfig",
    "ReportDecoder",
    "Verdict",
    "encode_data",
    "encode_report",
]
