"""Paths in a conf file resolve against the file's folder, never the current directory (issue 17: a broker restarted
from another folder quietly created an empty store). Absolute paths stay; `~` is expanded."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orbitmq.base.properties import resolve_path
from orbitmq.broker.config_file import build_configs, load_broker_conf
from orbitmq.controller.config import load_controller_conf
from orbitmq.namesrv.config import load_namesrv_conf


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The conf lives in tmp/member; the process runs in tmp/other."""
    other = tmp_path / "other"
    other.mkdir()
    monkeypatch.chdir(other)
    return tmp_path / "member"


def test_broker_paths_are_relative_to_the_conf_folder(elsewhere: Path) -> None:
    elsewhere.mkdir()
    conf = elsewhere / "broker.conf"
    conf.write_text("brokerName=b\nstorePathRootDir=store\nstorePathCommitLog=../logs/cl\n"
                    "storePathBrokerIdentity=ident\n")
    for path in (str(conf), os.path.relpath(conf)):  # given absolute or relative to the current directory
        broker, store, _ = load_broker_conf(path)
        assert store.store_path_root_dir == str(elsewhere / "store")
        assert store.store_path_commitlog == str(elsewhere.parent / "logs" / "cl")
        assert broker.store_path_broker_identity == str(elsewhere / "ident")


def test_broker_absolute_and_home_paths_unchanged(elsewhere: Path, tmp_path: Path) -> None:
    elsewhere.mkdir()
    conf = elsewhere / "broker.conf"
    conf.write_text(f"brokerName=b\nstorePathRootDir={tmp_path}/abs\nstorePathCommitLog=~/cl\n")
    _, store, _ = load_broker_conf(str(conf))
    assert store.store_path_root_dir == str(tmp_path / "abs")
    assert store.store_path_commitlog == os.path.join(os.path.expanduser("~"), "cl")


def test_properties_without_a_file_still_use_the_current_directory(elsewhere: Path) -> None:
    _, store, _ = build_configs({"storePathRootDir": "s"})
    assert store.store_path_root_dir == os.path.join(os.getcwd(), "s")


def test_namesrv_kv_config_path_relative_to_the_conf(elsewhere: Path) -> None:
    elsewhere.mkdir()
    conf = elsewhere / "namesrv.conf"
    conf.write_text("listenPort=9876\nkvConfigPath=kvConfig.json\n")
    cfg, _ = load_namesrv_conf(os.path.relpath(conf))
    assert cfg.kv_config_path == str(elsewhere / "kvConfig.json")


def test_controller_store_path_relative_to_the_conf(elsewhere: Path) -> None:
    elsewhere.mkdir()
    conf = elsewhere / "controller.conf"
    conf.write_text("controllerDLegerGroup=g\ncontrollerDLegerPeers=n0-127.0.0.1:9878\ncontrollerDLegerSelfId=n0\n"
                    "controllerStorePath=store\n")
    cfg, _ = load_controller_conf(conf)
    assert cfg.controller_store_path == str(elsewhere / "store")


def test_resolve_path() -> None:
    assert resolve_path("a/../b", "/x/y") == "/x/y/b"
    assert resolve_path("/abs/p", "/x") == "/abs/p"
    assert resolve_path(" rel ", "/x") == "/x/rel"
    assert resolve_path("~/p", "/x") == os.path.join(os.path.expanduser("~"), "p")
