"""SimpleConsumer: pop-based consumption (RocketMQ 5 POP_MESSAGE / ACK_MESSAGE / CHANGE_MESSAGE_INVISIBLETIME).

The broker hands out messages (no client-side rebalance or offsets); each received message carries its receipt
handle in properties["POP_CK"]; an unacknowledged message comes back after its invisible time. POP codes exceed
a short, so requests always use JSON headers.
"""

from __future__ import annotations

from orbitmq.base.clock import now_ms
from orbitmq.client import broker_api
from orbitmq.client.errors import ClientStateError, NoRouteError
from orbitmq.client.instance import ClientInstance, TlsOption, session_credentials
from orbitmq.model import MessageExt, Prop
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode

_NO_MESSAGE = (int(ResponseCode.PULL_NOT_FOUND), int(ResponseCode.POLLING_TIMEOUT), int(ResponseCode.POLLING_FULL))
_INIT_MODES = {"MIN": 0, "MAX": 1}


def receipt_handle(msg: MessageExt) -> str:
    """The receipt handle (POP_CK extraInfo) of a message returned by SimpleConsumer.receive."""
    handle = msg.properties.get(Prop.POP_CK)
    if not handle:
        raise ValueError("message has no receipt handle (was it received by a SimpleConsumer?)")
    return handle


def _handle_parts(handle: str) -> list[str]:
    parts = handle.split()
    if len(parts) < 7:
        raise ValueError(f"bad receipt handle {handle!r}")
    return parts


class SimpleConsumer:
    def __init__(self, group: str, namesrv: str, topic: str, expression: str = "*", *,
                 instance_name: str | None = None, init_mode: str = "MIN", timeout_ms: int = 3000,
                 access_key: str | None = None, secret_key: str | None = None,
                 tls: TlsOption = None, broker_addr: str | None = None) -> None:
        if init_mode not in _INIT_MODES:
            raise ValueError(f"init_mode must be MIN or MAX, not {init_mode!r}")
        self.group = group
        self.namesrv = namesrv
        self.topic = topic
        self.expression = expression or "*"
        self.instance_name = instance_name
        self.credentials = session_credentials(access_key, secret_key)  # RocketMQ ACL: sign every request
        self.tls = tls  # True or an ssl.SSLContext: TLS to name servers and brokers
        self.init_mode = init_mode
        # pop from (and acknowledge through) this one broker instead of each broker name's master: a member of a
        # Raft group whose consumer group uses local delivery (docs/design/local-delivery.md)
        self.broker_addr = broker_addr
        self.timeout_ms = timeout_ms
        self._inst: ClientInstance | None = None
        self._rr = 0

    async def start(self) -> None:
        if self._inst is None:
            self._inst = await ClientInstance.acquire(self.namesrv, self.instance_name, self.credentials, tls=self.tls)

    async def shutdown(self) -> None:
        inst, self._inst = self._inst, None
        if inst is not None:
            await inst.release()

    async def __aenter__(self) -> SimpleConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    def _instance(self) -> ClientInstance:
        if self._inst is None:
            raise ClientStateError(f"simple consumer {self.group} is not started")
        return self._inst

    async def _brokers(self) -> list[str]:
        inst = self._instance()
        route = inst.routes.get(self.topic) or await inst.update_route(self.topic)
        if route is None:
            raise NoRouteError(f"no route for topic {self.topic}")
        names = sorted({mq.broker_name for mq in route.subscribe_queues(self.topic)})
        if not names:
            raise NoRouteError(f"no readable queue for topic {self.topic}")
        return names

    async def receive(self, max_nums: int = 16, invisible_time_ms: int = 30_000,
                      poll_ms: int = 0) -> list[MessageExt]:
        """Pop up to max_nums messages; the broker holds the request up to poll_ms when nothing is ready.
        Brokers are tried in turn; only the last one tried is long-polled."""
        inst = self._instance()
        names = await self._brokers()
        if self.broker_addr:
            names = names[:1]
        self._rr += 1
        order = [names[(self._rr + i) % len(names)] for i in range(len(names))]
        for i, name in enumerate(order):
            poll = poll_ms if i == len(order) - 1 else 0
            header = {"consumerGroup": self.group, "topic": self.topic, "queueId": "-1", "maxMsgNums": str(max_nums),
                      "invisibleTime": str(invisible_time_ms), "pollTime": str(poll),
                      "bornTime": str(now_ms()), "initMode": str(_INIT_MODES[self.init_mode]),
                      "expType": "TAG", "exp": self.expression}
            cmd = RemotingCommand.request(RequestCode.POP_MESSAGE, header)
            addr = self.broker_addr or inst.broker_addr(name)
            resp = await inst.invoke(addr, cmd, poll + self.timeout_ms)
            if resp.code in _NO_MESSAGE:
                continue
            broker_api.check(resp, addr)
            msgs = broker_api.decode_messages(resp.body)
            if msgs:
                return msgs
        return []

    async def _invoke_handle(self, code: int, msg: MessageExt, extra: dict[str, str]) -> RemotingCommand:
        inst = self._instance()
        handle = receipt_handle(msg)
        parts = _handle_parts(handle)
        header = {"consumerGroup": self.group, "topic": self.topic, "queueId": parts[6], "extraInfo": handle,
                  "offset": str(msg.queue_offset), **extra}
        addr = self.broker_addr or inst.broker_addr(parts[5])
        return broker_api.check(await inst.invoke(addr, RemotingCommand.request(code, header), self.timeout_ms), addr)

    async def ack(self, msg: MessageExt) -> None:
        """Acknowledge a received message: it is never delivered to this group again."""
        await self._invoke_handle(RequestCode.ACK_MESSAGE, msg, {})

    async def change_invisible_time(self, msg: MessageExt, invisible_time_ms: int) -> None:
        """Make the message invisible for invisible_time_ms from now; its receipt handle is renewed in place."""
        resp = await self._invoke_handle(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, msg,
                                         {"invisibleTime": str(invisible_time_ms)})
        parts = _handle_parts(receipt_handle(msg))
        ext = resp.ext_fields or {}
        parts[0] = str(msg.queue_offset)  # the new checkpoint covers just this message
        parts[1] = ext.get("popTime", parts[1])
        parts[2] = ext.get("invisibleTime", str(invisible_time_ms))
        parts[3] = ext.get("reviveQid", parts[3])
        if len(parts) < 8:
            parts.append(str(msg.queue_offset))
        msg.properties[Prop.POP_CK] = " ".join(parts)
