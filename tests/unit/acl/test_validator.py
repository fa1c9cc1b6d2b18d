"""acl/validator.py + acl/resources.py + acl/guard.py: PlainAccessValidator's decisions, request by request."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from orbitmq.acl.config import parse_plain_acl
from orbitmq.acl.guard import AclGuard, resolve_acl_file
from orbitmq.acl.validator import AclDenied, PlainAclValidator
from orbitmq.base.errors import ConfigError
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.acl_sign import SessionCredentials, sign_request
from orbitmq.protocol.bodies import ConsumerData, HeartbeatData, SubscriptionData

ACL = """
globalWhiteRemoteAddresses: [10.9.9.*]
accounts:
  - accessKey: appUser1
    secretKey: appSecret1
    whiteRemoteAddress: 192.168.7.7
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms: [TopicA=PUB|SUB, TopicPubOnly=PUB, TopicSubOnly=SUB, TopicDenied=DENY]
    groupPerms: [GroupDenied=DENY]
  - accessKey: adminUser
    secretKey: adminSecret
    admin: true
"""
APP = SessionCredentials("appUser1", "appSecret1")
ADMIN = SessionCredentials("adminUser", "adminSecret")
LOCAL = "127.0.0.1:40000"


@pytest.fixture
def validator() -> PlainAclValidator:
    return PlainAclValidator(parse_plain_acl(ACL))


def signed(code: int, ext: dict[str, str] | None, body: bytes | None = None,
           creds: SessionCredentials = APP) -> RemotingCommand:
    return sign_request(RemotingCommand.request(code, ext, body), creds)


def denied(v: PlainAclValidator, cmd: RemotingCommand, addr: str = LOCAL) -> str:
    with pytest.raises(AclDenied) as ei:
        v.validate(addr, cmd)
    return str(ei.value)


def test_send_needs_pub_on_the_topic(validator: PlainAclValidator) -> None:
    assert validator.validate(LOCAL, signed(RequestCode.SEND_MESSAGE_V2, {"a": "PG", "b": "TopicA"}, b"x"))
    assert validator.validate(LOCAL, signed(RequestCode.SEND_MESSAGE, {"producerGroup": "PG", "topic": "TopicPubOnly"}))
    assert "topic TopicSubOnly" in denied(validator, signed(RequestCode.SEND_BATCH_MESSAGE, {"b": "TopicSubOnly"}))
    assert "No permission for topic TopicDenied" in denied(validator, signed(RequestCode.SEND_MESSAGE_V2,
                                                                              {"b": "TopicDenied"}))
    assert "No default permission for topic Other" in denied(validator, signed(RequestCode.SEND_MESSAGE_V2,
                                                                               {"b": "Other"}))


def test_send_to_a_retry_topic_needs_sub_on_the_group(validator: PlainAclValidator) -> None:
    assert validator.validate(LOCAL, signed(RequestCode.SEND_MESSAGE_V2, {"a": "CG", "b": "%RETRY%CG"}))
    assert "group GroupDenied" in denied(validator, signed(RequestCode.SEND_MESSAGE_V2,
                                                           {"a": "GroupDenied", "b": "%RETRY%GroupDenied"}))


def test_pull_and_offsets_need_sub_on_topic_and_group(validator: PlainAclValidator) -> None:
    for code in (RequestCode.PULL_MESSAGE, RequestCode.QUERY_CONSUMER_OFFSET, RequestCode.UPDATE_CONSUMER_OFFSET,
                 RequestCode.POP_MESSAGE):
        assert validator.validate(LOCAL, signed(code, {"topic": "TopicSubOnly", "consumerGroup": "CG"}))
        assert "topic TopicPubOnly" in denied(validator, signed(code, {"topic": "TopicPubOnly",
                                                                        "consumerGroup": "CG"}))
        assert "group GroupDenied" in denied(validator, signed(code, {"topic": "TopicA",
                                                                       "consumerGroup": "GroupDenied"}))


def test_send_back_needs_group_sub_and_origin_topic_pub(validator: PlainAclValidator) -> None:
    ok = {"group": "CG", "originTopic": "TopicA", "offset": "1"}
    assert validator.validate(LOCAL, signed(RequestCode.CONSUMER_SEND_MSG_BACK, ok))
    assert "TopicSubOnly" in denied(validator, signed(RequestCode.CONSUMER_SEND_MSG_BACK,
                                                      {**ok, "originTopic": "TopicSubOnly"}))


def test_heartbeat_checks_consumer_groups_and_subscriptions(validator: PlainAclValidator) -> None:
    def hb(group: str, topic: str) -> bytes:
        return HeartbeatData("c1", [], [ConsumerData(group, subscription_data_set=[SubscriptionData(topic, "*")])]
                             ).to_json()

    assert validator.validate(LOCAL, signed(RequestCode.HEART_BEAT, None, hb("CG", "TopicA")))
    assert "TopicDenied" in denied(validator, signed(RequestCode.HEART_BEAT, None, hb("CG", "TopicDenied")))
    assert "GroupDenied" in denied(validator, signed(RequestCode.HEART_BEAT, None, hb("GroupDenied", "TopicA")))
    assert "heartbeat" in denied(validator, signed(RequestCode.HEART_BEAT, None, b"{not json"))


def test_admin_codes_need_an_admin_account(validator: PlainAclValidator) -> None:
    for code in (RequestCode.UPDATE_AND_CREATE_TOPIC, RequestCode.DELETE_TOPIC_IN_BROKER,
                 RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, RequestCode.DELETE_SUBSCRIPTIONGROUP,
                 RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, RequestCode.UPDATE_BROKER_CONFIG):
        msg = denied(validator, signed(code, {"topic": "TopicA", "group": "CG"}))
        assert f"Need admin permission for request code={int(code)}" in msg
        assert validator.validate(LOCAL, signed(code, {"topic": "TopicA", "group": "CG"}, creds=ADMIN))
    # an admin without any topicPerms/groupPerms reaches every topic and group
    assert validator.validate(LOCAL, signed(RequestCode.SEND_MESSAGE_V2, {"b": "Anything"}, creds=ADMIN))


def test_authentication_failures(validator: PlainAclValidator) -> None:
    assert "No accessKey" in denied(validator, RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"b": "TopicA"}))
    assert "No accessKey" in denied(validator, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO))
    assert "No acl config for nobody12" in denied(
        validator, signed(RequestCode.SEND_MESSAGE_V2, {"b": "TopicA"}, creds=SessionCredentials("nobody12", "x" * 8)))
    wrong = signed(RequestCode.SEND_MESSAGE_V2, {"b": "TopicA"}, creds=SessionCredentials("appUser1", "notTheSecret"))
    assert "Check signature failed for accessKey=appUser1" in denied(validator, wrong)
    tampered = signed(RequestCode.SEND_MESSAGE_V2, {"b": "TopicA"}, b"body")
    tampered.body = b"other"
    assert "Check signature failed" in denied(validator, tampered)
    moved = signed(RequestCode.SEND_MESSAGE_V2, {"b": "TopicA"})
    assert moved.ext_fields is not None
    moved.ext_fields["b"] = "TopicDenied"  # a signed request re-pointed at another topic
    assert "Check signature failed" in denied(validator, moved)


def test_white_listed_addresses_pass_without_signature(validator: PlainAclValidator) -> None:
    unsigned = RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "TopicA"})
    assert validator.validate("10.9.9.3:5000", unsigned) is None  # global white list: anything goes
    assert "No accessKey" in denied(validator, unsigned, "10.9.8.3:5000")
    # an account's own white address: its AccessKey without a valid signature or permission (RocketMQ 4.x)
    ak_only = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"b": "TopicDenied", "AccessKey": "appUser1"})
    assert validator.validate("192.168.7.7:5000", ak_only) is not None
    assert "Check signature failed" in denied(validator, ak_only, "192.168.7.8:5000")


def test_guard_answers_no_permission_and_reloads(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "plain_acl.yml"
    path.write_text(ACL)
    guard = AclGuard(str(path))
    conn = SimpleNamespace(remote_addr=LOCAL)
    send = signed(RequestCode.SEND_MESSAGE_V2, {"b": "TopicNew"})
    resp = guard.check(conn, send)
    assert resp is not None and resp.code == ResponseCode.NO_PERMISSION and resp.opaque == send.opaque
    assert "TopicNew" in (resp.remark or "")
    assert guard.reload_if_changed() is False  # unchanged bytes: nothing to do
    path.write_text(ACL.replace("TopicDenied=DENY", "TopicNew=PUB"))
    assert guard.reload_if_changed() is True and guard.reloads == 1
    assert guard.check(conn, send) is None
    with caplog.at_level(logging.ERROR, logger="orbitmq.acl"):
        path.write_text("accounts: [\n")  # broken: the last good configuration stays
        assert guard.reload_if_changed() is False
        assert guard.reload_if_changed() is False  # logged once per bad content
        path.unlink()
        assert guard.reload_if_changed() is False
    assert guard.check(conn, send) is None
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 2 and "not valid YAML" in errors[0].getMessage()


def test_guard_start_up_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read ACL file"):
        AclGuard(str(tmp_path / "missing.yml"))
    bad = tmp_path / "bad.yml"
    bad.write_text("accounts: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        AclGuard(str(bad))
    assert resolve_acl_file("/x/acl.yml", "/home", None) == "/x/acl.yml"
    assert resolve_acl_file("", "/rmq", "/env") == "/rmq/conf/plain_acl.yml"
    assert resolve_acl_file("", "", "/env") == "/env/conf/plain_acl.yml"
    with pytest.raises(ConfigError, match="aclFilePath"):
        resolve_acl_file("", "", None)
