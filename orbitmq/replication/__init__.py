"""orbitmq.replication: classic master/slave CommitLog replication (sans-IO cores + the asyncio driver).

Layer L4: imports store, base, model only. The broker wires it as a service (broker/services/ha.py).
"""

from orbitmq.replication.driver import HAClient, HAServer, ReplicationConfig
from orbitmq.replication.epoch import EpochCache
from orbitmq.replication.frames import DataDecoder, DataFrame, ReportDecoder, encode_data, encode_report
from orbitmq.replication.master import HAMaster
from orbitmq.replication.slave import HASlave, Verdict

__all__ = [
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
