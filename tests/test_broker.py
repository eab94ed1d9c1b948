"""The broker's transport (agentops/broker.py): kombu's Redis transport with one redis-py client
per channel, instead of one per command."""

import uuid

import pytest
import redis
from django.conf import settings
from kombu import Connection

from agentops.celery import app

pytestmark = pytest.mark.skipif(not settings.REDIS_URL, reason="needs REDIS_URL=redis://…")


@pytest.fixture
def clients_built(monkeypatch) -> list:
    built = []
    real = redis.Redis.__init__

    def counting(self, *args, **kwargs):
        built.append(self)
        real(self, *args, **kwargs)

    monkeypatch.setattr(redis.Redis, "__init__", counting)
    return built


def test_the_celery_app_uses_it():
    with app.connection_for_write() as conn:
        assert type(conn.transport).__module__ == "agentops.broker"


def test_a_channel_sends_every_command_through_one_client(clients_built):
    queue_name = f"test-broker-{uuid.uuid4().hex}"
    with Connection(settings.REDIS_URL, transport="agentops.broker:Transport") as conn:
        queue = conn.SimpleQueue(queue_name)
        try:
            for n in range(20):
                queue.put({"n": n})
            received = []
            for _ in range(20):
                message = queue.get(timeout=5)
                received.append(message.payload["n"])
                message.ack()
            assert received == list(range(20))
        finally:
            queue.queue.delete()
            queue.close()
    # 20 publishes, 20 deliveries, 20 acks and the queue's bookkeeping: kombu's own transport
    # builds a client for each (over 60); this one a client per channel and kind.
    assert len(clients_built) <= 4
