"""SDK exceptions: one class per broker/name-server ResponseCode (each with a `retriable` flag) plus client-side faults.

`error_for_response(code, remark)` maps a wire response to an exception instance; it never raises itself.
"""

from __future__ import annotations

from orbitmq.base.errors import ClientError


class ClientStateError(ClientError):
    """The client is not started, already shut down, or misused (e.g. subscribe after start)."""

    retriable = False


class MessageValidationError(ClientError):
    """The message fails client-side checks (topic name, body size, batch rules)."""

    retriable = False


class NoRouteError(ClientError):
    """No route (or no writable/readable queue) is known for a topic."""

    retriable = True


class ResponseError(ClientError):
    """A non-success response code; `code` and `remark` come from the wire."""

    code: int = -1
    retriable: bool = False

    def __init__(self, remark: str | None = None, *, code: int | None = None, addr: str | None = None) -> None:
        if code is not None:
            self.code = code
        self.remark = remark or ""
        self.addr = addr
        where = f" from {addr}" if addr else ""
        super().__init__(f"code {self.code} ({type(self).__name__}){where}: {self.remark}")


def _err(name: str, code: int, retriable: bool = False) -> type[ResponseError]:
    return type(name, (ResponseError,), {"code": code, "retriable": retriable, "__doc__": f"Response code {code}."})


# 4.x codes. `retriable` marks the codes a Java producer retries on another broker ({1,14,16,17,204,205}) and the
# transient conditions a caller may simply try again (busy, flow control, timeouts).
BrokerSystemError = _err("BrokerSystemError", 1, True)
SystemBusyError = _err("SystemBusyError", 2, True)
RequestCodeNotSupportedError = _err("RequestCodeNotSupportedError", 3)
TransactionFailedError = _err("TransactionFailedError", 4)
FlushDiskTimeoutError = _err("FlushDiskTimeoutError", 10)
SlaveNotAvailableError = _err("SlaveNotAvailableError", 11)
FlushSlaveTimeoutError = _err("FlushSlaveTimeoutError", 12)
MessageIllegalError = _err("MessageIllegalError", 13)
ServiceNotAvailableError = _err("ServiceNotAvailableError", 14, True)
VersionNotSupportedError = _err("VersionNotSupportedError", 15)
NoPermissionError = _err("NoPermissionError", 16, True)
TopicNotExistError = _err("TopicNotExistError", 17, True)
TopicExistAlreadyError = _err("TopicExistAlreadyError", 18)
PullNotFoundError = _err("PullNotFoundError", 19, True)
PullRetryImmediatelyError = _err("PullRetryImmediatelyError", 20, True)
PullOffsetMovedError = _err("PullOffsetMovedError", 21)
QueryNotFoundError = _err("QueryNotFoundError", 22)
SubscriptionParseFailedError = _err("SubscriptionParseFailedError", 23)
SubscriptionNotExistError = _err("SubscriptionNotExistError", 24, True)
SubscriptionNotLatestError = _err("SubscriptionNotLatestError", 25, True)
SubscriptionGroupNotExistError = _err("SubscriptionGroupNotExistError", 26)
FilterDataNotExistError = _err("FilterDataNotExistError", 27)
FilterDataNotLatestError = _err("FilterDataNotLatestError", 28)
InvalidParameterError = _err("InvalidParameterError", 29)
TransactionShouldCommitError = _err("TransactionShouldCommitError", 200)
TransactionShouldRollbackError = _err("TransactionShouldRollbackError", 201)
TransactionStateUnknownError = _err("TransactionStateUnknownError", 202)
TransactionStateGroupWrongError = _err("TransactionStateGroupWrongError", 203)
NoBuyerIdError = _err("NoBuyerIdError", 204, True)
NotInCurrentUnitError = _err("NotInCurrentUnitError", 205, True)
ConsumerNotOnlineError = _err("ConsumerNotOnlineError", 206)
ConsumeMsgTimeoutError = _err("ConsumeMsgTimeoutError", 207, True)
NoMessageError = _err("NoMessageError", 208)
AclOrPollingError209 = _err("AclOrPollingError209", 209)  # 4.x ACL update failed / 5.x POLLING_FULL
AclOrPollingError210 = _err("AclOrPollingError210", 210)  # 4.x ACL delete failed / 5.x POLLING_TIMEOUT
AclOrBrokerError211 = _err("AclOrBrokerError211", 211)  # 4.x white-addrs failed / 5.x BROKER_NOT_EXIST
BrokerDispatchNotCompleteError = _err("BrokerDispatchNotCompleteError", 212, True)
BroadcastConsumptionError = _err("BroadcastConsumptionError", 213)
FlowControlError = _err("FlowControlError", 215, True)
NotLeaderForQueueError = _err("NotLeaderForQueueError", 501, True)
IllegalOperationError = _err("IllegalOperationError", 604)
GoAwayError = _err("GoAwayError", 1500, True)

ERROR_BY_CODE: dict[int, type[ResponseError]] = {
    c.code: c
    for c in (
        BrokerSystemError, SystemBusyError, RequestCodeNotSupportedError, TransactionFailedError,
        FlushDiskTimeoutError, SlaveNotAvailableError, FlushSlaveTimeoutError, MessageIllegalError,
        ServiceNotAvailableError, VersionNotSupportedError, NoPermissionError, TopicNotExistError,
        TopicExistAlreadyError, PullNotFoundError, PullRetryImmediatelyError, PullOffsetMovedError,
        QueryNotFoundError, SubscriptionParseFailedError, SubscriptionNotExistError, SubscriptionNotLatestError,
        SubscriptionGroupNotExistError, FilterDataNotExistError, FilterDataNotLatestError, InvalidParameterError,
        TransactionShouldCommitError, TransactionShouldRollbackError, TransactionStateUnknownError,
        TransactionStateGroupWrongError, NoBuyerIdError, NotInCurrentUnitError, ConsumerNotOnlineError,
        ConsumeMsgTimeoutError, NoMessageError, AclOrPollingError209, AclOrPollingError210, AclOrBrokerError211,
        BrokerDispatchNotCompleteError, BroadcastConsumptionError, FlowControlError, NotLeaderForQueueError,
        IllegalOperationError, GoAwayError,
    )
}

# Codes after which a sync send is retried on another broker (Java `retryResponseCodes`), plus SYSTEM_BUSY (2):
# the broker's admission control ([PCBUSY_CLEAN_QUEUE] / [TIMEOUT_CLEAN_QUEUE], docs/design/durability.md) stored
# nothing and asks the client to go elsewhere.
SEND_RETRY_CODES = frozenset({1, 2, 14, 16, 17, 204, 205})


def error_for_response(code: int, remark: str | None = None, addr: str | None = None) -> ResponseError:
    """The exception for a non-success response (unknown codes give a plain ResponseError carrying the code)."""
    cls = ERROR_BY_CODE.get(code)
    if cls is None:
        return ResponseError(remark, code=code, addr=addr)
    return cls(remark, addr=addr)
