"""StoreConfig: the store's only configuration object; validate() checks relations and derive() fills defaults."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field

from orbitmq.base.errors import ConfigError
from orbitmq.store.layout import COMMITLOG_DIR, CONSUMEQUEUE_DIR, CQ_ENTRY_SIZE, INDEX_DIR
from orbitmq.store.schedule import DEFAULT_DELAY_LEVELS, parse_delay_levels

FLUSH_TYPES = ("ASYNC_FLUSH", "SYNC_FLUSH")
CONFIRM_MODES = ("written", "flushed")


def _meta(important: bool = False, hot_reloadable: bool = False) -> dict[str, bool]:
    return {"important": important, "hot_reloadable": hot_reloadable}


@dataclass(frozen=True)
class StoreConfig:
    store_path_root_dir: str
    # storePathCommitLog: "" = <storePathRootDir>/commitlog; another directory (its own disk, say) holds the CommitLog
    # segments and a lock file of their own; everything else stays under the root
    store_path_commitlog: str = field(default="", metadata=_meta(True))
    mapped_file_size_commitlog: int = field(default=1 << 30, metadata=_meta(True))
    mapped_file_size_consume_queue: int = 300_000 * 20
    flush_disk_type: str = field(default="ASYNC_FLUSH", metadata=_meta(True))
    flush_interval_commitlog_ms: int = field(default=500, metadata=_meta(hot_reloadable=True))
    flush_commitlog_least_pages: int = 4
    flush_commitlog_thorough_interval_ms: int = 10_000
    sync_flush_timeout_ms: int = 5_000
    flush_interval_consume_queue_ms: int = 1_000
    file_reserved_time_hours: int = field(default=72, metadata=_meta(True, True))
    delete_when: str = field(default="04", metadata=_meta(hot_reloadable=True))
    disk_max_used_space_ratio: int = field(default=75, metadata=_meta(hot_reloadable=True))
    max_message_size: int = 4 * 1024 * 1024
    check_crc_on_recover: bool = True
    message_index_enable: bool = True
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 20_000_000
    access_message_in_memory_max_ratio: int = 40
    # "written": visible once appended (ASYNC_FLUSH default). "flushed": visible once durable.
    # None (the default) is derived: SYNC_FLUSH -> "flushed", ASYNC_FLUSH -> "written".
    confirm_offset_mode: str | None = None
    disk_warning_ratio: int = 90  # refuse writes above this disk use (%)
    disk_force_clean_ratio: int = 85
    clean_interval_ms: int = 10_000
    physical_memory_bytes: int = 0  # 0 = ask the OS (for the in-memory test)
    # delay levels (RocketMQ keeps messageDelayLevel in the store config): schedule entries' tags code = due time
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    # admission control (RocketMQ's BrokerFastFailure keys): a send is refused with SYSTEM_BUSY while the CommitLog
    # flush in flight has run longer than osPageCacheBusyTimeOutMills ("[PCBUSY_CLEAN_QUEUE]") or the oldest
    # group-commit waiter has waited longer than waitTimeMillsInSendQueue ("[TIMEOUT_CLEAN_QUEUE]")
    broker_fast_failure_enable: bool = field(default=True, metadata=_meta(hot_reloadable=True))
    os_page_cache_busy_timeout_ms: int = field(default=1_000, metadata=_meta(hot_reloadable=True))
    wait_time_ms_in_send_queue: int = field(default=200, metadata=_meta(hot_reloadable=True))
    # bound of one pull's ConsumeQueue scan (RocketMQ's maxFilterMessageSize / getMessage's maxFilterMessageCount),
    # in ConsumeQueue bytes: a pull reads at most max(this, maxMsgNums * 20) / 20 entries (16000 -> 800), so a tag or
    # SQL92 filter matching nothing answers after that many entries with the offset to go on from
    max_filter_message_size: int = 16_000

    def validate(self) -> None:
        if not self.store_path_root_dir:
            raise ConfigError("storePathRootDir must be set")
        if self.commitlog_dir_is_separate:
            root = os.path.normpath(self.store_path_root_dir)
            taken = {root} | {os.path.join(root, d) for d in (CONSUMEQUEUE_DIR, INDEX_DIR, "config")}
            if os.path.normpath(self.commitlog_dir) in taken:
                raise ConfigError(f"storePathCommitLog {self.commitlog_dir} is the store root or one of its "
                                  "consumequeue / index / config directories")
        if self.flush_disk_type not in FLUSH_TYPES:
            raise ConfigError(f"flushDiskType must be one of {FLUSH_TYPES}, got {self.flush_disk_type!r}")
        if self.confirm_offset_mode is not None and self.confirm_offset_mode not in CONFIRM_MODES:
            raise ConfigError(f"confirm_offset_mode must be one of {CONFIRM_MODES}")
        if self.mapped_file_size_commitlog < 4096:
            raise ConfigError("mappedFileSizeCommitLog must be at least 4096 bytes")
        if self.mapped_file_size_consume_queue <= 0 or self.mapped_file_size_consume_queue % CQ_ENTRY_SIZE:
            raise ConfigError("mappedFileSizeConsumeQueue must be a positive multiple of 20")
        if self.max_message_size <= 0:
            raise ConfigError("maxMessageSize must be positive")
        if self.max_filter_message_size < CQ_ENTRY_SIZE:
            raise ConfigError(f"maxFilterMessageSize must be at least {CQ_ENTRY_SIZE} (one ConsumeQueue entry)")
        if self.max_message_size >= self.mapped_file_size_commitlog - 1024:
            raise ConfigError("mappedFileSizeCommitLog must be larger than maxMessageSize + 1 KiB")
        for name in ("flush_interval_commitlog_ms", "sync_flush_timeout_ms", "flush_interval_consume_queue_ms",
                     "flush_commitlog_thorough_interval_ms", "clean_interval_ms", "os_page_cache_busy_timeout_ms",
                     "wait_time_ms_in_send_queue"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive")
        if not 0 <= self.flush_commitlog_least_pages:
            raise ConfigError("flushCommitLogLeastPages must be >= 0")
        if not (1 <= self.disk_max_used_space_ratio <= 95):
            raise ConfigError("diskMaxUsedSpaceRatio must be in 1..95")
        if not (0 <= self.access_message_in_memory_max_ratio <= 100):
            raise ConfigError("accessMessageInMemoryMaxRatio must be in 0..100")
        if self.max_hash_slot_num <= 0 or self.max_index_num <= 0:
            raise ConfigError("maxHashSlotNum and maxIndexNum must be positive")
        try:
            hours = [int(h) for h in self.delete_when.split(";") if h]
        except ValueError:
            raise ConfigError(f"deleteWhen must be hours separated by ';', got {self.delete_when!r}") from None
        if not hours or any(not 0 <= h <= 23 for h in hours):
            raise ConfigError(f"deleteWhen must list hours 00..23, got {self.delete_when!r}")
        parse_delay_levels(self.message_delay_level)

    def derive(self) -> StoreConfig:
        """Validated copy with derived values filled in (confirm_offset_mode)."""
        self.validate()
        mode = self.confirm_offset_mode
        if mode is None:
            mode = "flushed" if self.flush_disk_type == "SYNC_FLUSH" else "written"
        return dataclasses.replace(self, confirm_offset_mode=mode)

    @property
    def commitlog_dir(self) -> str:
        return self.store_path_commitlog or os.path.join(self.store_path_root_dir, COMMITLOG_DIR)

    @property
    def commitlog_dir_is_separate(self) -> bool:
        """True when storePathCommitLog names a directory other than <storePathRootDir>/commitlog."""
        default = os.path.join(self.store_path_root_dir, COMMITLOG_DIR)
        return os.path.normpath(self.commitlog_dir) != os.path.normpath(default)

    @property
    def sync_flush(self) -> bool:
        return self.flush_disk_type == "SYNC_FLUSH"

    @property
    def delete_hours(self) -> frozenset[int]:
        return frozenset(int(h) for h in self.delete_when.split(";") if h)
