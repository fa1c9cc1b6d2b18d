"""clusterList rows: role, brokerId, replication lag and the RIP-32 acting-master columns (pure formatter)."""

from __future__ import annotations

from orbitmq.cli.admin import CLUSTER_COLUMNS, cluster_rows

MEMBERS = [("C", "broker-a", 0, "127.0.0.1:10911"), ("C", "broker-a", 1, "127.0.0.1:10921"),
           ("C", "broker-b", 1, "127.0.0.1:10931")]


def rows_by_column(infos: list[dict[str, str]]) -> list[dict[str, object]]:
    return [dict(zip(CLUSTER_COLUMNS, row, strict=True)) for row in cluster_rows(MEMBERS, infos)]


def test_rows_show_role_lag_and_acting_master_state() -> None:
    infos = [
        {"brokerRole": "ASYNC_MASTER", "commitLogMaxOffset": "5000", "haSlaveLagBytes": "1200",
         "actingMaster": "false", "minBrokerId": "0"},
        {"brokerRole": "SLAVE", "commitLogMaxOffset": "3800", "actingMaster": "false", "minBrokerId": "0"},
        # broker-b lost its master: the slave acts (its group's smallest live id is its own)
        {"brokerRole": "SLAVE", "commitLogMaxOffset": "900", "actingMaster": "true", "minBrokerId": "1"},
    ]
    rows = rows_by_column(infos)
    assert [(r["BID"], r["role"], r["lagBytes"], r["actingMaster"], r["minBID"]) for r in rows] == [
        (0, "ASYNC_MASTER", 1200, "false", "0"),
        (1, "SLAVE", 1200, "false", "0"),  # master max - own max
        (1, "SLAVE", "-", "true", "1"),  # no master to compare with
    ]


def test_brokers_without_rip32_keys_or_not_answering_show_dashes() -> None:
    infos = [{"brokerRole": "SYNC_MASTER", "commitLogMaxOffset": "10", "haSlaveLagBytes": "0"}, {}, {}]
    rows = rows_by_column(infos)
    assert rows[0]["actingMaster"] == "-" and rows[0]["minBID"] == "-" and rows[0]["lagBytes"] == 0
    assert all(rows[i][c] == "-" for i in (1, 2) for c in ("role", "lagBytes", "actingMaster", "minBID"))
