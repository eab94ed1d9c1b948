"""Streamed responses that stay streamed under ASGI.

Given a synchronous iterator, Django's ASGI handler reads it whole into memory before the
first byte is sent (`sync_to_async(list)`): a 50 000-step export sat whole in one web
process. Under ASGI the iterator is read in a thread a slice at a time instead, and each
slice sent before the next is read."""

from collections.abc import AsyncIterator, Iterator
from itertools import islice

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest

SLICE = 200


def streamed(request: HttpRequest, chunks: Iterator[str]) -> Iterator[str] | AsyncIterator[str]:
    """`chunks` as the server that serves `request` streams it."""
    if isinstance(request, ASGIRequest):
        return _in_slices(chunks)
    return chunks


async def _in_slices(chunks: Iterator[str]) -> AsyncIterator[str]:
    # thread_sensitive: the database reads behind `chunks` use the request's connection.
    take = sync_to_async(lambda: list(islice(chunks, SLICE)), thread_sensitive=True)
    while piece := await take():
        for chunk in piece:
            yield chunk
