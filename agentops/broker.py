"""The Celery broker's transport: kombu's Redis transport, with one redis-py client per channel.

kombu builds a new `redis.Redis` for every command it sends outside its polling connection
(each publish, ack, delivery bookkeeping and queue length: `Channel.conn_or_acquire`), and
redis-py fills a ~170-entry response-callback table for each (redis/redis-py#3624): ~0.2 ms
of CPU a time. A client holds no connection of its own (each command takes one from the
channel's pool, and pipelines are made per use), so one client per channel serves every
command and every thread that uses the channel. Selected by CELERY_BROKER_TRANSPORT.
"""

import redis
from kombu.transport import redis as kombu_redis


class Channel(kombu_redis.Channel):
    _shared_client: redis.Redis | None = None

    def _create_client(self, asynchronous: bool = False) -> redis.Redis:
        if asynchronous:  # built once per channel by kombu already (its polling client)
            return super()._create_client(asynchronous=True)
        client = self._shared_client
        # A channel that lost its connection builds a new pool: a new client for it.
        if client is None or client.connection_pool is not self.pool:
            client = self._shared_client = super()._create_client()
        return client


class Transport(kombu_redis.Transport):
    Channel = Channel
