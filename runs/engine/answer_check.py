"""Checking a final answer before the run may succeed: its output schema, then its verifier.
Why and how: docs/design/modules.md."""

from collections.abc import Callable
from typing import Any

from django.db import transaction

from agentkit import llm
from agentkit.agents import RunResult, get_agent
from agentkit.tools import get_tool
from agentkit.verification import PASS, schema_errors

from ..models import Run, Step, canonical_json
from . import gates, lease, model, owned, terminator, tool_calls
from .idempotency import idempotency_key
from .owned import Stop, Work, renewal

ACCEPT, FAIL = "accept", "fail"


def check(work: Work) -> None:
    """Check the final answer (or a call, for a verifier `after_tools`) the state says is
    due: end the run, go on, tell the agent why not (the next step asks the model again), or
    park the run for a person."""
    checking = work.state["checking"]
    if checking.get("approval"):
        _apply_person(work, checking)
        return
    config = work.agent_config
    failures = work.state.setdefault("check_failures", {"output": 0, "verify": 0})
    result = RunResult(str(work.run.pk), work.run.agent, work.run.input, checking["output"])
    steps: list[tuple[str, dict, dict]] = []
    counters: dict[str, Any] = {}
    final = "tool" not in checking
    if final and "output_schema" in config:
        guard = _output_guard(config, result, failures)
        steps.append((Step.Kind.GUARD, guard, {}))
        if not guard["passed"]:
            if guard["attempt"] >= guard["max_attempts"]:
                detail = f"the final answer failed its schema {guard['attempt']} time(s)"
                return _end(work, steps, counters, Run.Termination.OUTPUT_INVALID, detail)
            return _send_back(work, steps, counters)
    if "verifier" in config and (not final or not config["verifier"].get("after_tools")):
        verify, columns = _verify(work, config["verifier"], checking, result, failures, counters)
        steps.append((Step.Kind.VERIFY, verify, columns))
        if not verify["passed"]:
            if verify["attempt"] < verify["max_attempts"]:
                return _send_back(work, steps, counters)
            # An agent that asks on failure (on_failure="ask") puts every verifier's last
            # failure before a person, as on_fail="person" does.
            if verify["on_fail"] == "person" or work.agent_config.get("on_failure") == "ask":
                return _ask_person(work, steps, counters, checking, verify)
            detail = f"{verify['verifier']}: {verify['reason']}"
            return _end(work, steps, counters, Run.Termination.VERIFICATION_FAILED, detail)
    if not final:
        failures["verify"] = 0  # each checked call has its own attempts
        return _go_on(work, steps, counters)
    _end(work, steps, counters, Run.Termination.COMPLETED, output=checking["output"])


# --- the checks --------------------------------------------------------------------------------
def _output_guard(config: dict, result: RunResult, failures: dict) -> dict:
    """The guard step of the final answer against the agent's output schema."""
    try:
        errors = schema_errors(config["output_schema"], result.json())
    except ValueError:
        errors = ["the answer is not JSON"]
    data = {"subject": "final answer", "check": "output schema", "passed": not errors}
    if errors:
        failures["output"] += 1
        data.update(
            errors=errors,
            attempt=failures["output"],
            max_attempts=config.get("output_attempts", 2),
            told=(
                "Your final answer does not match the required output schema: "
                + "; ".join(errors)
                + ". Answer again with one JSON value that matches it:\n"
                + _schema_text(config["output_schema"])
            ),
        )
    return data


def _verify(
    work: Work, declared: dict, checking: dict, result: RunResult, failures: dict, counters: dict
) -> tuple[dict, dict]:
    """Run the verifier once: its step's data and columns (cost, tokens when a model call)."""
    attempt = failures["verify"] + 1
    data: dict[str, Any] = {
        "verifier": declared["name"],
        "kind": declared["kind"],
        "attempt": attempt,
        "max_attempts": declared["max_attempts"],
        "on_fail": declared["on_fail"],
    }
    if "tool" in checking:
        data["after"] = checking["tool"]
    columns: dict[str, Any] = {}
    agent = get_agent(work.run.agent)
    verifier = agent.verifier if agent is not None else None
    if declared["kind"] == "model":
        reason = _ask_model(work, declared, result, attempt, data, columns, counters)
    elif verifier is None or verifier.kind != declared["kind"]:
        # The run's snapshot promised a check whose code the catalogue no longer has.
        reason = f"the verifier {declared['name']!r} is no longer declared by the agent"
    elif declared["kind"] == "tool":
        reason = _call_tool(work, verifier, result, data, columns, counters)
    else:
        reason = _judge(verifier.check, result)
    data["passed"] = reason is None
    if reason is not None:
        failures["verify"] = attempt
        data["reason"] = reason[:2000]
        if attempt < declared["max_attempts"]:
            data["told"] = _told(declared, checking, reason, attempt)
    return data, columns


