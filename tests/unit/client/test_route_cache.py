"""RouteInfo queue lists (producer/consumer views, orderTopicConf, TBW102 clamp) and producer queue selection."""

from __future__ import annotations

from orbitmq.client.route_cache import PublishInfo, QueueInfo, RouteCache, RouteInfo
from orbitmq.model import MessageQueue, java_hash
from orbitmq.protocol.bodies import BrokerData, QueueData, TopicRouteData


def route() -> RouteInfo:
    rd = TopicRouteData(
        queue_datas=[QueueData("broker-b", 2, 3, 6), QueueData("broker-a", 4, 2, 6), QueueData("broker-c", 2, 2, 4),
                     QueueData("broker-d", 1, 1, 6)],
        broker_datas=[BrokerData("C", "broker-a", {0: "a:1", 1: "a2:1"}), BrokerData("C", "broker-b", {0: "b:1"}),
                      BrokerData("C", "broker-c", {0: "c:1"}), BrokerData("C", "broker-d", {1: "d-slave:1"})])
    return RouteInfo.from_route_data(rd)


def test_publish_queues_are_writable_queues_of_brokers_with_a_master_sorted_by_broker():
    qs = route().publish_queues("T")
    assert [(q.broker_name, q.queue_id) for q in qs] == [("broker-a", 0), ("broker-a", 1), ("broker-b", 0),
                                                         ("broker-b", 1), ("broker-b", 2)]


def test_subscribe_queues_are_every_readable_queue():
    qs = route().subscribe_queues("T")
    assert len(qs) == 4 + 2 + 2 + 1
    assert MessageQueue("T", "broker-d", 0) in qs


def test_order_topic_conf_decides_the_publish_queues():
    r = route()
    r.order_topic_conf = "broker-b:2;broker-a:1"
    assert [(q.broker_name, q.queue_id) for q in r.publish_queues("T")] == [("broker-b", 0), ("broker-b", 1),
                                                                            ("broker-a", 0)]


def test_clamped_limits_queue_counts_for_auto_created_topics():
    r = RouteInfo([QueueInfo("b", 8, 8, 6)], {"b": {0: "x:1"}}).clamped(4)
    assert r.queue_datas[0].write_queue_nums == 4 and r.queue_datas[0].read_queue_nums == 4


def test_addresses():
    r = route()
    assert r.master_addr("broker-a") == "a:1"
    assert r.any_addr("broker-a", 1) == "a2:1"
    assert r.any_addr("broker-d") == "d-slave:1"
    assert r.master_addrs() == {"a:1", "b:1", "c:1"}
    assert "d-slave:1" in r.all_addrs()


def test_select_round_robins_and_avoids_the_failed_broker():
    pi = PublishInfo("T", route(), seed=0)
    picks = [pi.select() for _ in range(10)]
    assert len(set(picks)) == 5
    for _ in range(20):
        assert pi.select(last_broker="broker-a").broker_name != "broker-a"


def test_select_on_single_broker_still_returns_a_queue_after_failure():
    pi = PublishInfo("T", RouteInfo([QueueInfo("b", 2, 2, 6)], {"b": {0: "x:1"}}), seed=5)
    assert pi.select(last_broker="b").broker_name == "b"


def test_select_by_key_is_stable_and_uses_java_hash():
    pi = PublishInfo("T", route(), seed=1)
    q = pi.select_by_key("order-17")
    assert all(pi.select_by_key("order-17") == q for _ in range(5))
    assert q == pi.queues[(java_hash("order-17") & 0x7FFFFFFF) % len(pi.queues)]
    assert PublishInfo("T", route(), seed=99).select_by_key("order-17") == q


def test_route_cache_rebuilds_publish_info_only_on_change():
    rc = RouteCache()
    assert rc.publish_info("T") is None
    assert rc.update("T", route())
    pi = rc.publish_info("T")
    assert rc.publish_info("T") is pi
    assert not rc.update("T", route())
    assert rc.publish_info("T") is pi
    r2 = route()
    r2.queue_datas = r2.queue_datas[:1]
    assert rc.update("T", r2)
    assert rc.publish_info("T") is not pi
    assert rc.broker_addr("broker-a", 1) == "a2:1"
