"""acl/config.py and acl/address.py: plain_acl.yml in RocketMQ's format, address patterns, clear errors."""

from __future__ import annotations

import pytest

from orbitmq.acl.address import AddressPatternError, compile_pattern, host_of
from orbitmq.acl.config import DENY, PUB, SUB, AclConfigError, check_permission, parse_plain_acl

SAMPLE = """
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.*

accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      # the group should convert to retry topic
      - groupA=DENY
      - groupB=PUB|SUB
      - groupC=SUB

  - accessKey: rocketmq2
    secretKey: 0012345678
    whiteRemoteAddress: 192.168.1.*
    # if it is admin, it could access all resources
    admin: true
"""


def test_sample_file_of_rocketmq_parses() -> None:
    cfg = parse_plain_acl(SAMPLE)
    assert sorted(cfg.accounts) == ["RocketMQ", "rocketmq2"]
    a = cfg.accounts["RocketMQ"]
    assert a.secret_key == "12345678" and not a.admin
    assert a.default_topic_perm == DENY and a.default_group_perm == SUB
    assert a.perms == {"topicA": DENY, "topicB": PUB | SUB, "topicC": SUB, "%RETRY%groupA": DENY,
                       "%RETRY%groupB": PUB | SUB, "%RETRY%groupC": SUB}
    assert not a.white("192.168.0.1")  # empty whiteRemoteAddress matches nothing
    b = cfg.accounts["rocketmq2"]
    assert b.secret_key == "0012345678"  # kept verbatim, not read as a number
    assert b.admin and b.default_topic_perm == DENY and b.perms == {}
    assert b.white("192.168.1.77") and not b.white("192.168.2.1")
    assert cfg.global_white_patterns == ("10.10.103.*", "192.168.0.*")
    assert any(m("10.10.103.5") for m in cfg.global_white) and not any(m("10.10.104.5") for m in cfg.global_white)


def test_empty_file_means_no_accounts() -> None:
    cfg = parse_plain_acl("")
    assert cfg.accounts == {} and cfg.global_white == ()


@pytest.mark.parametrize("text, fragment", [
    ("accounts: [\n", "not valid YAML"),
    ("- a\n- b\n", "top level must be a mapping"),
    ("accounts: {a: 1}\n", "accounts must be a list"),
    ("accounts:\n  - accessKey: short\n    secretKey: 12345678\n", "longer than 6"),
    ("accounts:\n  - accessKey: RocketMQ\n", "longer than 6"),
    ("accounts:\n  - {accessKey: RocketMQ, secretKey: 12345678}\n  - {accessKey: RocketMQ, secretKey: 87654321}\n",
     "appears twice"),
    ("accounts:\n  - {accessKey: RocketMQ, secretKey: 12345678, topicPerms: [topicA=READ]}\n", "'READ'"),
    ("accounts:\n  - {accessKey: RocketMQ, secretKey: 12345678, topicPerms: [topicA]}\n", "name=PERM"),
    ("accounts:\n  - {accessKey: RocketMQ, secretKey: 12345678, admin: maybe}\n", "not true or false"),
    ("accounts:\n  - {accessKey: RocketMQ, secretKey: 12345678, defaultTopicPerm: ALL}\n", "defaultTopicPerm"),
    ("accounts:\n  - {accessKey: RocketMQ, secretKey: 12345678, whiteRemoteAddress: 1.2.3.300}\n",
     "whiteRemoteAddress"),
    ("globalWhiteRemoteAddresses: [10.1.*.x]\n", "globalWhiteRemoteAddresses"),
])
def test_bad_files_fail_with_one_clear_line(text: str, fragment: str) -> None:
    with pytest.raises(AclConfigError) as ei:
        parse_plain_acl(text, "plain_acl.yml")
    msg = str(ei.value)
    assert fragment in msg and msg.startswith("plain_acl.yml") and "\n" not in msg


@pytest.mark.parametrize("pattern, yes, no", [
    ("*", ["1.2.3.4", "::1"], []),
    ("*.*.*.*", ["1.2.3.4"], []),
    ("", [], ["1.2.3.4"]),
    ("192.168.0.1", ["192.168.0.1"], ["192.168.0.2"]),
    ("192.168.0.{1,2}", ["192.168.0.1", "192.168.0.2"], ["192.168.0.3", "192.168.1.1"]),
    ("192.168.0.1,10.0.0.9", ["192.168.0.1", "10.0.0.9"], ["10.0.0.1"]),
    ("192.168.1.*", ["192.168.1.0", "192.168.1.255"], ["192.168.2.1"]),
    ("192.168.1.1-200", ["192.168.1.1", "192.168.1.200"], ["192.168.1.0", "192.168.1.201"]),
    ("10.1-3.*.*", ["10.2.9.9"], ["10.4.0.0", "11.2.0.0"]),
    ("::1", ["::1"], ["127.0.0.1"]),
])
def test_address_patterns(pattern: str, yes: list[str], no: list[str]) -> None:
    m = compile_pattern(pattern)
    for host in yes:
        assert m(host), (pattern, host)
    for host in no:
        assert not m(host), (pattern, host)


@pytest.mark.parametrize("pattern", ["1.2.3", "1.2.3.256", "1.2.3.9-1", "1.2.3.{a}", "a.b.c.d", "fe80::*"])
def test_bad_address_patterns(pattern: str) -> None:
    with pytest.raises(AddressPatternError):
        compile_pattern(pattern)


def test_host_of_connection_addresses() -> None:
    assert host_of("127.0.0.1:4567") == "127.0.0.1"
    assert host_of("::1:4567") == "::1"
    assert host_of("::ffff:10.0.0.1:80") == "10.0.0.1"


def test_check_permission_rules() -> None:
    assert check_permission(PUB, PUB | SUB) and check_permission(SUB, SUB)
    assert not check_permission(PUB, SUB) and not check_permission(SUB, PUB)
    assert not check_permission(PUB, DENY) and not check_permission(SUB, DENY | SUB)
