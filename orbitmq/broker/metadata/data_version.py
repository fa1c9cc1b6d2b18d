"""DataVersion (the (stateVersion, counter, timestamp) stamp of a metadata table) and the lenient load of metadata
files.

Files may come from a Java broker: fastjson writes unquoted integer map keys, which are accepted here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from orbitmq.base.clock import now_ms
from orbitmq.base.errors import ConfigError, ProtocolError
from orbitmq.protocol import fastjson

T = TypeVar("T")


@dataclass(slots=True)
class DataVersion:
    counter: int = 0
    timestamp: int = field(default_factory=now_ms)
    state_version: int = 0  # 5.x: the store's state-machine version (0 outside controller mode); JSON only if set

    def next_version(self, now: int | None = None) -> None:
        self.timestamp = now_ms() if now is None else now
        self.counter += 1

    def copy(self) -> DataVersion:
        return DataVersion(self.counter, self.timestamp, self.state_version)

    def assign(self, other: DataVersion) -> None:
        self.counter = other.counter
        self.timestamp = other.timestamp
        self.state_version = other.state_version

    def order_key(self) -> tuple[int, int, int]:
        """Java 5.x DataVersion.compare order: stateVersion, then counter, then timestamp."""
        return (self.state_version, self.counter, self.timestamp)

    def newer_than(self, other: DataVersion) -> bool:
        return self.order_key() > other.order_key()

    def to_json_obj(self) -> dict[str, Any]:
        d: dict[str, Any] = {"counter": self.counter}
        if self.state_version:
            d["stateVersion"] = self.state_version
        d["timestamp"] = self.timestamp
        return d

    @classmethod
    def from_json_obj(cls, d: Any) -> DataVersion:
        if not isinstance(d, dict):
            return cls()
        # counter may be written as a number or (rarely) a string.
        return cls(counter=int(d.get("counter", 0) or 0), timestamp=int(d.get("timestamp", 0) or 0),
                   state_version=int(d.get("stateVersion", 0) or 0))


def loads_lenient(data: bytes) -> Any:
    """Parse JSON as written by orjson or by Java fastjson (unquoted integer keys). Raises ValueError."""
    try:
        return fastjson.loads(data)
    except ProtocolError as e:
        raise ValueError(str(e)) from None


def load_config_file(path: str, decode: Callable[[Any], T]) -> T | None:
    """Load `path` (falling back to `path.bak`) and decode it; None when neither holds any content.

    A candidate that is unreadable JSON or fails `decode` is skipped; when every non-empty candidate fails the
    error names the file and the reason (ConfigError), so the broker refuses to start instead of losing metadata.
    """
    errors: list[str] = []
    found = False
    for label, raw in _candidates(path):
        if not raw.strip():
            continue
        found = True
        try:
            return decode(loads_lenient(raw))
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            errors.append(f"{label}: {e}")
    if found:
        raise ConfigError(f"cannot load {path} (and no usable .bak): " + "; ".join(errors))
    return None


def _candidates(path: str) -> list[tuple[str, bytes]]:
    out: list[tuple[str, bytes]] = []
    for p in (path, path + ".bak"):
        try:
            with open(p, "rb") as f:
                out.append((p, f.read()))
        except FileNotFoundError:
            continue
        except OSError as e:
            raise ConfigError(f"cannot read {p}: {e}") from None
    return out
