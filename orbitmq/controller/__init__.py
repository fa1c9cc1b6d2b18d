"""orbitmq.controller: the RIP-44 controller (replicated broker-group metadata and master election).

Layer L5: state/election/heartbeat are sans-IO; service wires them to the Raft driver and the remoting server.
"""
