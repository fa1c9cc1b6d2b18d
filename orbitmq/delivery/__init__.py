"""Local delivery (issue 14, seed 001): a deterministic consumption state machine applied by every replica of a
Raft group, whose delivery effects are executed by the replica local to the consumer. Pure: imports only
orbitmq.base. Design: docs/design/local-delivery.md."""
