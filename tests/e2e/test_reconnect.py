"""A dropped WebSocket, re-opened mid-run, leaves the timeline with every step exactly once."""

import re
import time

import pytest

from .pages import decide, expect_status, expect_timeline_complete, launch_refund, timeline_seqs

pytestmark = pytest.mark.e2e

STEP_ID = re.compile(r'<article class="step[^"]*" id="step-(\d+)"')


def test_steps_made_while_the_socket_was_down_appear_once_after_it_reconnects(server, login, proxy):
    # The operator's browser reaches the server through a relay that can cut the network.
    operator = login("operator", via=proxy.url)
    run_id = launch_refund(operator, order_id=17, amount="8.00", reason="Broken seal")
    page = operator.page
    stream = f"/ws/runs/{run_id}/"
    expect_status(page, "waiting")
    before = expect_timeline_complete(page, server, run_id)
    operator.mark_document()
    assert len(operator.sockets_to(stream)) == 1

    proxy.down()
    assert proxy.dropped, "the page had no open connection to drop"
    approver = login("approver")
    # Part of the run happens while the operator's socket is down: the refund, up to the
    # customer e-mail (gated too), where the run parks again.
    decide(approver, server.pending_approval(run_id), "approve")
    email_approval = server.pending_approval(run_id, tool="send_customer_email")
    server.wait_for_status(run_id, "waiting")
    assert timeline_seqs(page) == before, "steps arrived while the network was down"

    proxy.up()
    # The WebSocket extension reconnects by itself (close code 1006 -> retry with backoff)
    # and gets exactly what the page missed.
    seqs = expect_timeline_complete(page, server, run_id)
    assert len(seqs) > len(before)
    reopened = len(operator.sockets_to(stream))
    assert reopened >= 2

    # Once more, now that the page has steps it got live: a re-opened socket must not replay
    # them (the page asks for what comes after its newest step, not after the first render).
    proxy.down()
    proxy.up()
    deadline = time.monotonic() + 20
    while len(operator.sockets_to(stream)) == reopened and time.monotonic() < deadline:
        page.wait_for_timeout(100)
    assert len(operator.sockets_to(stream)) > reopened, "the socket was not re-opened"
    assert f"after={seqs[-1]}" in operator.sockets_to(stream)[reopened].url
    # The rest of the run is the marker: its steps reach the page through the re-opened
    # socket after the server's catch-up, so once they are shown, a replay would have been
    # received too.
    decide(approver, email_approval, "approve")
    expect_status(page, "succeeded")
    final = expect_timeline_complete(page, server, run_id)
    received = [
        int(seq)
        for ws in operator.sockets_to(stream)[reopened:]
        for frame in operator.frames_from(ws)
        for seq in STEP_ID.findall(frame)
    ]
    assert received == final[len(seqs) :], "the re-opened socket replayed steps or missed some"
    assert not operator.sockets_to(stream)[-1].is_closed()
    operator.assert_same_document()
