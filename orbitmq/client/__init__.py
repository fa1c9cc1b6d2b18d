"""OrbitMQ Python SDK: async-first RocketMQ 4.x remoting client (producer, push/pull consumers, admin) plus a
small blocking facade. Never imported by broker or namesrv.
"""

from orbitmq.client import blocking, errors
from orbitmq.client.admin import Admin
from orbitmq.client.blocking import BlockingAdmin, BlockingProducer, BlockingPushConsumer
from orbitmq.client.broker_api import PullResult, PullStatus
from orbitmq.client.consume import ConsumeOrderlyResult, ConsumeResult
from orbitmq.client.errors import ClientStateError, MessageValidationError, NoRouteError, ResponseError
from orbitmq.client.instance import ClientInstance
from orbitmq.client.producer import Producer, SendResult, SendStatus
from orbitmq.client.pull_consumer import PullConsumer
from orbitmq.client.push_consumer import PushConsumer
from orbitmq.client.rebalance import AllocateAveragely, AllocateByCircle
from orbitmq.client.simple_consumer import SimpleConsumer
from orbitmq.client.transaction_producer import LocalTransactionState, TransactionProducer
from orbitmq.model import Message, MessageExt, MessageQueue

__all__ = [
    "Admin",
    "AllocateAveragely",
    "AllocateByCircle",
    "BlockingAdmin",
    "BlockingProducer",
    "BlockingPushConsumer",
    "ClientInstance",
    "ClientStateError",
    "ConsumeOrderlyResult",
    "ConsumeResult",
    "LocalTransactionState",
    "Message",
    "MessageExt",
    "MessageQueue",
    "MessageValidationError",
    "NoRouteError",
    "Producer",
    "PullConsumer",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "ResponseError",
    "SendResult",
    "SendStatus",
    "SimpleConsumer",
    "TransactionProducer",
    "blocking",
    "errors",
]
