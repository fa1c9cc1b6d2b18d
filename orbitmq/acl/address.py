"""RocketMQ's remote address patterns (whiteRemoteAddress, globalWhiteRemoteAddresses), compiled once.

Forms: "" (matches nothing), "*" / "*.*.*.*" (everything), one address (IPv4 or IPv6), a comma list of
addresses, "192.168.0.{1,2,3}" (last octet from a set), and IPv4 octet ranges: "192.168.1.*", "192.168.1.1-200",
"10.*.*.*", "10.1-3.*.*". Anything else is an AclConfigError naming the pattern.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Callable

from orbitmq.base.errors import ConfigError

Matcher = Callable[[str], bool]


class AddressPatternError(ConfigError):
    pass


@functools.lru_cache(maxsize=4096)  # a connection's address repeats on every request it sends
def host_of(remote_addr: str) -> str:
    """'ip:port' (IPv6 without brackets, as our connections spell it) -> the ip, normalised; IPv4-mapped IPv6
    becomes IPv4."""
    host = remote_addr.rpartition(":")[0] if ":" in remote_addr else remote_addr
    host = host.strip("[]")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


def _one_ip(text: str, pattern: str) -> str:
    try:
        ip = ipaddress.ip_address(text.strip())
    except ValueError:
        raise AddressPatternError(f"address pattern {pattern!r}: {text.strip()!r} is not an IP address") from None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


def _octet_rule(part: str, pattern: str) -> tuple[int, int]:
    part = part.strip()
    if part == "*":
        return 0, 255
    lo_s, sep, hi_s = part.partition("-")
    try:
        lo = int(lo_s, 10)
        hi = int(hi_s, 10) if sep else lo
    except ValueError:
        raise AddressPatternError(f"address pattern {pattern!r}: bad octet {part!r}") from None
    if not (0 <= lo <= hi <= 255):
        raise AddressPatternError(f"address pattern {pattern!r}: octet range {part!r} outside 0-255 or reversed")
    return lo, hi


def compile_pattern(pattern: str | None) -> Matcher:
    """A predicate on a normalised host (host_of) for one RocketMQ address pattern."""
    p = (pattern or "").strip()
    if not p:
        return lambda host: False
    if p in ("*", "*.*.*.*", "*:*:*:*:*:*:*:*"):
        return lambda host: True
    if p.endswith("}"):
        head, brace, tail = p.partition("{")
        if not brace or not head.endswith((".", ":")):
            raise AddressPatternError(f"address pattern {pattern!r}: expected a.b.c.{{x,y}}")
        allowed = frozenset(_one_ip(head + v, pattern) for v in tail[:-1].split(",") if v.strip())
        return allowed.__contains__
    if "," in p:
        allowed = frozenset(_one_ip(v, pattern) for v in p.split(",") if v.strip())
        return allowed.__contains__
    if "*" in p or "-" in p:
        parts = p.split(".")
        if len(parts) != 4:
            raise AddressPatternError(f"address pattern {pattern!r}: ranges are supported for IPv4 a.b.c.d only")
        rules = [_octet_rule(x, pattern) for x in parts]

        def in_range(host: str) -> bool:
            octets = host.split(".")
            if len(octets) != 4:
                return False
            try:
                return all(lo <= int(o) <= hi for o, (lo, hi) in zip(octets, rules, strict=True))
            except ValueError:
                return False

        return in_range
    one = _one_ip(p, pattern)
    return lambda host: host == one
