"""The decision, POSTed to the callback URL an external call gave (instead of, or as well as,
long-polling).

Signed as every webhook of agentops is (agentkit/signing.py, Standard Webhooks, webhook-id
"callback_<approval id>"), with the agent's own key: the SHA-256 hex of its token, which
agentops stores and the agent can compute from the token it holds (its UTF-8 bytes are the
HMAC key). Sent once the decision is committed, by a Celery task retried like the approval
webhooks; sent once per call.
"""

import functools
import json
import logging
import urllib.error
import urllib.request

from celery import shared_task
from django.db import transaction
from django.utils import timezone

from agentkit import signing, tracing
from approvals.notify.delivery import RETRIED_DELIVERY, DeliveryError
from runs.models import Run, Step

from . import egress
from .models import ExternalAgent, ExternalCall
from .sessions import state_of

log = logging.getLogger("agentops.notify")
CALLBACK_TIMEOUT_SECONDS = 10
FINAL = ("approved", "rejected", "expired")


def on_step_appended(sender, step: Step, **kwargs) -> None:
    """runs.models.step_appended: a decided external call's callback, once committed. Reads
    only the step in hand for every other step (no query on the hot path)."""
    if step.kind != Step.Kind.DECISION or step.run.trigger != Run.Trigger.EXTERNAL:
        return
    if step.data.get("status") not in FINAL:
        return
    approval_id = step.data.get("approval")
    transaction.on_commit(lambda: _queue(approval_id))


def queue_on_commit(approval_ids) -> None:
    """Send these calls' callbacks once committed: calls cancelled with their session
    (gateway/tasks.py, a deactivated agent), which no decision step announces."""
    for approval_id in approval_ids:
        transaction.on_commit(functools.partial(_queue, str(approval_id)))


def _queue(approval_id: str) -> None:
    try:
        deliver_callback.delay(str(approval_id))
    except Exception:  # a broker hiccup must not fail the decision that was made
        log.exception("approval %s: external callback not queued", approval_id)


@shared_task(**RETRIED_DELIVERY)
def deliver_callback(approval_id: str) -> int:
    call = ExternalCall.objects.select_related("run").filter(approval_id=approval_id).first()
    if call is None or not call.callback_url or call.callback_sent_at is not None:
        return 0
    if egress.url_refusal(call.callback_url):
        return 0  # refused when submitted; a row from before the check is not sent either
    key = _agent_key(call)
    body = json.dumps(state_of(call).as_dict()).encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "agentops-callback/1",
        **signing.sign(key, f"callback_{approval_id}", body),
    }
    attributes = {"agentops.run.id": str(call.run_id), "agentops.approval.id": approval_id}
    # A span of the run's trace, whose W3C traceparent the agent gets: its handling of the
    # decision joins the run's trace (its own, when it registered the session with one).
    with tracing.in_run("agentops.callback", call.run.traceparent, attributes):
        tracing.inject(headers)
        status = _post(call, body, headers)
    if status:
        ExternalCall.objects.filter(pk=call.pk).update(callback_sent_at=timezone.now())
    return status


def _post(call: ExternalCall, body: bytes, headers: dict) -> int:
    """The callback's HTTP status; 0 when its address is refused (not retried)."""
    request = urllib.request.Request(  # noqa: S310 (scheme checked by the caller)
        call.callback_url, data=body, method="POST", headers=headers
    )
    try:
        # Connects only to addresses the agent may reach (gateway/egress.py), redirects too.
        with egress.opener().open(request, timeout=CALLBACK_TIMEOUT_SECONDS) as response:
            status = response.status
    except egress.ForbiddenAddress as exc:
        # Not retried: the address will not become allowed by waiting. The agent still
        # learns the decision by asking for its call.
        log.warning("call %s: callback refused: %s", call.pk, exc)
        return 0
    except urllib.error.HTTPError as exc:
        if exc.code >= 500 or exc.code in (408, 429):
            raise DeliveryError(f"callback answered {exc.code}") from None
        log.warning("call %s: callback refused with %s", call.pk, exc.code)
        status = exc.code
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise DeliveryError(f"callback unreachable: {exc}") from None
    return status


def _agent_key(call: ExternalCall) -> str:
    agent = ExternalAgent.objects.get(slug=call.run.agent)
    return agent.token_hash
