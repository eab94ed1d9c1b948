"""Idempotency-Key on an async operation (agentops/idempotency.py): its claim commits first,
its answer after; a claim still held is 409, one whose lock expired (its process died) is
taken over; a failure gives the key back."""

from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from django.test import AsyncClient
from django.utils import timezone

from agentops.models import IdempotentRequest

from .async_api import CALLS

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.api.async_api")]


@pytest.fixture
async def client(operator):
    CALLS.clear()
    client = AsyncClient()
    client.username = operator.username
    yield client
    # The views' queries ran on asgiref's thread: its connection must not outlive the test
    # (PostgreSQL refuses to drop a test database someone is still connected to).
    await sync_to_async(connections.close_all)()


async def make(client: AsyncClient, name: str, key: str = "k"):
    return await client.post(
        "/t/things",
        {"name": name},
        content_type="application/json",
        headers={"Idempotency-Key": key, "X-User": client.username},
    )


async def test_an_async_retry_gets_the_first_answer(client):
    first = await make(client, "a")
    retry = await make(client, "a")
    assert first.status_code == retry.status_code == 201
    assert retry.content == first.content and retry["Idempotent-Replayed"] == "true"
    assert CALLS == [{"name": "a"}]
    other = await make(client, "b")
    assert other.status_code == 422 and CALLS == [{"name": "a"}]
    row = await IdempotentRequest.objects.aget()
    assert row.status == 201 and row.locked_until is None


async def test_a_held_claim_is_409_and_an_expired_one_is_taken_over(client, operator):
    first = await make(client, "a")
    row = await IdempotentRequest.objects.aget()
    # As if a process had claimed the key and not answered yet.
    now = timezone.now()
    await IdempotentRequest.objects.filter(pk=row.pk).aupdate(
        status=None, locked_until=now + timedelta(seconds=60)
    )
    busy = await make(client, "a")
    assert busy.status_code == 409 and busy["Retry-After"] == "1"
    assert len(CALLS) == 1
    # Its process died: once the lock expired, the retry does the work and answers.
    await IdempotentRequest.objects.filter(pk=row.pk).aupdate(
        locked_until=now - timedelta(seconds=1)
    )
    taken = await make(client, "a")
    assert taken.status_code == 201 and "Idempotent-Replayed" not in taken
    assert len(CALLS) == 2 and taken.content != first.content
    assert (await make(client, "a")).content == taken.content


async def test_a_failed_async_attempt_gives_the_key_back(client):
    assert (await make(client, "fail", key="f")).status_code == 503
    assert not await IdempotentRequest.objects.filter(key="f").aexists()
    assert (await make(client, "fail", key="f")).status_code == 503
    assert CALLS == []
