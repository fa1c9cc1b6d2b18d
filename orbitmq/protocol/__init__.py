"""Wire codec of the RocketMQ 4.x remoting protocol (sans-IO): commands, frames, headers, codes, bodies."""

from orbitmq.protocol import fastjson
from orbitmq.protocol.codes import (
    CURRENT_VERSION,
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    LanguageCode,
    RequestCode,
    ResponseCode,
    SerializeType,
)
from orbitmq.protocol.command import RemotingCommand, next_opaque
from orbitmq.protocol.ext import (
    REQUIRED,
    HeaderError,
    ext_bool,
    ext_int,
    ext_str,
    normalize_send_header,
    to_send_v2,
)
from orbitmq.protocol.frame import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, encode_frame

__all__ = [
    "CURRENT_VERSION",
    "DEFAULT_MAX_FRAME_SIZE",
    "FLAG_ONEWAY",
    "FLAG_RESPONSE",
    "FrameDecoder",
    "HeaderError",
    "LanguageCode",
    "REQUIRED",
    "RemotingCommand",
    "RequestCode",
    "ResponseCode",
    "SerializeType",
    "encode_frame",
    "ext_bool",
    "ext_int",
    "ext_str",
    "fastjson",
    "next_opaque",
    "normalize_send_header",
    "to_send_v2",
]
