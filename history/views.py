"""The history pages: fork a run from a checkpoint, and replay a run to see if it still goes
the same way. Both need the operator role; the forms carry Django's CSRF token."""

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods

from accounts.requests import SignedInRequest
from runs import engine
from runs.models import Run, canonical_json

from .fork import MAX_INSTRUCTION_CHARS, ForkError, fork
from .replay import replay


def _run_to_operate(request: SignedInRequest, pk) -> Run:
    if not (request.user.can_view and request.user.can_operate):
        raise PermissionDenied
    run = get_object_or_404(Run.objects.visible_to(request.user), pk=pk)
    # Forking and replaying launch a run of the same agent: the teams' launch power.
    if not Run.objects.operable_by(request.user).filter(pk=run.pk).exists():
        raise PermissionDenied
    return run


@require_http_methods(["GET", "POST"])
@login_required
def fork_run(request: SignedInRequest, pk, seq: int) -> HttpResponse:
    """GET: what the fork starts from, and a box for an instruction; POST: fork."""
    run = _run_to_operate(request, pk)
    checkpoint = get_object_or_404(run.checkpoints, seq=seq)
    error = ""
    instruction = ""
    if request.method == "POST":
        instruction = request.POST.get("instruction", "")
        try:
            child = fork(run, seq, instruction=instruction, by=request.user)
        except ForkError as exc:
            error = str(exc)
        else:
            return redirect("runs:detail", pk=child.pk)
    messages = engine.conversation(run, upto_seq=seq)
    context = {
        "run": run,
        "checkpoint": checkpoint,
        "ending": _ending(messages[-1]) if messages else None,
        "turns": len(messages),
        "pending": [p["name"] for p in checkpoint.state.get("pending", [])],
        "error": error,
        "instruction": instruction,
        "max_chars": MAX_INSTRUCTION_CHARS,
    }
    return render(request, "history/fork.html", context, status=422 if error else 200)


@require_http_methods(["GET", "POST"])
@login_required
def replay_run(request: SignedInRequest, pk) -> HttpResponse:
    """GET: what a replay does; POST: replay and show how it compares."""
    run = _run_to_operate(request, pk)
    result = replay(run) if request.method == "POST" else None
    rows = []
    if result is not None:
        for index in range(max(len(result.recorded), len(result.replayed))):
            want = result.recorded[index] if index < len(result.recorded) else ""
            got = result.replayed[index] if index < len(result.replayed) else ""
            rows.append({"seq": index + 1, "recorded": want, "replayed": got, "same": want == got})
    return render(request, "history/replay.html", {"run": run, "result": result, "rows": rows})


def _ending(message: dict) -> dict:
    """The conversation's last message as lines to show (escaped by the template)."""
    content = message["content"]
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    lines = []
    for block in blocks:
        if block.get("type") == "text":
            lines.append(str(block.get("text", ""))[:2000])
        elif block.get("type") == "tool_use":
            lines.append(f"→ {block.get('name')} {canonical_json(block.get('input'))[:1000]}")
        elif block.get("type") == "tool_result":
            lines.append(f"← {str(block.get('content'))[:1000]}")
    return {"role": message["role"], "lines": lines}
