"""Under ASGI an export is streamed a slice at a time (agentkit/streaming.py): Django reads a
synchronous iterator whole into memory before sending a byte."""

import json

import pytest
from asgiref.sync import sync_to_async
from django.urls import reverse

from agentkit import streaming

from .factories import add_steps

pytestmark = pytest.mark.django_db(transaction=True)


async def test_slices_are_read_as_they_are_sent(monkeypatch):
    monkeypatch.setattr(streaming, "SLICE", 10)
    drawn = []

    def chunks():
        for n in range(100):
            drawn.append(n)
            yield f"{n}\n"

    stream = streaming._in_slices(chunks())
    assert await anext(stream) == "0\n"
    assert len(drawn) == 10  # one slice, not the whole export
    rest = [chunk async for chunk in stream]
    assert len(rest) == 99 and len(drawn) == 100


async def test_a_run_export_under_asgi_is_an_asynchronous_stream(
    async_client, viewer, run, monkeypatch
):
    monkeypatch.setattr(streaming, "SLICE", 7)
    await sync_to_async(add_steps)(run, 40)
    await async_client.aforce_login(viewer)
    response = await async_client.get(reverse("runs:export", args=[run.pk, "jsonl"]))
    assert response.status_code == 200 and response.is_async
    body = b"".join([chunk async for chunk in response.streaming_content])
    lines = [json.loads(line) for line in body.splitlines()]
    assert lines[0]["run"]["id"] == str(run.pk)
    steps = await run.steps.acount()
    assert steps > 40 and [line["seq"] for line in lines if "seq" in line] == list(
        range(1, steps + 1)
    )
