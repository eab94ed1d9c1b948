"""WebSockets with odd parameters or missing credentials: refused or served, never a crash."""

import pytest

from .test_consumers import connect, refused, seqs

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


async def everything_sent(communicator) -> list[str]:
    """Disconnect, then what the consumer sent: a consumer handles one message at a time, so
    once it has handled the disconnect, its connect (accept, then the catch-up) is over."""
    await communicator.disconnect(timeout=30)
    out = []
    while not await communicator.receive_nothing(timeout=0):
        out.append(await communicator.receive_from())
    return out


@pytest.mark.parametrize(
    "after,expected",
    [
        ("-3", [1, 2, 3, 4, 5]),
        ("9" * 5000, [1, 2, 3, 4, 5]),  # beyond Python's int() digit limit: from the start
        ("9" * 40, []),  # beyond any seq (and the database's integer range): nothing yet
        ("3&after=x", [1, 2, 3, 4, 5]),  # the last value wins, and it is garbage
        ("%00", [1, 2, 3, 4, 5]),
    ],
)
async def test_odd_after_parameters(run, viewer, after, expected):
    communicator, connected = await connect(f"/ws/runs/{run.pk}/?after={after}", viewer)
    assert connected
    got = [s for m in await everything_sent(communicator) for s in seqs(m)]
    assert got == expected


@pytest.mark.parametrize("path", ["/ws/runs/{run}/", "/ws/runs/", "/ws/approvals/"])
async def test_a_socket_without_an_origin_header_is_refused(run, viewer, path):
    _, connected = await connect(path.format(run=run.pk), viewer, origin=None)
    assert not connected


@pytest.mark.parametrize("path", ["/ws/runs/", "/ws/approvals/"])
async def test_group_streams_need_a_user_with_a_role(path, django_user_model, db):
    assert await refused(path)
    nobody = await django_user_model.objects.acreate(username="nobody")
    assert await refused(path, nobody)


async def test_a_foreign_origin_is_refused_on_group_streams(viewer):
    for path in ("/ws/runs/", "/ws/approvals/"):
        _, connected = await connect(path, viewer, origin=(b"origin", b"http://evil.example"))
        assert not connected
