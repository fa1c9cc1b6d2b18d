"""plain_acl.yml (RocketMQ 4.x format) -> PlainAclConfig: accounts by access key plus the global white list.

    globalWhiteRemoteAddresses: [10.10.103.*, 192.168.0.*]
    accounts:
      - accessKey: RocketMQ            # more than 6 characters, unique
        secretKey: 12345678            # more than 6 characters; kept verbatim (no YAML number conversion)
        whiteRemoteAddress: 192.168.0.*   # requests from here need no signature and no permission
        admin: false                   # admin-only request codes (permission.ADMIN_CODES)
        defaultTopicPerm: DENY         # for topics not in topicPerms (missing = DENY)
        defaultGroupPerm: SUB          # for groups not in groupPerms (missing = DENY)
        topicPerms: [topicA=DENY, topicB=PUB|SUB, topicC=SUB]
        groupPerms: [groupA=DENY, groupB=PUB|SUB, groupC=SUB]

Permissions: DENY, PUB, SUB, PUB|SUB (or SUB|PUB). RocketMQ maps any other word to DENY silently; here it is an
error naming the entry, so a typo cannot quietly lock an application out. Group permissions are stored under the
group's retry topic (%RETRY%group), as RocketMQ does. Unknown keys (dataVersion, ...) are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import yaml

from orbitmq.acl.address import Matcher, compile_pattern
from orbitmq.base.errors import ConfigError

DENY = 1
ANY = 2
PUB = 4
SUB = 8
RETRY_PREFIX = "%RETRY%"
MIN_KEY_LENGTH = 7  # RocketMQ refuses keys of 6 characters or fewer

_PERMS = {"DENY": DENY, "PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB}
_TRUE = frozenset({"true", "yes", "on", "y"})
_FALSE = frozenset({"false", "no", "off", "n", ""})


class AclConfigError(ConfigError):
    """plain_acl.yml cannot be used (bad YAML, bad entry); the message names the file and the entry."""


def perm_name(perm: int) -> str:
    if perm & DENY:
        return "DENY"
    names = [n for n, bit in (("PUB", PUB), ("SUB", SUB)) if perm & bit]
    return "|".join(names) or "DENY"


def check_permission(needed: int, owned: int) -> bool:
    """RocketMQ Permission.checkPermission: DENY wins; ANY needs PUB or SUB; else a common bit."""
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


def retry_topic(group: str) -> str:
    return RETRY_PREFIX + group


@dataclass(frozen=True, slots=True)
class Account:
    access_key: str
    secret_key: str = field(repr=False)
    admin: bool
    default_topic_perm: int
    default_group_perm: int
    perms: dict[str, int]  # topic -> perm and %RETRY%group -> perm
    white: Matcher = field(repr=False, compare=False)
    white_pattern: str = ""


@dataclass(frozen=True, slots=True)
class PlainAclConfig:
    accounts: dict[str, Account]
    global_white: tuple[Matcher, ...] = field(repr=False, compare=False)
    global_white_patterns: tuple[str, ...] = ()


def _scalar(v: object) -> str:
    return "" if v is None else str(v).strip()


def _parse_perm(text: str, where: str) -> int:
    perm = _PERMS.get(text.replace(" ", "").upper())
    if perm is None:
        raise AclConfigError(f"{where}: permission {text!r} is not DENY, PUB, SUB or PUB|SUB")
    return perm


def _parse_bool(text: str, where: str) -> bool:
    low = text.lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise AclConfigError(f"{where}: {text!r} is not true or false")


def _list(v: object, where: str) -> list[str]:
    if v is None or v == "":
        return []
    if isinstance(v, str):  # a single entry written as a scalar
        return [v]
    if not isinstance(v, list):
        raise AclConfigError(f"{where}: expected a list")
    return [_scalar(x) for x in v if _scalar(x)]


def _resource_perms(entries: list[str], where: str, *, groups: bool) -> dict[str, int]:
    out: dict[str, int] = {}
    for entry in entries:
        name, eq, perm = entry.partition("=")
        if not eq or not name.strip():
            raise AclConfigError(f"{where}: {entry!r} is not name=PERM")
        key = name.strip()
        out[retry_topic(key) if groups else key] = _parse_perm(perm.strip(), f"{where}: {entry!r}")
    return out


def _account(raw: object, where: str) -> Account:
    if not isinstance(raw, dict):
        raise AclConfigError(f"{where}: an account must be a mapping")
    ak = _scalar(raw.get("accessKey"))
    sk = _scalar(raw.get("secretKey"))
    if len(ak) < MIN_KEY_LENGTH or len(sk) < MIN_KEY_LENGTH:
        raise AclConfigError(f"{where}: accessKey and secretKey are required and must be longer than "
                             f"{MIN_KEY_LENGTH - 1} characters")
    where = f"{where} ({ak})"
    white = _scalar(raw.get("whiteRemoteAddress"))
    perms = _resource_perms(_list(raw.get("topicPerms"), f"{where} topicPerms"), f"{where} topicPerms",
                            groups=False)
    perms.update(_resource_perms(_list(raw.get("groupPerms"), f"{where} groupPerms"), f"{where} groupPerms",
                                 groups=True))
    default_topic = _scalar(raw.get("defaultTopicPerm"))
    default_group = _scalar(raw.get("defaultGroupPerm"))
    try:
        matcher = compile_pattern(white)
    except ConfigError as e:
        raise AclConfigError(f"{where} whiteRemoteAddress: {e}") from None
    return Account(
        access_key=ak,
        secret_key=sk,
        admin=_parse_bool(_scalar(raw.get("admin")), f"{where} admin"),
        default_topic_perm=_parse_perm(default_topic, f"{where} defaultTopicPerm") if default_topic else DENY,
        default_group_perm=_parse_perm(default_group, f"{where} defaultGroupPerm") if default_group else DENY,
        perms=perms,
        white=matcher,
        white_pattern=white,
    )


def parse_plain_acl(text: str, source: str = "plain_acl.yml") -> PlainAclConfig:
    """Parse plain_acl.yml text. Raises AclConfigError (one line, naming `source` and the entry)."""
    try:
        # BaseLoader: every scalar stays a string (a secretKey of 0123 or 1e5 is not turned into a number)
        doc = yaml.load(text, Loader=yaml.BaseLoader)  # noqa: S506 - BaseLoader constructs no objects
    except yaml.YAMLError as e:
        detail = " ".join(str(e).split())
        raise AclConfigError(f"{source}: not valid YAML: {detail}") from None
    if doc is None or doc == "":
        doc = {}
    if not isinstance(doc, dict):
        raise AclConfigError(f"{source}: the top level must be a mapping (accounts, globalWhiteRemoteAddresses)")
    patterns = tuple(_list(doc.get("globalWhiteRemoteAddresses"), f"{source}: globalWhiteRemoteAddresses"))
    try:
        global_white = tuple(compile_pattern(p) for p in patterns)
    except ConfigError as e:
        raise AclConfigError(f"{source}: globalWhiteRemoteAddresses: {e}") from None
    raw_accounts = doc.get("accounts")
    if raw_accounts in (None, ""):
        raw_accounts = []
    if not isinstance(raw_accounts, list):
        raise AclConfigError(f"{source}: accounts must be a list")
    accounts: dict[str, Account] = {}
    for i, raw in enumerate(raw_accounts):
        acc = _account(raw, f"{source}: accounts[{i}]")
        if acc.access_key in accounts:
            raise AclConfigError(f"{source}: accounts[{i}]: accessKey {acc.access_key} appears twice")
        accounts[acc.access_key] = acc
    return PlainAclConfig(accounts, global_white, patterns)

