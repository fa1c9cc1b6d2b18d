"""PullConsumer: the application drives pulls and offsets itself (Java DefaultMQPullConsumer style).

Every pull carries its subscription (FLAG_SUBSCRIPTION), so the broker needs no heartbeat subscription; the group
still heartbeats as a CONSUME_ACTIVELY consumer so admin tools see it.
"""

from __future__ import annotations

from typing import Any

from orbitmq.client import broker_api
from orbitmq.client.broker_api import PULL_FLAG_SUBSCRIPTION, PULL_FLAG_SUSPEND, PullResult
from orbitmq.client.errors import ClientError, ClientStateError, NoRouteError
from orbitmq.client.instance import ClientInstance, TlsOption, session_credentials
from orbitmq.model import MessageExt, MessageQueue, tags_of_expression
from orbitmq.protocol.bodies import ConsumerData, SubscriptionData


class PullConsumer:
    def __init__(self, group: str, namesrv: str, *, instance_name: str | None = None,
                 broker_suspend_max_ms: int = 20_000, max_reconsume_times: int = 16,
                 access_key: str | None = None, secret_key: str | None = None,
                 tls: TlsOption = None) -> None:
        self.group = group
        self.namesrv = namesrv
        self.instance_name = instance_name
        self.credentials = session_credentials(access_key, secret_key)  # RocketMQ ACL: sign every request
        self.tls = tls  # True or an ssl.SSLContext: TLS to name servers and brokers
        self.broker_suspend_max_ms = broker_suspend_max_ms
        self.max_reconsume_times = max_reconsume_times
        self._inst: ClientInstance | None = None
        self._topics: dict[str, SubscriptionData] = {}
        self._offsets: dict[MessageQueue, int] = {}

    async def start(self) -> None:
        if self._inst is not None:
            return
        inst = await ClientInstance.acquire(self.namesrv, self.instance_name, self.credentials, tls=self.tls)
        try:
            inst.register_consumer(self.group, self)
        except ClientError:
            await inst.release()
            raise
        self._inst = inst

    async def shutdown(self) -> None:
        inst = self._inst
        if inst is None:
            return
        self._inst = None
        await inst.unregister(consumer_group=self.group)
        await inst.release()

    async def __aenter__(self) -> PullConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    def _instance(self) -> ClientInstance:
        if self._inst is None:
            raise ClientStateError(f"pull consumer {self.group} is not started")
        return self._inst

    # ---- ConsumerHook -----------------------------------------------------------------------------------------
    def consumer_data(self) -> ConsumerData:
        return ConsumerData(self.group, "CONSUME_ACTIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET",
                            list(self._topics.values()))

    def subscribed_topics(self) -> set[str]:
        return set(self._topics)

    def trigger_rebalance(self) -> None:
        """Pull consumers choose their queues themselves."""

    async def reset_offset(self, topic: str, table: dict[MessageQueue, int]) -> None:
        self._offsets.update(table)

    def offsets_of(self, topic: str) -> dict[MessageQueue, int]:
        return {mq: o for mq, o in self._offsets.items() if mq.topic == topic}

    def running_info(self) -> dict[str, Any]:
        return {"properties": {"PROP_CONSUME_TYPE": "CONSUME_ACTIVELY", "PROP_NAMESERVER_ADDR": self.namesrv},
                "subscriptionSet": [s.to_json_obj() for s in self._topics.values()], "mqTable": {},
                "statusTable": {}, "jstack": ""}

    # ---- API --------------------------------------------------------------------------------------------------
    async def fetch_queues(self, topic: str) -> list[MessageQueue]:
        """Readable queues of a topic (fresh from the name server)."""
        inst = self._instance()
        route = await inst.update_route(topic)
        if route is None:
            raise NoRouteError(f"no route for topic {topic}")
        self._topics.setdefault(topic, SubscriptionData.of_expression(topic, "*"))
        return route.subscribe_queues(topic)

    async def pull(self, mq: MessageQueue, offset: int, max_nums: int = 32, expression: str = "*",
                   block_ms: int = 0, *, expression_type: str = "TAG") -> PullResult:
        """One PULL_MESSAGE; block_ms > 0 lets the broker hold the request (long polling) up to that long.
        expression_type="SQL92" filters by properties on the broker (enablePropertyFilter=true there)."""
        inst = self._instance()
        if block_ms > self.broker_suspend_max_ms:
            block_ms = self.broker_suspend_max_ms
        sys_flag = PULL_FLAG_SUBSCRIPTION | (PULL_FLAG_SUSPEND if block_ms > 0 else 0)
        sd = SubscriptionData.of_expression(mq.topic, expression, 0, expression_type)
        addr = await inst.find_broker_addr(mq)
        header = broker_api.pull_header(self.group, mq, offset, max_nums, sys_flag, 0, block_ms, sd.sub_string,
                                        sd.sub_version, sd.expression_type)
        tags = tags_of_expression(expression) if sd.expression_type == "TAG" else None
        return await broker_api.pull(inst, addr, header, block_ms + 10_000, tags)

    async def query_offset(self, mq: MessageQueue) -> int:
        """The group's committed offset on the broker, -1 if none."""
        inst = self._instance()
        return await broker_api.query_consumer_offset(inst, await inst.find_broker_addr(mq), self.group, mq)

    async def update_offset(self, mq: MessageQueue, offset: int) -> None:
        inst = self._instance()
        self._offsets[mq] = offset
        await broker_api.update_consumer_offset(inst, await inst.find_broker_addr(mq), self.group, mq, offset,
                                                oneway=False)

    async def max_offset(self, mq: MessageQueue) -> int:
        inst = self._instance()
        return await broker_api.max_offset(inst, await inst.find_broker_addr(mq), mq)

    async def min_offset(self, mq: MessageQueue) -> int:
        inst = self._instance()
        return await broker_api.min_offset(inst, await inst.find_broker_addr(mq), mq)

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        inst = self._instance()
        return await broker_api.search_offset(inst, await inst.find_broker_addr(mq), mq, timestamp_ms)

    async def send_back(self, mq: MessageQueue, msg: MessageExt, delay_level: int = 0) -> None:
        """CONSUMER_SEND_MSG_BACK for a message this consumer failed to process."""
        inst = self._instance()
        await broker_api.send_msg_back(inst, await inst.find_broker_addr(mq), self.group, msg, delay_level,
                                       self.max_reconsume_times)