def _judge(check: Callable[..., Any] | None, *args: Any) -> str | None:
    try:
        assert check is not None  # a verifier of kind "check" has one (Verifier.__post_init__)
        reason = check(*args)
    except Exception as exc:  # a broken check fails the answer, never the worker
        return f"the check raised {type(exc).__name__}: {exc}"
    return None if reason is None else str(reason) or "failed"


def _call_tool(
    work: Work, verifier: Any, result: RunResult, data: dict, columns: dict, counters: dict
) -> str | None:
    name, make_args = verifier.tool
    tool = get_tool(name)
    try:
        assert tool is not None, f"no tool {name}"  # an unknown one fails here, as validate would
        args = tool.validate(make_args(result))
    except Exception as exc:
        return f"the verifier could not build {name}'s arguments: {exc}"
    lease.still_mine(work, lease_for=tool.timeout_seconds, deadline=False)
    key = idempotency_key(work.run.pk, work.state["checking"]["llm_seq"], -1, name, args)
    output, error, attempts, duration_ms, cost = tool_calls.call_tool(
        work, tool, args, key, work.run.retry_count
    )
    data.update(tool=name, args=args, attempts=attempts, duration_ms=duration_ms)
    if cost:  # a paid check is charged to the run like any call
        data["cost_usd"] = str(cost)
        columns["cost_usd"] = cost
        counters["cost_usd"] = work.run.cost_usd + cost
    counters["retry_count"] = work.run.retry_count + max(0, attempts - 1)
    if error is not None:
        data.update(is_error=True, error=error)
        return f"the verifier's call to {name} failed: {error}"
    data["result"] = output
    return _judge(verifier.check, result, output)


def _ask_model(
    work: Work,
    declared: dict,
    result: RunResult,
    attempt: int,
    data: dict,
    columns: dict,
    counters: dict,
) -> str | None:
    """A second model call with the verifier's own prompt; charged to the run like any."""
    request = llm.LLMRequest(
        model=declared["model"],
        system=declared["prompt"]
        + f"\n\nReply with {PASS} if the answer is right; otherwise FAIL: and the reason.",
        messages=[
            {
                "role": "user",
                "content": f"The task:\n{_task(work)}\n\nThe answer to check:\n{result.output}",
            }
        ],
        tools=[],
        max_tokens=512,
        metadata={
            "purpose": "verify",
            "attempt": attempt,
            "turn": work.run.step_count,
            "run_id": str(work.run.pk),
        },
    )
    lease.still_mine(work, lease_for=owned.cfg("LLM_TIMEOUT_SECONDS"))
    response = model.call_with_retries(work, request)
    run = work.run
    if response.extra.get("fallback_from"):
        data["fallback_from"] = response.extra["fallback_from"]
    data.update(
        model=response.model,
        prompt=declared["prompt"],
        content=response.content,
        usage=response.usage.as_dict(),
        request_id=response.request_id,
    )
    columns.update(
        cost_usd=response.cost_usd,
        tokens_in=response.usage.total_input_tokens,
        tokens_out=response.usage.output_tokens,
        latency_ms=response.latency_ms,
    )
    # Not a step_count: that counts the agent's turns (max_steps, and a scripted model's).
    counters.update(
        tokens_in=run.tokens_in + response.usage.total_input_tokens,
        tokens_out=run.tokens_out + response.usage.output_tokens,
        cost_usd=run.cost_usd + response.cost_usd,
    )
    verdict = response.text.strip()
    if verdict.upper().startswith(PASS):
        return None
    reason = verdict.removeprefix("FAIL").removeprefix("fail").lstrip(":").strip()
    return reason or "the verifier model did not pass the answer"


def _task(work: Work) -> str:
    first = work.messages[0]["content"] if work.messages else ""
    if isinstance(first, str):
        return first
    return "\n".join(b.get("text", "") for b in first if b.get("type") == "text")


def _told(declared: dict, checking: dict, reason: str, attempt: int) -> str:
    what = f"Your call to {checking['tool']}" if "tool" in checking else "Your answer"
    then = "Correct it." if "tool" in checking else "Correct it and give your final answer again."
    return (
        f"{what} did not pass verification ({declared['name']}, attempt {attempt} of "
        f"{declared['max_attempts']}): {reason}\n{then}"
    )


