"""The queue's "Approve selected" / "Reject selected": a result page with one line per ticked
approval. The rules are approvals/batch.py's; this only reads the form."""

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_POST

from accounts.requests import SignedInRequest

from . import batch

TEMPLATE = "approvals/batch_result.html"


def parse_items(values: list[str]) -> list[tuple[str, str]]:
    """The ticked rows: "<approval id>:<hash of the call shown>" each (a value without a hash
    keeps an empty one, which matches no call)."""
    items = []
    for value in values:
        approval_id, _, shown = value.partition(":")
        items.append((approval_id.strip(), shown.strip()))
    return items


@require_POST
@login_required
def batch_decide(request: SignedInRequest) -> HttpResponse:
    if not request.user.can_approve:
        raise PermissionDenied
    decision = request.POST.get("decision", "")
    try:
        results = batch.decide_batch(
            user=request.user,
            decision=decision,
            items=parse_items(request.POST.getlist("item")),
            reason=request.POST.get("reason", ""),
        )
    except batch.BatchInvalid as exc:
        return render(request, TEMPLATE, {"error": exc.message, "decision": decision}, status=422)
    return render(request, TEMPLATE, {"results": results, "decision": decision})
