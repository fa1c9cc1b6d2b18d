"""acl/admin.py: RocketMQ's ACL administration requests edit plain_acl.yml (validated, atomic, applied at once)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

from orbitmq.acl.admin import DELETE_FAILED, UPDATE_FAILED, AclAdmin
from orbitmq.acl.config import PUB, SUB, parse_plain_acl
from orbitmq.acl.guard import AclGuard
from orbitmq.protocol import RemotingCommand, RequestCode
from orbitmq.testing.acl import write_plain_acl

CONN = SimpleNamespace(remote_addr="127.0.0.1:1")


def _admin(tmp_path: Path) -> tuple[AclAdmin, Path]:
    path = write_plain_acl(tmp_path / "plain_acl.yml")
    return AclAdmin(AclGuard(str(path)), lambda: ("DefaultCluster", "broker-a", "127.0.0.1:10911")), path


def _call(admin: AclAdmin, code: int, ext: dict[str, str]) -> RemotingCommand:
    result = admin.handlers()[int(code)](CONN, RemotingCommand.request(code, ext))
    return asyncio.run(result) if asyncio.iscoroutine(result) else result


def test_create_update_delete_account(tmp_path: Path) -> None:
    admin, path = _admin(tmp_path)
    v = admin.guard.validator
    resp = _call(admin, RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, {"accessKey": "newUser01"})
    assert resp.code == UPDATE_FAILED and "needs a secretKey" in (resp.remark or "")
    resp = _call(admin, RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, {
        "accessKey": "newUser01", "secretKey": "newSecret01", "admin": "false", "defaultTopicPerm": "DENY",
        "defaultGroupPerm": "SUB", "topicPerms": "TopicN=PUB|SUB,TopicM=SUB", "whiteRemoteAddress": ""})
    assert resp.code == 0, resp.remark
    acc = v.config.accounts["newUser01"]  # applied at once
    assert acc.secret_key == "newSecret01" and acc.perms == {"TopicN": PUB | SUB, "TopicM": SUB}
    assert "appUser1" in v.config.accounts  # the other accounts are kept
    # an update changes only the fields given
    assert _call(admin, RequestCode.UPDATE_AND_CREATE_ACL_CONFIG,
                 {"accessKey": "newUser01", "topicPerms": "TopicN=PUB"}).code == 0
    acc = v.config.accounts["newUser01"]
    assert acc.secret_key == "newSecret01" and acc.perms == {"TopicN": PUB}
    assert parse_plain_acl(path.read_text()).accounts["newUser01"].perms == {"TopicN": PUB}  # on disk too
    # a change that would not parse is refused and nothing is written
    before = path.read_text()
    resp = _call(admin, RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, {"accessKey": "newUser01", "topicPerms": "T=ALL"})
    assert resp.code == UPDATE_FAILED and "'ALL'" in (resp.remark or "") and path.read_text() == before
    assert _call(admin, RequestCode.DELETE_ACL_CONFIG, {"accessKey": "newUser01"}).code == 0
    assert "newUser01" not in v.config.accounts
    assert _call(admin, RequestCode.DELETE_ACL_CONFIG, {"accessKey": "newUser01"}).code == DELETE_FAILED


def test_global_white_list_and_version(tmp_path: Path) -> None:
    admin, _ = _admin(tmp_path)
    v0 = _call(admin, RequestCode.GET_BROKER_CLUSTER_ACL_INFO, {})
    assert v0.ext_fields is not None and v0.ext_fields["brokerName"] == "broker-a"
    assert v0.ext_fields["clusterName"] == "DefaultCluster" and v0.ext_fields["brokerAddr"] == "127.0.0.1:10911"
    assert _call(admin, RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, {"globalWhiteAddrs": "10.1.1.*,10.2.2.2"}).code == 0
    assert admin.guard.validator.config.global_white_patterns == ("10.1.1.*", "10.2.2.2")
    v1 = _call(admin, RequestCode.GET_BROKER_CLUSTER_ACL_INFO, {})
    assert v1.ext_fields is not None and v1.ext_fields["version"] != v0.ext_fields["version"]
    assert _call(admin, RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, {"globalWhiteAddrs": ""}).code == 0
    assert admin.guard.validator.config.global_white_patterns == ()
