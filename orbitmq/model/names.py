"""Name rules: the one place that decides whether a topic, group, broker or cluster name (or a topic that becomes a
ConsumeQueue directory) is legal. Pure functions returning an error text (None = legal); no I/O, no logging.

Rules are FULL matches (re.fullmatch): a trailing newline, NUL, '/', '.' or any non-ASCII character is refused.
Callers turn an error text into a response (SYSTEM_ERROR + remark) or a skipped record; see docs/design/names.md.
"""

from __future__ import annotations

import re

TOPIC_MAX_LENGTH = 127  # TopicValidator.TOPIC_MAX_LENGTH (4.x)
GROUP_MAX_LENGTH = 255  # Validators.CHARACTER_MAX_LENGTH
CONSUMER_GROUP_MAX_LENGTH = 120  # TOPIC_MAX_LENGTH - len("%RETRY%"): the retry topic must be a legal topic
PATH_NAME_MAX = 255  # NAME_MAX of the file systems the store runs on (bytes of one path component)
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
SERVER_NAME_MAX_LENGTH = 100  # broker / cluster names; they become topics such as rmq_sys_SYNC_BROKER_MEMBER_<b>
AUTO_CREATE_TOPIC_KEY_TOPIC = "TBW102"

_NAME_CHARS = "%|a-zA-Z0-9_-"
_NAME = re.compile(f"[{_NAME_CHARS}]+")
_SERVER_NAME = re.compile("[a-zA-Z0-9_-]+")
_PATTERN_TEXT = f"^[{_NAME_CHARS}]+$"


def _shown(name: str) -> str:
    """The name as a remark may show it: control characters escaped, long names cut."""
    text = name.encode("unicode_escape").decode("ascii")
    return text if len(text) <= 300 else text[:300] + "..."


def topic_error(topic: object) -> str | None:
    """None if `topic` is a legal topic name, else the remark: 1..127 characters of [%|a-zA-Z0-9_-]. The limit
    holds for group-derived topics too (%RETRY%<group>, %DLQ%<group>: a CommitLog record stores at most 127
    topic bytes), whose group must not be blank."""
    if not isinstance(topic, str) or not topic or not topic.strip():
        return "The specified topic is blank."
    if _NAME.fullmatch(topic) is None:
        return f"The specified topic[{_shown(topic)}] contains illegal characters, allowing only {_PATTERN_TEXT}"
    if len(topic) > TOPIC_MAX_LENGTH:
        return f"The specified topic is longer than topic max length {TOPIC_MAX_LENGTH}."
    if derived_group(topic) == "":
        return f"The specified topic[{topic}] names no group."
    return None


def send_topic_error(topic: object) -> str | None:
    """topic_error plus the send-only rule: the auto-create key topic TBW102 takes no messages."""
    err = topic_error(topic)
    if err is None and topic == AUTO_CREATE_TOPIC_KEY_TOPIC:
        return f"The topic[{topic}] is conflict with AUTO_CREATE_TOPIC_KEY_TOPIC."
    return err


def group_error(group: object, max_length: int = GROUP_MAX_LENGTH) -> str | None:
    """None if `group` is a legal group name (producer or consumer): 1..255 characters of [%|a-zA-Z0-9_-]."""
    if not isinstance(group, str) or not group or not group.strip():
        return "the specified group is blank"
    if _NAME.fullmatch(group) is None:
        return f"the specified group[{_shown(group)}] contains illegal characters, allowing only {_PATTERN_TEXT}"
    if len(group) > max_length:
        return f"the specified group is longer than group max length {max_length}."
    return None


def consumer_group_error(group: object) -> str | None:
    """group_error, and the group's %RETRY%/%DLQ% topics must be legal topics: <= 120 characters in effect."""
    err = group_error(group)
    if err is None and len(group) > CONSUMER_GROUP_MAX_LENGTH:  # type: ignore[arg-type]
        return (f"the specified consumer group is longer than {CONSUMER_GROUP_MAX_LENGTH}: its retry topic "
                f"{RETRY_GROUP_TOPIC_PREFIX}<group> would exceed topic max length {TOPIC_MAX_LENGTH}.")
    return err


def server_name_error(name: object, what: str = "broker name") -> str | None:
    """Broker and cluster names: 1..100 characters of [a-zA-Z0-9_-] (they become topics and file names)."""
    if not isinstance(name, str) or not name or not name.strip():
        return f"the {what} is blank"
    if _SERVER_NAME.fullmatch(name) is None:
        return f"the {what}[{_shown(name)}] contains illegal characters, allowing only ^[a-zA-Z0-9_-]+$"
    if len(name) > SERVER_NAME_MAX_LENGTH:
        return f"the {what} is longer than {SERVER_NAME_MAX_LENGTH} characters"
    return None


def store_topic_error(topic: object) -> str | None:
    """The store's rule for a topic that becomes `consumequeue/<topic>`: the topic characters, 1..255 of them.
    Looser than topic_error (it accepts every name the broker ever makes) and never lets a name leave its dir."""
    if not isinstance(topic, str) or _NAME.fullmatch(topic) is None:
        return f"topic[{_shown(str(topic))}] is not a legal directory name ({_PATTERN_TEXT})"
    if len(topic) > PATH_NAME_MAX:
        return f"topic of {len(topic)} characters is longer than a file name may be ({PATH_NAME_MAX})"
    return None


def derived_group(topic: str) -> str | None:
    """The group of %RETRY%<group> / %DLQ%<group>, else None."""
    for prefix in (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX):
        if topic.startswith(prefix):
            return topic[len(prefix):]
    return None


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


def is_legal_queue_id(queue_id: object) -> bool:
    """A queue id that may name `consumequeue/<topic>/<id>`: a non-negative int below 2**31."""
    return type(queue_id) is int and 0 <= queue_id < 1 << 31
