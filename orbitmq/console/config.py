"""Console settings: `--config console.yml`, then ORBITMQ_CONSOLE_* environment variables, then command-line
options (each later source wins). Unknown keys are an error, so a typo cannot silently disable the login.

    namesrv: 127.0.0.1:9876          # name servers, 'a:9876;b:9876'
    host: 127.0.0.1
    port: 8080
    controllers: [127.0.0.1:9878]    # optional: the controller view
    login:                           # optional: ask for a login (required when acl is set)
      username: admin
      password: change-me
    acl:                             # optional: the access key the console signs its requests with
      accessKey: console
      secretKey: 12345678
    sessionTtlSeconds: 28800
    sampleIntervalSeconds: 5         # topic TPS sampling
    maxMessages: 200                 # cap of a message query / DLQ page
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orbitmq.base.errors import ConfigError

ENV_PREFIX = "ORBITMQ_CONSOLE_"
_TOP_KEYS = frozenset({"namesrv", "host", "port", "controllers", "login", "acl", "sessionTtlSeconds",
                       "sampleIntervalSeconds", "maxMessages"})


@dataclass
class ConsoleConfig:
    namesrv: str = "127.0.0.1:9876"
    host: str = "127.0.0.1"
    port: int = 8080
    controllers: list[str] = field(default_factory=list)
    username: str | None = None
    password: str | None = None
    access_key: str | None = None
    secret_key: str | None = None
    session_ttl_s: int = 8 * 3600
    sample_interval_s: float = 5.0
    max_messages: int = 200
    session_secret: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)

    @property
    def login_required(self) -> bool:
        return self.username is not None

    @property
    def acl_enabled(self) -> bool:
        return self.access_key is not None

    def validate(self) -> ConsoleConfig:
        if not [a for a in self.namesrv.split(";") if a.strip()]:
            raise ConfigError("namesrv: no name server address (use -n ip:port or namesrv: in the config)")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port: {self.port} is not a TCP port")
        if (self.username is None) != (self.password is None) or self.password == "":
            raise ConfigError("login: give both a username and a non-empty password")
        if (self.access_key is None) != (self.secret_key is None):
            raise ConfigError("acl: give both accessKey and secretKey")
        if self.acl_enabled and not self.login_required:
            raise ConfigError("acl: a console that signs requests with an access key must ask for a login "
                              "(set login.username and login.password)")
        if self.session_ttl_s <= 0 or self.sample_interval_s <= 0 or self.max_messages <= 0:
            raise ConfigError("sessionTtlSeconds, sampleIntervalSeconds and maxMessages must be positive")
        return self


def _str_list(value: Any, key: str) -> list[str]:
    if isinstance(value, str):
        return [p.strip() for p in value.replace(",", ";").split(";") if p.strip()]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [v.strip() for v in value if v.strip()]
    raise ConfigError(f"{key}: expected 'host:port;host:port' or a list of host:port strings")


def _section(data: Mapping[str, Any], key: str, allowed: frozenset[str]) -> dict[str, str]:
    sec = data.get(key) or {}
    if not isinstance(sec, dict):
        raise ConfigError(f"{key}: expected a mapping")
    unknown = sorted(set(sec) - allowed)
    if unknown:
        raise ConfigError(f"{key}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(allowed))})")
    return {k: str(v) for k, v in sec.items() if v is not None}


def _number(data: Mapping[str, Any], key: str, kind: type[int] | type[float], default: Any) -> Any:
    if key not in data:
        return default
    try:
        return kind(data[key])
    except (TypeError, ValueError):
        raise ConfigError(f"{key}: {data[key]!r} is not a number") from None


def from_mapping(data: Mapping[str, Any], base: ConsoleConfig | None = None) -> ConsoleConfig:
    """Apply a parsed console.yml to `base` (defaults when None)."""
    cfg = base or ConsoleConfig()
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise ConfigError(f"unknown console config key(s): {', '.join(unknown)} (known: {', '.join(sorted(_TOP_KEYS))})")
    if "namesrv" in data:
        cfg.namesrv = ";".join(_str_list(data["namesrv"], "namesrv"))
    if "host" in data:
        cfg.host = str(data["host"])
    cfg.port = _number(data, "port", int, cfg.port)
    if "controllers" in data:
        cfg.controllers = _str_list(data["controllers"], "controllers")
    login = _section(data, "login", frozenset({"username", "password"}))
    cfg.username = login.get("username", cfg.username)
    cfg.password = login.get("password", cfg.password)
    acl = _section(data, "acl", frozenset({"accessKey", "secretKey"}))
    cfg.access_key = acl.get("accessKey", cfg.access_key)
    cfg.secret_key = acl.get("secretKey", cfg.secret_key)
    cfg.session_ttl_s = _number(data, "sessionTtlSeconds", int, cfg.session_ttl_s)
    cfg.sample_interval_s = _number(data, "sampleIntervalSeconds", float, cfg.sample_interval_s)
    cfg.max_messages = _number(data, "maxMessages", int, cfg.max_messages)
    return cfg


def from_env(env: Mapping[str, str], cfg: ConsoleConfig) -> ConsoleConfig:
    """ORBITMQ_CONSOLE_USER / _PASSWORD / _ACCESS_KEY / _SECRET_KEY (secrets kept out of files and argv)."""
    for suffix, attr in (("USER", "username"), ("PASSWORD", "password"), ("ACCESS_KEY", "access_key"),
                         ("SECRET_KEY", "secret_key")):
        value = env.get(ENV_PREFIX + suffix)
        if value:
            setattr(cfg, attr, value)
    return cfg


def load_config(path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None,
                **overrides: Any) -> ConsoleConfig:
    """console.yml (if given) -> environment -> keyword overrides whose value is not None; validated."""
    cfg = ConsoleConfig()
    if path is not None:
        import yaml

        p = Path(path).expanduser()
        try:
            data = yaml.safe_load(p.read_text(encoding="utf-8"))
        except OSError as e:
            raise ConfigError(f"{p}: {e.strerror or e}") from None
        except yaml.YAMLError as e:
            raise ConfigError(f"{p}: not valid YAML: {' '.join(str(e).split())}") from None
        if data is not None and not isinstance(data, dict):
            raise ConfigError(f"{p}: expected a mapping of settings")
        cfg = from_mapping(data or {}, cfg)
    cfg = from_env(os.environ if env is None else env, cfg)
    for key, value in overrides.items():
        if value is None:
            continue
        if not hasattr(cfg, key):
            raise ConfigError(f"unknown console setting {key}")
        setattr(cfg, key, _str_list(value, key) if key == "controllers" and isinstance(value, str) else value)
    return cfg.validate()
