"""Lease election, broker side (enableLeaseElection): a LeaseElector (orbitmq/lease/) names the master of the group
and its epoch; LeaseSource feeds that to the ReplicasManager's role-switch machinery. Design:
docs/design/lease-election.md ("Broker side")."""