def _schema_text(schema: dict) -> str:
    return canonical_json(schema)[:4000]


# --- what follows ------------------------------------------------------------------------------
def _send_back(work: Work, steps: list, counters: dict) -> None:
    """The agent is told why (the failed step's `told`) and answers again."""
    del work.state["checking"]
    counters.update(renewal(model_call_next=True))
    _write(work, steps, counters)
    work.add_user_text(steps[-1][1]["told"])


def _go_on(work: Work, steps: list, counters: dict) -> None:
    """A call passed its check (or a person accepted it): the run goes on."""
    del work.state["checking"]
    counters.update(renewal(model_call_next=not work.state["pending"]))
    _write(work, steps, counters)


def _end(
    work: Work, steps: list, counters: dict, reason: str, detail: str = "", *, output: str = ""
) -> None:
    del work.state["checking"]
    ended, end_update = terminator.termination(work, reason, detail, output=output)
    counters.update(end_update)
    _write(work, [*steps, (Step.Kind.STATUS, ended, {})], counters)
    raise Stop


def _write(work: Work, steps: list, counters: dict) -> None:
    (kind, data, columns), then = steps[0], tuple(steps[1:])
    counters.setdefault("updated_at", renewal(model_call_next=False)["updated_at"])
    owned.append(work, kind, data, counters, checkpoint=True, then=then, **columns)


def _ask_person(work: Work, steps: list, counters: dict, checking: dict, verify: dict) -> None:
    """Out of attempts, and a person decides: the failed step and the question in one
    transaction; the run parks until it is answered."""
    verify["to_person"] = True
    counters.update(renewal(model_call_next=False))
    with transaction.atomic():
        (kind, data, columns), then = steps[0], tuple(steps[1:])
        owned.append(work, kind, data, counters, then=then, **columns)
        checking["approval"] = gates.current().open_verification_question(
            work.run,
            {
                # One question per checked answer or call (a turn may make several calls).
                "key": f"verify:{checking['llm_seq']}"
                + (f":{checking['tool']}" if "tool" in checking else ""),
                "llm_seq": checking["llm_seq"],
                "subject": f"call to {checking['tool']}" if "tool" in checking else "final answer",
                "verifier": verify["verifier"],
                "reason": verify["reason"],
                "attempts": verify["attempt"],
                "output": checking["output"],
            },
        )
        owned.write_checkpoint(work)
    lease.park_for_humans(work)  # returns when it was answered meanwhile
    _apply_person(work, checking)


def _apply_person(work: Work, checking: dict) -> None:
    approval = checking["approval"]
    decision = gates.current().decisions([approval]).get(approval)
    if decision is None or decision.status == gates.PENDING:
        lease.park_for_humans(work)
        decision = gates.current().decisions([approval])[approval]
    who = decision.by or "the system"
    answer = decision.answer.strip()
    if decision.status == gates.ANSWERED and answer.casefold() == ACCEPT:
        step = {"event": "accepted", "by": who, "passed": True}
        if "tool" in checking:
            _go_on(work, [(Step.Kind.VERIFY, step, {})], {})
            return
        _end(
            work,
            [(Step.Kind.VERIFY, step, {})],
            {},
            Run.Termination.COMPLETED,
            output=checking["output"],
        )
    if decision.status == gates.ANSWERED and answer.casefold() != FAIL:
        # Sent back with a note: the agent answers again, and gets one more verification.
        declared = work.agent_config["verifier"]
        work.state["check_failures"]["verify"] = declared["max_attempts"] - 1
        what = f"your call to {checking['tool']}" if "tool" in checking else "your answer"
        note = f"A reviewer ({who}) sent {what} back: {answer}"
        step = {"event": "sent_back", "by": who, "passed": False, "note": answer, "told": note}
        _send_back(work, [(Step.Kind.VERIFY, step, {})], {})
        return
    if decision.status == gates.ANSWERED:
        detail = f"failed by {who} after verification"
    elif decision.status == gates.REJECTED:
        detail = f"failed by {who}: {decision.reason or 'no reason given'}"
    else:
        detail = "nobody decided about the failed verification before it expired"
    step = {"event": "failed", "by": who, "passed": False, "reason": detail}
    _end(work, [(Step.Kind.VERIFY, step, {})], {}, Run.Termination.VERIFICATION_FAILED, detail)
