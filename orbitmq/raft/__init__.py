"""orbitmq.raft: a Raft consensus library (sans-IO core, file storage, asyncio driver, remoting transport).

Layer L4: imports store, remoting, protocol, base only. Used by the controller (RIP-44) and, later, by
Raft-replicated broker groups.
"""
