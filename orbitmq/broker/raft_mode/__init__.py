"""Raft-replicated broker groups (RocketMQ's DLedger CommitLog mode: enableDLegerCommitLog). Design:
docs/design/raft-group.md."""
