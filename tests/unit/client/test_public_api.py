"""The SDK's public names and the constructor/method signatures promised in contracts.md stay put."""

from __future__ import annotations

import inspect

import orbitmq.client as client

PINNED = {
    "Admin", "AllocateAveragely", "AllocateByCircle", "BlockingAdmin", "BlockingProducer", "BlockingPushConsumer",
    "ClientInstance", "ClientStateError", "ConsumeOrderlyResult", "ConsumeResult", "Message", "MessageExt",
    "MessageQueue", "MessageValidationError", "NoRouteError", "Producer", "PullConsumer", "PullResult", "PullStatus",
    "PushConsumer", "ResponseError", "SendResult", "SendStatus", "blocking", "errors",
    "LocalTransactionState", "TransactionProducer",
    "SimpleConsumer",
}


def params(fn) -> dict[str, object]:
    return {n: p.default for n, p in inspect.signature(fn).parameters.items()}


def test_all_is_pinned_and_importable():
    assert set(client.__all__) == PINNED
    for name in client.__all__:
        assert getattr(client, name) is not None


def test_producer_signature():
    p = params(client.Producer.__init__)
    assert p["send_timeout_ms"] == 3000 and p["retry_times"] == 2 and p["compress_over_bytes"] == 4096
    assert p["default_topic_queue_nums"] == 4 and p["dedup"] is True
    assert p["auto_batch"] is False and p["auto_batch_max_messages"] == 32
    assert p["auto_batch_max_bytes"] == 256 * 1024 and p["auto_batch_linger_ms"] == 0
    for m in ("start", "shutdown", "send", "send_oneway", "send_batch", "send_orderly"):
        assert inspect.iscoroutinefunction(getattr(client.Producer, m)), m
    assert not inspect.iscoroutinefunction(client.Producer.send_async)
    assert [s.name for s in client.SendStatus] == ["SEND_OK", "FLUSH_DISK_TIMEOUT", "FLUSH_SLAVE_TIMEOUT",
                                                   "SLAVE_NOT_AVAILABLE"]


def test_push_consumer_signature():
    p = params(client.PushConsumer.__init__)
    assert p["message_model"] == "CLUSTERING" and p["consume_from_where"] == "CONSUME_FROM_LAST_OFFSET"
    assert p["pull_batch_size"] == 32 and p["consume_batch_size"] == 1
    assert p["max_cached_messages_per_queue"] == 1000 and p["orderly"] is False
    assert p["persist_offset_interval_ms"] == 5000 and p["consume_timestamp"] is None
    assert params(client.PushConsumer.subscribe)["expression"] == "*"
    assert {r.name for r in client.ConsumeResult} == {"SUCCESS", "RECONSUME_LATER"}
    assert {r.name for r in client.ConsumeOrderlyResult} == {"SUCCESS", "SUSPEND"}


def test_pull_consumer_and_admin_methods():
    for m in ("fetch_queues", "pull", "query_offset", "update_offset", "max_offset", "min_offset", "search_offset"):
        assert inspect.iscoroutinefunction(getattr(client.PullConsumer, m)), m
    for m in ("start", "close", "topic_route", "topic_list", "cluster_info", "update_topic", "delete_topic",
              "topic_status", "consumer_progress", "query_msg_by_id", "query_msg_by_key", "reset_offset_by_time",
              "broker_runtime_info", "consumer_connections", "cluster_brokers"):
        assert inspect.iscoroutinefunction(getattr(client.Admin, m)), m
    u = params(client.Admin.update_topic)
    assert (u["read_queue_nums"], u["write_queue_nums"], u["perm"], u["order"]) == (8, 8, 6, False)
