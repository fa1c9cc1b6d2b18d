"""Message ids: the offset msg id (store host + commit-log offset) and the client unique id (UNIQ_KEY)."""

from __future__ import annotations

import ipaddress
import os
import struct
from datetime import datetime


def _addr_bytes(host: str) -> bytes:
    return ipaddress.ip_address(host).packed


def offset_msg_id(host: str, port: int, phys_offset: int) -> str:
    return (_addr_bytes(host) + struct.pack(">iq", port, phys_offset)).hex().upper()


def offset_msg_id_from_host(host_port: str, phys_offset: int) -> str:
    host, _, port = host_port.rpartition(":")
    return offset_msg_id(host.strip("[]"), int(port), phys_offset)


def decode_offset_msg_id(msg_id: str) -> tuple[str, int, int]:
    """-> (host, port, phys_offset). Raises ValueError for malformed ids."""
    raw = bytes.fromhex(msg_id)
    if len(raw) == 16:
        host = str(ipaddress.IPv4Address(raw[:4]))
        port, off = struct.unpack(">iq", raw[4:16])
    elif len(raw) == 28:
        host = str(ipaddress.IPv6Address(raw[:16]))
        port, off = struct.unpack(">iq", raw[16:28])
    else:
        raise ValueError(f"bad offset message id length {len(msg_id)}")
    return host, port, off


class UniqIdGenerator:
    """UNIQ_KEY generator in the Java client's layout: ip(4) pid(2) random(4) ms-since-month(4) counter(2)."""

    def __init__(self, ip: str = "127.0.0.1", seed: int | None = None) -> None:
        rnd = seed if seed is not None else int.from_bytes(os.urandom(4), "big")
        self._prefix = (_addr_bytes(ip) + struct.pack(">HI", os.getpid() & 0xFFFF, rnd & 0xFFFFFFFF)).hex().upper()
        self._counter = 0
        now = datetime.now()
        self._month_start_ms = int(datetime(now.year, now.month, 1).timestamp() * 1000)

    def next_id(self, now_ms: int) -> str:
        self._counter = (self._counter + 1) & 0xFFFF
        delta = (now_ms - self._month_start_ms) & 0xFFFFFFFF
        return self._prefix + f"{delta:08X}{self._counter:04X}"
