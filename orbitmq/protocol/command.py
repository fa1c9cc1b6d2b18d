"""RemotingCommand: one request or response of the RocketMQ remoting protocol (header fields + body).

Pure data; encoding lives in header_json / header_binary / frame. Opaques come from a process-wide counter.
"""

from __future__ import annotations

import itertools

from orbitmq.protocol.codes import CURRENT_VERSION, FLAG_ONEWAY, FLAG_RESPONSE, ResponseCode

_opaque_counter = itertools.count(1)


def next_opaque() -> int:
    """Process-wide request id, kept within the non-negative int32 range (Go reads it as int32)."""
    return next(_opaque_counter) & 0x7FFFFFFF


class RemotingCommand:
    __slots__ = ("code", "language", "version", "opaque", "flag", "remark", "ext_fields", "body",
                 "serialize_type")

    def __init__(
        self,
        code: int,
        *,
        language: str = "JAVA",
        version: int = CURRENT_VERSION,
        opaque: int = 0,
        flag: int = 0,
        remark: str | None = None,
        ext_fields: dict[str, str] | None = None,
        body: bytes | None = None,
        serialize_type: int = 0,
    ) -> None:
        self.code = code
        self.language = language
        self.version = version
        self.opaque = opaque
        self.flag = flag
        self.remark = remark
        self.ext_fields = ext_fields
        self.body = body
        self.serialize_type = serialize_type

    @classmethod
    def request(
        cls,
        code: int,
        ext_fields: dict[str, str] | None = None,
        body: bytes | None = None,
        *,
        oneway: bool = False,
        serialize_type: int = 0,
    ) -> RemotingCommand:
        return cls(
            int(code),
            opaque=next_opaque(),
            flag=FLAG_ONEWAY if oneway else 0,
            ext_fields=ext_fields,
            body=body,
            serialize_type=serialize_type,
        )

    def response(
        self,
        code: int = ResponseCode.SUCCESS,
        remark: str | None = None,
        ext_fields: dict[str, str] | None = None,
        body: bytes | None = None,
    ) -> RemotingCommand:
        """A response to this request: same opaque and serialization, RESPONSE flag set."""
        return RemotingCommand(
            int(code),
            opaque=self.opaque,
            flag=FLAG_RESPONSE,
            remark=remark,
            ext_fields=ext_fields,
            body=body,
            serialize_type=self.serialize_type,
        )

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    def mark_oneway(self) -> None:
        self.flag |= FLAG_ONEWAY

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RemotingCommand):
            return NotImplemented
        return all(getattr(self, s) == getattr(other, s) for s in self.__slots__)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        kind = "response" if self.is_response else ("oneway" if self.is_oneway else "request")
        body_len = len(self.body) if self.body is not None else 0
        return (
            f"RemotingCommand({kind} code={self.code} opaque={self.opaque} flag={self.flag} "
            f"lang={self.language} ver={self.version} remark={self.remark!r} ext={self.ext_fields!r} "
            f"body={body_len}B ser={self.serialize_type})"
        )
