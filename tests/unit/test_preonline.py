"""Pre-online service (RIP-32) against fake name-server/slave answers: steps, bounds, isolation, merge."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import pytest

from orbitmq.base.errors import RemotingConnectError
from orbitmq.broker.metadata.data_version import DataVersion
from orbitmq.broker.metadata.offset_versions import DelayOffsetTable
from orbitmq.broker.metadata.offsets import ConsumerOffsetManager
from orbitmq.broker.services import preonline
from orbitmq.broker.services.ha import HAService
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies import KVTable

ME = "127.0.0.1:10911"
MY_HA = "127.0.0.1:10912"
SLAVE = "127.0.0.1:20911"

pytestmark = pytest.mark.timeout(20)


class FakeDelay:
    def __init__(self, table: DelayOffsetTable) -> None:
        self.offsets = table
        self.persisted = 0

    def persist(self) -> None:
        self.persisted += 1


class FakeHA:
    """The two HAService methods pre-online uses: group_members (faked) and pull_offsets (the real code)."""

    pull_offsets = HAService.pull_offsets
    _fetch = HAService._fetch
    _adopt_delay_offsets = HAService._adopt_delay_offsets

    def __init__(self, ctx: Any, env: Any, members: dict[int, str] | None, hang: bool = False) -> None:
        self.ctx = ctx
        self.env = env
        self.members = members
        self.hang = hang

    async def group_members(self) -> dict[int, str] | None:
        if self.hang:
            await asyncio.sleep(3600)
        return self.members


class FakeSlaveClient:
    """Answers like a live slave: 906 ok, runtime info (HA-connected after `connect_after` polls), offsets."""

    def __init__(self, consumer_body: bytes, delay_body: bytes, connect_after: int = 2, dead: bool = False) -> None:
        self.consumer_body = consumer_body
        self.delay_body = delay_body
        self.connect_after = connect_after
        self.dead = dead
        self.calls: list[tuple[str, int, dict[str, str]]] = []
        self.polls = 0

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout_ms: int = 3000) -> RemotingCommand:
        self.calls.append((addr, cmd.code, dict(cmd.ext_fields or {})))
        if self.dead:
            raise RemotingConnectError(f"connect to {addr} refused")
        if cmd.code == RequestCode.EXCHANGE_BROKER_HA_INFO:
            return cmd.response()
        if cmd.code == RequestCode.GET_BROKER_RUNTIME_INFO:
            self.polls += 1
            connected = self.connect_after >= 0 and self.polls > self.connect_after
            table = {"haConnected": str(connected).lower(), "haMasterAddr": MY_HA if connected else ""}
            return cmd.response(body=KVTable(table).to_json())
        if cmd.code == RequestCode.GET_ALL_CONSUMER_OFFSET:
            return cmd.response(body=self.consumer_body)
        if cmd.code == RequestCode.GET_ALL_DELAY_OFFSET:
            return cmd.response(body=self.delay_body)
        return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, "no")


def _setup(tmp_path: Any, client: Any, members: dict[int, str] | None, hang: bool = False, **svc_kw: Any) -> Any:
    cfg = SimpleNamespace(is_slave=False, enable_slave_acting_master=True, skip_pre_online=False, broker_addr=ME,
                          ha_server_addr=MY_HA)
    offsets = ConsumerOffsetManager(str(tmp_path))
    offsets.commit("G", "T", 0, 50)
    offsets.commit("G", "T", 1, 80)
    isolation: list[bool] = []
    delay = FakeDelay(DelayOffsetTable({1: 4, 2: 9}, DataVersion(1, 1)))
    ctx = SimpleNamespace(config=cfg, offsets=offsets, store=SimpleNamespace(flushed_offset=1234), services={},
                          runtime_extras=[], set_isolated=isolation.append)
    env = SimpleNamespace(client=client)
    ctx.services["ha"] = FakeHA(ctx, env, members, hang)
    ctx.services["delay"] = delay
    svc = preonline.PreOnlineService(ctx, env, **svc_kw)  # type: ignore[arg-type]
    return svc, ctx, isolation


def test_enabled_on_every_classic_master() -> None:
    def cfg(**kw: Any) -> Any:
        base = {"is_slave": False, "enable_slave_acting_master": True, "skip_pre_online": False,
                "enable_controller_mode": False}
        return SimpleNamespace(**{**base, **kw})

    assert preonline.enabled(cfg())
    assert preonline.enabled(cfg(enable_slave_acting_master=False))  # offsets never roll back, feature or not
    assert not preonline.enabled(cfg(is_slave=True))
    assert not preonline.enabled(cfg(enable_controller_mode=True))
    assert not preonline.enabled(cfg(dynamic_role=True))
    assert not preonline.enabled(cfg(skip_pre_online=True))
    assert preonline.create(SimpleNamespace(config=cfg(skip_pre_online=True)), None) is None  # type: ignore[arg-type]


def test_no_live_slave_goes_online_at_once(tmp_path) -> None:
    client = FakeSlaveClient(b"", b"")
    svc, ctx, isolation = _setup(tmp_path, client, {0: ME})
    asyncio.run(svc.start())
    assert svc.state == "no-slave" and isolation == [True, False] and client.calls == []
    assert ctx.runtime_extras[0]()["preOnline"] == "no-slave"


def test_takes_back_the_slaves_newer_offsets_without_lowering_any(tmp_path) -> None:
    consumer = (b'{"dataVersion":{"counter":900,"timestamp":5},'
                b'"offsetTable":{"T@G":{0:70,1:60},"T@H":{0:3}}}')
    delay = b'{"dataVersion":{"counter":7,"timestamp":5},"offsetTable":{1:6,2:2,3:1}}'
    client = FakeSlaveClient(consumer, delay, connect_after=2)
    svc, ctx, isolation = _setup(tmp_path, client, {0: ME, 1: SLAVE}, ha_wait_s=5)
    asyncio.run(svc.start())
    assert svc.state == "done", svc.details
    assert isolation == [True, False]
    ha_info = [c for c in client.calls if c[1] == RequestCode.EXCHANGE_BROKER_HA_INFO]
    assert ha_info == [(SLAVE, RequestCode.EXCHANGE_BROKER_HA_INFO,
                        {"masterHaAddress": MY_HA, "masterAddress": ME, "masterFlushOffset": "1234"})]
    assert client.polls == 3  # waited for the slave's HA connection before pulling
    codes = [c[1] for c in client.calls]
    assert codes.index(RequestCode.GET_ALL_CONSUMER_OFFSET) > codes.index(RequestCode.GET_BROKER_RUNTIME_INFO)
    # per queue the larger offset: queue 0 raised, queue 1 kept (the slave's 60 < our 80), new group taken
    assert ctx.offsets.table() == {"T@G": {0: 70, 1: 80}, "T@H": {0: 3}}
    assert ctx.offsets.data_version.counter > 900  # adopted the slave's newer version, then stamped the merge
    d = ctx.services["delay"]
    assert dict(d.offsets) == {1: 6, 2: 9, 3: 1} and d.offsets.data_version.counter == 7 and d.persisted >= 1
    raw = (tmp_path / "consumerOffset.json").read_bytes()  # persisted before going online
    assert b'"T@G":{0:70,1:80}' in raw


def test_dead_slave_does_not_keep_the_master_offline(tmp_path) -> None:
    client = FakeSlaveClient(b"", b"", dead=True)
    svc, ctx, isolation = _setup(tmp_path, client, {0: ME, 1: SLAVE})
    began = time.monotonic()
    asyncio.run(svc.start())
    assert time.monotonic() - began < 2
    assert svc.state == "failed" and isolation == [True, False]
    assert "unreachable" in svc.runtime()["preOnlineDetail"]
    assert ctx.offsets.table() == {"T@G": {0: 50, 1: 80}}


def test_slave_that_never_connects_is_waited_for_a_bounded_time(tmp_path) -> None:
    consumer = b'{"offsetTable":{"T@G":{0:99}}}'  # a 4.x slave: no dataVersion
    client = FakeSlaveClient(consumer, b'{"offsetTable":{}}', connect_after=-1)
    svc, ctx, isolation = _setup(tmp_path, client, {0: ME, 2: SLAVE}, ha_wait_s=0.4)
    began = time.monotonic()
    asyncio.run(svc.start())
    assert 0.3 < time.monotonic() - began < 3
    assert svc.state == "done" and "not HA-connected" in svc.runtime()["preOnlineDetail"]
    assert ctx.offsets.query("G", "T", 0) == 99 and isolation == [True, False]


def test_whole_run_is_bounded(tmp_path) -> None:
    svc, ctx, isolation = _setup(tmp_path, FakeSlaveClient(b"", b""), None, hang=True, timeout_s=0.3)
    began = time.monotonic()
    asyncio.run(svc.start())
    assert time.monotonic() - began < 2
    assert svc.state == "timeout" and isolation == [True, False]
    # the event loop may fire a timer up to its clock resolution early (asyncio runs handles due within
    # `loop._clock_resolution`, uvloop rounds to whole ms): 299 ms was seen on a busy machine
    assert int(svc.runtime()["preOnlineMs"]) >= 290


def test_no_name_server(tmp_path) -> None:
    svc, ctx, isolation = _setup(tmp_path, FakeSlaveClient(b"", b""), None)
    asyncio.run(svc.start())
    assert svc.state == "no-namesrv" and isolation == [True, False]


# ---- the slave's and the master's side in services/ha.py ------------------------------------------------------
class RecordingClient:
    """Outgoing client of a broker: records oneway forwards; name servers answer nothing useful."""

    def __init__(self) -> None:
        self.oneway: list[tuple[str, dict[str, str]]] = []

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout_ms: int = 3000) -> RemotingCommand:
        return cmd.response(ResponseCode.SYSTEM_ERROR, "nothing here")

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        self.oneway.append((addr, dict(cmd.ext_fields or {})))


def _ha_service(tmp_path: Any, role: str) -> tuple[HAService, Any]:
    from orbitmq.broker.config import BrokerConfig

    cfg = BrokerConfig(broker_role=role, broker_id=1 if role == "SLAVE" else 0, namesrv_addr="127.0.0.1:1",
                       enable_slave_acting_master=True)
    store = SimpleNamespace(epochs=SimpleNamespace(entries=[]), master_epoch=1, max_phys_offset=0,
                            flushed_offset=0, replica=SimpleNamespace(on_written=None))
    ctx = SimpleNamespace(config=cfg, store=store, offsets=ConsumerOffsetManager(str(tmp_path)), services={},
                          runtime_extras=[], topics=None, groups=None)
    client = RecordingClient()
    env = SimpleNamespace(client=client, clock=SimpleNamespace(now_ms=lambda: 0, monotonic_ms=lambda: 0),
                          store_config=SimpleNamespace(mapped_file_size_commitlog=1 << 20))
    return HAService(ctx, env), client  # type: ignore[arg-type]


def _update(ext: dict[str, str]) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, ext)


def test_slave_follows_a_master_announced_by_906(tmp_path) -> None:
    ha, _ = _ha_service(tmp_path, "SLAVE")
    handler = ha.handlers()[int(RequestCode.EXCHANGE_BROKER_HA_INFO)]
    ask = handler(None, RemotingCommand.request(RequestCode.EXCHANGE_BROKER_HA_INFO, {}))
    assert ask.code == ResponseCode.SUCCESS and ask.ext_fields["masterHaAddress"] == ""
    push = RemotingCommand.request(RequestCode.EXCHANGE_BROKER_HA_INFO,
                                   {"masterHaAddress": MY_HA, "masterAddress": ME, "masterFlushOffset": "7"})
    assert handler(None, push).code == ResponseCode.SUCCESS
    assert ha.master_addr == ME and ha.pushed_master_ha == MY_HA
    assert asyncio.run(ha._resolve_master_ha()) == MY_HA  # preferred while it can be reached
    assert ha.client is not None
    ha.client.connect_failed = True
    assert asyncio.run(ha._resolve_master_ha()) is None  # unreachable: dropped, the name servers know nothing
    assert ha.pushed_master_ha is None


def test_offsets_forwarded_between_master_and_slave_once(tmp_path) -> None:
    async def go() -> None:
        master, m_client = _ha_service(tmp_path / "m", "ASYNC_MASTER")
        master.slave_addrs = [SLAVE]
        on_master = master.handlers()[int(RequestCode.UPDATE_CONSUMER_OFFSET)]
        ext = {"consumerGroup": "G", "topic": "T", "queueId": "1", "commitOffset": "42"}
        assert on_master(None, _update(ext)).code == ResponseCode.SUCCESS
        assert on_master(None, _update({**ext, "commitOffset": "43", "orbitForwarded": "true"})).code == 0
        await asyncio.sleep(0.05)
        assert master.ctx.offsets.query("G", "T", 1) == 43
        stamp = m_client.oneway[0][1].pop("orbitOffsetStamp")  # the commit's stamp travels with it
        assert int(stamp) > 0
        assert m_client.oneway == [(SLAVE, {**ext, "orbitForwarded": "true"})]  # a forwarded one is not re-sent

        slave, s_client = _ha_service(tmp_path / "s", "SLAVE")
        slave.master_addr = ME
        on_slave = slave.handlers()[int(RequestCode.UPDATE_CONSUMER_OFFSET)]
        assert on_slave(None, _update({**ext, "orbitForwarded": "true"})).code == ResponseCode.SUCCESS
        assert on_slave(None, _update({**ext, "commitOffset": "50"})).code == ResponseCode.SUCCESS
        await asyncio.sleep(0.05)
        assert slave.ctx.offsets.query("G", "T", 1) == 50
        assert int(s_client.oneway[0][1].pop("orbitOffsetStamp")) == slave.ctx.offsets.stamp("G", "T", 1)
        assert s_client.oneway == [(ME, {**ext, "commitOffset": "50", "orbitForwarded": "true"})]
        assert master.ha_runtime()["haForwardedOffsets"] == "1"

    asyncio.run(go())


def test_ha_client_reconnect_now_skips_the_backoff() -> None:
    from orbitmq.replication import HAClient, ReplicationConfig

    async def go() -> None:
        hits: dict[str, int] = {"a": 0, "b": 0}

        def server(name: str) -> Any:
            async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                hits[name] += 1
                await reader.read()  # hold the connection until the client drops it
                writer.close()
            return handle

        srv_a = await asyncio.start_server(server("a"), "127.0.0.1", 0)
        srv_b = await asyncio.start_server(server("b"), "127.0.0.1", 0)
        addrs = {n: f"127.0.0.1:{s.sockets[0].getsockname()[1]}" for n, s in (("a", srv_a), ("b", srv_b))}
        target = ["a"]

        async def resolve() -> str:
            return addrs[target[0]]

        store = SimpleNamespace(epochs=SimpleNamespace(entries=[]), max_phys_offset=0,
                                replica=SimpleNamespace(dispatch_complete=lambda: None))
        cfg = ReplicationConfig(reconnect_min_ms=10_000, reconnect_max_ms=10_000, housekeeping_ms=60_000)
        client = HAClient(store, resolve, cfg)
        task = asyncio.create_task(client.run())
        try:
            for _ in range(50):
                if client.connected:
                    break
                await asyncio.sleep(0.02)
            assert client.connected and client.master_ha_addr == addrs["a"]
            target[0] = "b"
            began = time.monotonic()
            client.reconnect_now()
            for _ in range(100):
                if client.connected and client.master_ha_addr == addrs["b"]:
                    break
                await asyncio.sleep(0.02)
            assert client.master_ha_addr == addrs["b"] and hits["b"] == 1
            assert time.monotonic() - began < 2  # not the 10 s backoff
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            srv_a.close()
            srv_b.close()

    asyncio.run(go())


# ---- a slave behind the consumer never sends it back (handlers/pull.py) ------------------------------------
@pytest.mark.parametrize(("acting", "slave_read", "code"), [
    (True, False, ResponseCode.PULL_NOT_FOUND),  # the acting slave: "nothing new yet" at the same offset
    (False, True, ResponseCode.PULL_NOT_FOUND),  # a slave read
    (False, False, ResponseCode.PULL_RETRY_IMMEDIATELY),  # back to the master, at the same offset
])
def test_slave_behind_the_consumer_keeps_its_offset(tmp_path, acting: bool, slave_read: bool, code: int) -> None:
    import dataclasses

    from orbitmq.broker.client_registry import ClientRegistry
    from orbitmq.broker.config import BrokerConfig
    from orbitmq.broker.context import BrokerContext
    from orbitmq.broker.handlers import pull as pull_mod
    from orbitmq.broker.metadata.groups import SubscriptionGroupManager
    from orbitmq.broker.metadata.topics import TopicConfigManager
    from orbitmq.broker.stats import BrokerStats
    from orbitmq.model.topic import TopicConfig
    from orbitmq.store import MessageInner, MessageStore, StoreConfig

    store = MessageStore(StoreConfig(str(tmp_path / "store"), mapped_file_size_commitlog=4 << 20,
                                     mapped_file_size_consume_queue=20 * 1000, max_message_size=1 << 20, max_hash_slot_num=100,
                                     max_index_num=400))
    store.load()
    try:
        cfg = BrokerConfig(listen_port=10911, broker_ip1="127.0.0.1")
        config_dir = str(tmp_path / "store" / "config")
        ctx = BrokerContext(cfg, store, TopicConfigManager(config_dir, cfg), SubscriptionGroupManager(config_dir, cfg),
                            ConsumerOffsetManager(config_dir), ClientRegistry(), BrokerStats(), "127.0.0.1:10911")
        ctx.topics.create_or_update(TopicConfig("TB", 1, 1))
        for i in range(3):  # the slave got 3 messages before its master died; the consumer is at 40
            asyncio.run(store.put_message(MessageInner("TB", 0, b"m%d" % i, {})))
        ctx.config = dataclasses.replace(cfg, broker_role="SLAVE", broker_id=1, slave_read_enable=slave_read)
        ctx.acting_master = acting
        proc = pull_mod.build(ctx)
        req = RemotingCommand.request(RequestCode.PULL_MESSAGE, {
            "consumerGroup": "G", "topic": "TB", "queueId": "0", "queueOffset": "40", "maxMsgNums": "32",
            "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*",
            "subVersion": "0", "expressionType": "TAG"})
        r = proc.handle(SimpleNamespace(remote_addr="127.0.0.1:1", attrs={}), req)
        assert (r.code, r.ext_fields["nextBeginOffset"]) == (code, "40")  # never PULL_OFFSET_MOVED to 0
        ctx.config = dataclasses.replace(cfg)  # the same request on a master: corrected (Java: min offset 0)
        r = proc.handle(SimpleNamespace(remote_addr="127.0.0.1:1", attrs={}), req)
        assert (r.code, r.ext_fields["nextBeginOffset"]) == (ResponseCode.PULL_OFFSET_MOVED, "0")
    finally:
        asyncio.run(store.shutdown())


def test_master_merges_the_offsets_of_a_slave_that_reappears(tmp_path) -> None:
    """A slave that comes back after the master's pre-online (or was down then) still hands over the commits it
    took: the master merges its offsets when it shows up in the member group, the newer commit winning."""
    slave_table = ConsumerOffsetManager(str(tmp_path), clock=lambda: 4_000_000_000_000)  # committed later
    slave_table.commit("G", "T", 0, 70)

    class SlaveAnswers(RecordingClient):
        async def invoke(self, addr: str, cmd: RemotingCommand, timeout_ms: int = 3000) -> RemotingCommand:
            if cmd.code == RequestCode.GET_ALL_CONSUMER_OFFSET:
                return cmd.response(body=slave_table.encode())
            return await super().invoke(addr, cmd, timeout_ms)

    async def go() -> None:
        master, _ = _ha_service(tmp_path / "m", "ASYNC_MASTER")
        master.env.client = master.forwarder.client = SlaveAnswers()
        master.ctx.offsets.commit("G", "T", 0, 10)
        master.ctx.offsets.commit("G", "T", 1, 5)
        members: dict[int, str] = {0: ME}

        async def group_members() -> dict[int, str]:
            return dict(members)

        master.group_members = group_members  # type: ignore[method-assign]
        assert await master.refresh_members_once() == [] and master.slave_addrs == []
        members[1] = SLAVE
        assert await master.refresh_members_once() == [SLAVE]
        assert master.ctx.offsets.query_all("G", "T") == {0: 70, 1: 5}
        assert await master.refresh_members_once() == []  # already known: not pulled again

    asyncio.run(go())
