"""TLS for remoting links, RocketMQ 4.x style: off by default; a server mode of disabled / permissive / enforcing
(permissive takes plain and TLS clients on one port: a first byte 0x16 is a TLS handshake record); certificate,
key and CA paths under RocketMQ's tls.properties names (tls.server.*, tls.client.*).

Only ssl contexts and the first-byte sniff live here; RemotingServer / RemotingClient take the contexts.
docs/design/security.md ("TLS") shows the certificate setup.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any

from orbitmq.base.errors import ConfigError

TLS_MODES = ("disabled", "permissive", "enforcing")
CLIENT_AUTH = ("none", "optional", "require")
TLS_RECORD_HANDSHAKE = 0x16  # first byte of a ClientHello record
HANDSHAKE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class TlsServerConfig:
    mode: str = "disabled"  # tls.server.mode
    cert_path: str = ""  # tls.server.certPath (PEM, may hold the chain)
    key_path: str = ""  # tls.server.keyPath (PEM, unencrypted; tls.server.keyPassword is not supported)
    trust_cert_path: str = ""  # tls.server.trustCertPath: CA bundle checking client certificates
    need_client_auth: str = "none"  # tls.server.need.client.auth

    @property
    def enabled(self) -> bool:
        return self.mode != "disabled"

    def validate(self, prefix: str = "") -> None:
        if self.mode not in TLS_MODES:
            raise ConfigError(f"{prefix}tls.server.mode: {self.mode!r} is not one of {', '.join(TLS_MODES)}")
        if self.need_client_auth not in CLIENT_AUTH:
            raise ConfigError(f"{prefix}tls.server.need.client.auth: {self.need_client_auth!r} is not one of "
                              f"{', '.join(CLIENT_AUTH)}")
        if self.enabled and not (self.cert_path and self.key_path):
            raise ConfigError(f"{prefix}tls.server.mode={self.mode} needs tls.server.certPath and tls.server.keyPath")
        if self.enabled and self.need_client_auth != "none" and not self.trust_cert_path:
            raise ConfigError(f"{prefix}tls.server.need.client.auth={self.need_client_auth} needs "
                              "tls.server.trustCertPath (the CA that signs client certificates)")


@dataclass(frozen=True)
class TlsClientConfig:
    enable: bool = False  # tlsEnable: outgoing links use TLS
    cert_path: str = ""  # tls.client.certPath (for servers that ask for a client certificate)
    key_path: str = ""  # tls.client.keyPath
    trust_cert_path: str = ""  # tls.client.trustCertPath: CA bundle checking the server
    auth_server: bool = False  # tls.client.authServer: verify the server's chain against trust_cert_path

    def validate(self, prefix: str = "") -> None:
        if self.enable and self.auth_server and not self.trust_cert_path:
            raise ConfigError(f"{prefix}tls.client.authServer=true needs tls.client.trustCertPath")
        if bool(self.cert_path) != bool(self.key_path):
            raise ConfigError(f"{prefix}tls.client.certPath and tls.client.keyPath go together")


def _load_chain(ctx: ssl.SSLContext, cert: str, key: str, what: str) -> None:
    try:
        ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"{what}: cannot load certificate {cert!r} / key {key!r}: {e}") from None


def _load_ca(ctx: ssl.SSLContext, path: str, what: str) -> None:
    try:
        ctx.load_verify_locations(cafile=path)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"{what}: cannot load CA bundle {path!r}: {e}") from None


def server_context(cfg: TlsServerConfig) -> ssl.SSLContext | None:
    """The server's context (None when disabled); ConfigError (one line) on unreadable files."""
    cfg.validate()
    if not cfg.enabled:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_chain(ctx, cfg.cert_path, cfg.key_path, "tls.server")
    if cfg.trust_cert_path:
        _load_ca(ctx, cfg.trust_cert_path, "tls.server.trustCertPath")
    ctx.verify_mode = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL,
                       "require": ssl.CERT_REQUIRED}[cfg.need_client_auth]
    return ctx


def client_context(cfg: TlsClientConfig | None = None) -> ssl.SSLContext:
    """A client context. Without authServer it encrypts but accepts any server certificate (RocketMQ's test
    mode, its default); with it the chain must lead to trust_cert_path. Broker addresses are IPs, so the host
    name is not matched against the certificate."""
    cfg = cfg or TlsClientConfig(enable=True)
    cfg.validate()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = False
    if cfg.auth_server:
        _load_ca(ctx, cfg.trust_cert_path, "tls.client.trustCertPath")
        ctx.verify_mode = ssl.CERT_REQUIRED
    else:
        ctx.verify_mode = ssl.CERT_NONE
    if cfg.cert_path:
        _load_chain(ctx, cfg.cert_path, cfg.key_path, "tls.client")
    return ctx


def looks_like_tls(first_byte: bytes) -> bool:
    return bool(first_byte) and first_byte[0] == TLS_RECORD_HANDSHAKE


def server_config_of(cfg: Any) -> TlsServerConfig:
    """From a broker / name server / controller config with the tls_server_* fields (absent = disabled)."""
    return TlsServerConfig(getattr(cfg, "tls_server_mode", "disabled"), getattr(cfg, "tls_server_cert_path", ""),
                           getattr(cfg, "tls_server_key_path", ""), getattr(cfg, "tls_server_trust_cert_path", ""),
                           getattr(cfg, "tls_server_need_client_auth", "none"))


def client_config_of(cfg: Any) -> TlsClientConfig:
    """From a config with tls_enable and the tls_client_* fields (absent = plain)."""
    return TlsClientConfig(bool(getattr(cfg, "tls_enable", False)), getattr(cfg, "tls_client_cert_path", ""),
                           getattr(cfg, "tls_client_key_path", ""), getattr(cfg, "tls_client_trust_cert_path", ""),
                           bool(getattr(cfg, "tls_client_auth_server", False)))


def outgoing_context(cfg: Any) -> ssl.SSLContext | None:
    """The context for a process's outgoing links, None unless tls_enable."""
    c = client_config_of(cfg)
    return client_context(c) if c.enable else None
