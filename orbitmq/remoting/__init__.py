"""asyncio transport for the remoting protocol: server, client pool and the shared Connection."""

from orbitmq.remoting.client import RemotingClient, split_addr
from orbitmq.remoting.connection import Connection, Handler, HandlerResult
from orbitmq.remoting.server import RemotingServer

__all__ = ["Connection", "Handler", "HandlerResult", "RemotingClient", "RemotingServer", "split_addr"]
