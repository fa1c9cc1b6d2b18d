"""Domain types and the pure codecs shared by store, broker and client (sans-IO)."""

from orbitmq.model.enums import BrokerRole, FlushDiskType, MessageModel, Perm, SysFlag, TopicFilterType
from orbitmq.model.message import Message, MessageExt
from orbitmq.model.msg_id import UniqIdGenerator, decode_offset_msg_id, offset_msg_id
from orbitmq.model.properties import Prop, decode_properties, encode_properties
from orbitmq.model.record import (
    BLANK_MAGIC,
    MAGIC_V1,
    decode_record,
    encode_record,
    iter_records,
    pack_host,
    patch_record,
    unpack_host,
)
from orbitmq.model.tags import java_hash, tag_code, tags_of_expression
from orbitmq.model.topic import MessageQueue, TopicConfig

__all__ = [
    "BLANK_MAGIC",
    "BrokerRole",
    "FlushDiskType",
    "MAGIC_V1",
    "Message",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
    "Perm",
    "Prop",
    "SysFlag",
    "TopicConfig",
    "TopicFilterType",
    "UniqIdGenerator",
    "decode_offset_msg_id",
    "decode_properties",
    "decode_record",
    "encode_properties",
    "encode_record",
    "iter_records",
    "java_hash",
    "offset_msg_id",
    "pack_host",
    "patch_record",
    "tag_code",
    "tags_of_expression",
    "unpack_host",
]
