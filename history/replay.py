"""Replay: re-run a recorded run with today's engine, agent and tools, and the model turns,
tool results and people's decisions its timeline recorded, to see whether it still goes the
same way, and where and why not.
Why and how: docs/design/modules.md."""

import hashlib
from dataclasses import dataclass, field
from typing import Any

from django.db import DatabaseError, transaction

from agentkit import llm
from agentkit.agents import Agent, GateRules, Limits, get_agent
from agentkit.llm.base import LLMError, LLMResponse, LLMTransientError, Usage
from agentkit.tools import get_tool
from runs import chains, engine
from runs.engine import gates, replaying
from runs.models import PendingOperation, Run, Step, args_hash, canonical_json

# A run longer than this is compared up to here (a replay holds one transaction open).
MAX_STEPS = 5000
# People's steps: inputs taken from the record, written when the replay reaches them.
_HUMAN_EVENTS = {"resumed", "cancelled"}
# What the "did it happen?" question offers (approvals/engine_gates.py open_outcome_question).
_UNKNOWN_OUTCOME_OPTIONS = ["happened", "did_not_happen"]


def _is_outcome_question(kind: str, data: dict) -> bool:
    return (
        kind == Step.Kind.GATE
        and data.get("kind") == "question"
        and data.get("options") == _UNKNOWN_OUTCOME_OPTIONS
        and str(data.get("explanation", "")).startswith("outcome unknown")
    )


IDENTICAL, TOOL_CHANGED, DIVERGED = "identical", "tool changed", "diverged"


class RecordingEnded(BaseException):
    """The engine asked the recording for more than it holds. A BaseException: the engine's
    own handlers (a crashed step is retried) must let it through to the replay."""


@dataclass
class Divergence:
    seq: int
    recorded: str
    replayed: str
    why: str


@dataclass
class ReplayResult:
    run_id: str
    agent: str
    identical: bool
    compared: int  # steps compared
    recorded_steps: int
    divergence: Divergence | None = None
    notes: list[str] = field(default_factory=list)
    recorded: list[str] = field(default_factory=list)  # each step's signature, in words
    replayed: list[str] = field(default_factory=list)
    recovery_steps: int = 0  # recorded recovery steps followed, not compared
    changed_tools: list[str] = field(default_factory=list)  # code changed since the run

    @property
    def verdict(self) -> str:
        if not self.identical:
            return DIVERGED
        return TOOL_CHANGED if self.changed_tools else IDENTICAL

    @property
    def summary(self) -> str:
        if self.identical:
            same = f"{self.compared} of {self.recorded_steps} step(s) replayed the same"
            if self.recovery_steps:
                same += f" ({self.recovery_steps} recovery step(s) of the run followed)"
            if self.changed_tools:
                return (
                    f"tool changed: {same}, but the code of {', '.join(self.changed_tools)} "
                    "changed since the run"
                )
            return f"identical: {same}"
        d = self.divergence
        return f"diverged at step #{d.seq}: recorded {d.recorded}; replayed {d.replayed}. {d.why}"

    def as_dict(self) -> dict:
        return {
            "run_id": self.run_id,
            "agent": self.agent,
            "identical": self.identical,
            "verdict": self.verdict,
            "summary": self.summary,
            "changed_tools": self.changed_tools,
            "recovery_steps": self.recovery_steps,
            "compared": self.compared,
            "recorded_steps": self.recorded_steps,
            "divergence": self.divergence.__dict__ if self.divergence else None,
            "notes": self.notes,
            "recorded": self.recorded,
            "replayed": self.replayed,
        }


def signature(kind: str, data: dict, trim=None) -> str:
    """What a step is, for comparing a replay with its recording: kind, tool or event, and
    the arguments' hash; not when, how long or what it cost. `trim(tool, args)`: the
    arguments as the recorded run could have given them (see `_as_recorded`)."""
    trim = trim or (lambda tool, args: args)
    if kind == Step.Kind.TOOL:
        args = trim(data.get("tool"), data.get("args") or {})
        outcome = "error" if data.get("is_error") else "ok"
        return f"tool {data.get('tool')} {_short_hash(data.get('tool'), args)} {outcome}"
    if kind == Step.Kind.GATE:
        args = trim(data.get("tool"), data.get("args") or {})
        return f"gate {data.get('kind')} {data.get('tool')} {_short_hash(data.get('tool'), args)}"
    if kind == Step.Kind.LLM:
        calls = [
            f"{b['name']} {_short_hash(b['name'], b.get('input') or {})}"
            for b in data.get("content", [])
            if b.get("type") == "tool_use"
        ]
        return f"model turn -> {', '.join(calls) if calls else 'answer'}"
    if kind == Step.Kind.LLM_ERROR:
        return f"model error {data.get('status')}"
    if kind == Step.Kind.DECISION:
        return f"decision {data.get('decision')} {data.get('tool') or ''}".rstrip()
    if kind == Step.Kind.PENDING:
        return f"operation {data.get('tool')} {data.get('event')}"
    if kind == Step.Kind.SUMMARY:
        covered = (data.get("covers") or {}).get("messages")
        return f"summary of {covered} message(s){' failed' if data.get('failed') else ''}"
    if kind == Step.Kind.VERIFY:
        what = data.get("event") or f"{data.get('verifier')} {data.get('attempt')}"
        return f"verify {what} {'passed' if data.get('passed') else 'failed'}"
    if kind == Step.Kind.GUARD:
        subject = data.get("tool") or data.get("subject")
        return f"guard {subject} {'passed' if data.get('passed') else 'failed'}"
    event = data.get("event")
    if event == "launched":
        prompt = data.get("history") or data.get("prompt")
        return f"launched prompt {hashlib.sha256(canonical_json(prompt).encode()).hexdigest()[:12]}"
    if event == "terminated":
        return f"terminated {data.get('to')} ({data.get('reason')})"
    return f"{event} -> {data.get('to')}"


def _short_hash(tool: str | None, args: dict) -> str:
    return args_hash(tool or "", args)[:12]


def recovery_steps(steps: list[tuple[int, str, dict, Any]]) -> set[int]:
    """The seqs of the recorded steps that are recovery, not the agent's path: a takeover
    ("resumed" while running), an engine error, and an "outcome unknown" question with its
    decision and the pause and resume around it."""
    found: set[int] = set()
    questions: set[str] = set()
    waiting_on_recovery = False
    for seq, kind, data, _ in steps:
        event = data.get("event") if kind == Step.Kind.STATUS else None
        if event == "error" or (event == "resumed" and data.get("from") == Run.Status.RUNNING):
            found.add(seq)
        elif _is_outcome_question(kind, data):
            found.add(seq)
            questions.add(str(data.get("approval")))
            waiting_on_recovery = True
        elif kind == Step.Kind.DECISION and str(data.get("approval")) in questions:
            found.add(seq)
        elif waiting_on_recovery and event in ("paused", "resumed"):
            found.add(seq)
            if event == "resumed":
                waiting_on_recovery = False
        elif waiting_on_recovery and kind != Step.Kind.STATUS:
            waiting_on_recovery = False
    return found


# --- the recording ----------------------------------------------------------------------------
class Recording:
    """A recorded timeline answering for the world: the model, the tools, the people."""

    def __init__(self, run: Run, steps: list[tuple[int, str, dict, Any]]):
        self.run = run
        self.steps = steps  # (seq, kind, data, cost_usd) in seq order
        recovery = recovery_steps(steps)
        # What the replay is compared with, in order: the steps but recovery.
        self.compared = [step for step in steps if step[0] not in recovery]
        self.recovery = len(recovery)
        self._schemas = {
            t["name"]: (t.get("input_schema") or {}).get("properties")
            for t in run.agent_config.get("tools", [])
        }
        self.notes: list[str] = []
        self.provider = _RecordedModel(self)
        self.gates = _RecordedGates(self)
        self._model_turns = [
            (seq, kind, data, cost)
            for seq, kind, data, cost in steps
            if kind in (Step.Kind.LLM, Step.Kind.LLM_ERROR)
        ]
        self._summaries = [
            (seq, kind, data, cost) for seq, kind, data, cost in steps if kind == Step.Kind.SUMMARY
        ]
        # A verifier's model calls, answered in order like the agent's turns.
        self._verifier_turns = [
            (seq, kind, data, cost)
            for seq, kind, data, cost in steps
            if kind == Step.Kind.VERIFY and "content" in data
        ]
        self._results: dict[str, list[dict]] = {}
        for _, kind, data, _ in steps:
            # Tool steps that called the tool, and a verifier's read-only calls.
            if (kind == Step.Kind.TOOL and data.get("attempts", 0) > 0) or (
                kind == Step.Kind.VERIFY and data.get("tool")
            ):
                key = args_hash(data["tool"], data.get("args") or {})
                self._results.setdefault(key, []).append(data)
        self.gates_by_use = {
            data.get("tool_use_id"): data
            for _, kind, data, _ in steps
            # An "outcome unknown" question is recovery: the call itself was not gated.
            if kind == Step.Kind.GATE
            and data.get("tool_use_id")
            and not _is_outcome_question(kind, data)
        }
        self.decided: dict[str, dict] = {}  # approval id -> decision step data, once fed
        self.opened: list[str] = []  # approval ids the replay opened

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def as_recorded(self, tool: str | None, args: dict) -> dict:
        """`args` without the arguments the tool did not have when the run was recorded
        (added since, with a default): the recorded call could not have given them."""
        properties = self._schemas.get(tool or "")
        if not properties or not isinstance(args, dict):
            return args
        return {name: value for name, value in args.items() if name in properties}

    def tool_result(self, tool: str, args: dict) -> tuple[Any, str | None]:
        queue = self._results.get(args_hash(tool, args)) or self._results.get(
            args_hash(tool, self.as_recorded(tool, args))
        )
        if not queue:
            self.note(
                f"the replay called {tool} with arguments the recorded run never ran it with "
                f"(hash {args_hash(tool, args)[:12]})"
            )
            return None, "replay: no recorded result for this call"
        data = queue.pop(0)
        if "rejected_output" in data:
            # What the tool returned that failed its output schema: checked again today.
            return data["rejected_output"], None
        return (None, data["error"]) if data.get("is_error") else (data.get("result"), None)

    def next_model_turn(self, *, verifier: bool = False) -> tuple[int, str, dict, Any]:
        turns = self._verifier_turns if verifier else self._model_turns
        if not turns:
            whose = "verifier" if verifier else "model"
            raise RecordingEnded(f"the recording has no further {whose} turn")
        return turns.pop(0)

    def next_summary(self) -> tuple[int, str, dict, Any] | None:
        return self._summaries.pop(0) if self._summaries else None

    def human_steps_after(self, replayed_seq: int) -> list[tuple[int, str, dict, Any]]:
        """The recorded people's steps right after the replay's step `replayed_seq`
        (decisions, a resume, a cancel). Steps are matched by place among the compared ones:
        the recorded seqs are ahead of the replay's by the recovery steps before them."""
        if not 0 < replayed_seq <= len(self.compared):
            return []
        seq = self.compared[replayed_seq - 1][0]
        out = []
        for step in self.compared:
            if step[0] <= seq:
                continue
            kind, data = step[1], step[2]
            if kind in (Step.Kind.DECISION, Step.Kind.PENDING) or (
                kind == Step.Kind.STATUS and data.get("event") in _HUMAN_EVENTS
            ):
                out.append(step)
                continue
            break
        return out


class _RecordedModel:
    """The recorded model turns, in order, as a provider."""

    name = "replay"

    def __init__(self, recording: Recording):
        self.recording = recording

    def complete(
        self, request: llm.LLMRequest, *, on_text: llm.OnText | None = None
    ) -> LLMResponse:
        # A recorded answer is there at once: nothing to stream (on_text is left unused).
        if request.metadata.get("purpose") == "summary":
            return self._summary(request)
        verifier = request.metadata.get("purpose") == "verify"
        _, kind, data, cost = self.recording.next_model_turn(verifier=verifier)
        if kind == Step.Kind.LLM_ERROR:
            error = LLMTransientError if data.get("retryable") else LLMError
            raise error(data.get("error", "recorded model error"), status=data.get("status"))
        usage = data.get("usage") or {}
        return LLMResponse(
            content=data["content"],
            stop_reason=data.get("stop_reason", "end_turn"),
            usage=Usage(**{k: v for k, v in usage.items() if k in Usage.__dataclass_fields__}),
            model=data.get("model", request.model),
            cost_usd=cost,
            latency_ms=0,
            request_id=data.get("request_id", ""),
        )

    def _summary(self, request: llm.LLMRequest) -> LLMResponse:
        """The recorded summary of the older turns (its own queue: not a model turn)."""
        recorded = self.recording.next_summary()
        if recorded is None:
            self.recording.note("the replay summarised older turns; the recorded run did not")
            raise LLMError("replay: no recorded summary")
        _, _, data, cost = recorded
        if data.get("failed"):
            raise LLMError(data.get("error", "recorded summary failure"), status=data.get("status"))
        usage = data.get("usage") or {}
        return LLMResponse(
            content=[{"type": "text", "text": data["summary"]}],
            stop_reason="end_turn",
            usage=Usage(**{k: v for k, v in usage.items() if k in Usage.__dataclass_fields__}),
            model=data.get("model", request.model),
            cost_usd=cost,
            latency_ms=0,
            request_id=data.get("request_id", ""),
        )


class _RecordedGates:
    """The gate policy's interface (runs/engine/gates.py) answered from the recording: a call
    is gated where the recorded run gated it, and decided as it was. Today's policy is asked
    too; where it would decide otherwise, the replay notes why."""

    def __init__(self, recording: Recording):
        self.recording = recording

    def gate_for_call(self, run: Run, item: dict, tool, response: Any) -> dict | None:
        recorded = self.recording.gates_by_use.get(item["id"])
        policy = gates.registered()
        today = policy.gate_for_call(run, item, tool, response) if policy else None
        if recorded is None and today is not None and not today.get("sampled"):
            self.recording.note(
                f"today's gate policy gates {tool.name} ({today.get('explanation')}); "
                "the recorded run did not"
            )
            return today
        if recorded is not None and today is None and not recorded.get("sampled"):
            self.recording.note(
                f"the recorded run gated {tool.name} ({recorded.get('explanation')}); "
                "today's gate policy lets it through"
            )
        return {"recorded": recorded} if recorded is not None else None

    def open_gate(self, run: Run, item: dict, gate: dict) -> str:
        data = gate.get("recorded") or {
            "approval": f"replay-{item['id']}",
            "kind": gate.get("kind"),
            "tool_use_id": item["id"],
            "tool": gate.get("tool"),
            "args": item["args"],
        }
        run.append_step(Step.Kind.GATE, data)
        self.recording.opened.append(data["approval"])
        if data.get("approved_by_rule") or data.get("approved_by_grant"):
            # An auto-approve rule or a standing grant decided it in the same step: no
            # person's step follows, so the gate step is its own decision.
            self.recording.decided[data["approval"]] = {**data, "decision": "approve"}
        return data["approval"]

    def open_outcome_question(self, run, item, tool, effect) -> str:
        raise RecordingEnded("replay does not follow an 'outcome unknown' question")

    def open_verification_question(self, run: Run, failed: dict) -> str:
        data = self.recording.gates_by_use.get(failed["key"])
        if data is None:
            raise RecordingEnded("the recorded run did not ask a person about this verification")
        run.append_step(Step.Kind.GATE, data)
        self.recording.opened.append(data["approval"])
        return data["approval"]

    def pending_count(self, run: Run) -> int:
        return sum(1 for a in self.recording.opened if a not in self.recording.decided)

    def decisions(self, ids: list[str]) -> dict[str, gates.Decision]:
        return {i: self._decision(i) for i in ids}

    def _decision(self, approval: str) -> gates.Decision:
        data = self.recording.decided.get(approval)
        if data is None:
            return gates.Decision(id=approval, status=gates.PENDING, args={}, args_hash="", by=None)
        final = data.get("edited_args") or data.get("args") or {}
        status = data.get("status") or {
            "approve": gates.APPROVED,
            "reject": gates.REJECTED,
            "answer": gates.ANSWERED,
        }.get(data.get("decision"), gates.EXPIRED)
        return gates.Decision(
            id=approval,
            status=status,
            args=final,
            args_hash=args_hash(data.get("tool") or "", final),
            by=data.get("by"),
            answer=data.get("answer") or "",
            reason=data.get("reason") or "",
            on_expiry=self.recording.run.agent_config.get("gates", {}).get(
                "on_expiry", GateRules.on_expiry
            ),
            decided_at=self.recording.run.created_at,
        )

    def continue_due(self, run: Run) -> bool:
        return False  # "continue?" checkpoints are not replayed (a different step follows)

    def continue_answer(self, run: Run):
        return None

    def open_continue_question(self, run: Run) -> None:
        raise RecordingEnded("replay does not follow 'continue?' checkpoints")


# --- the replay -------------------------------------------------------------------------------
class _RollBack(Exception):
    pass


def replay(run: Run) -> ReplayResult:
    """Replay `run` and compare. Writes nothing that stays."""
    steps = [
        (seq, kind, data, cost)
        for seq, kind, data, cost in run.steps.order_by("seq").values_list(
            "seq", "kind", "data", "cost_usd"
        )[:MAX_STEPS]
        # What followed the run's end (its follow-up runs, runs/chains.py) is not the loop's.
        if not (kind == Step.Kind.STATUS and data.get("event") == chains.FOLLOW_UP)
    ]
    recording = Recording(run, steps)
    result = ReplayResult(
        run_id=str(run.pk),
        agent=run.agent,
        identical=False,
        compared=0,
        recorded_steps=len(recording.compared),
        recorded=[signature(kind, data) for _, kind, data, _ in recording.compared],
        recovery_steps=recording.recovery,
    )
    agent = get_agent(run.agent)
    if agent is None:
        result.divergence = Divergence(
            1, "launched", "nothing", f"agent {run.agent!r} is not in this catalogue"
        )
        return result
    cleaned, errors = agent.validate_input(run.input)
    if errors:
        result.divergence = Divergence(
            1, "launched", "nothing", f"the run's input is no longer valid for the agent: {errors}"
        )
        return result
    result.changed_tools = _changed_tools(run)
    replayed: list[tuple[str, dict]] = []
    try:
        with transaction.atomic():
            copy = _drive(agent, cleaned, run, recording)
            replayed = list(copy.steps.order_by("seq").values_list("kind", "data")[:MAX_STEPS])
            raise _RollBack
    except _RollBack:
        pass
    result.replayed = [signature(kind, data, recording.as_recorded) for kind, data in replayed]
    result.notes = recording.notes
    _compare(result, run, agent, replayed)
    return result


def _changed_tools(run: Run) -> list[str]:
    """The run's tools whose code or schema is not what it was (fingerprints in the
    snapshot; a run recorded before fingerprints has none to compare)."""
    changed = []
    for meta in run.agent_config.get("tools", []):
        then = meta.get("fingerprint")
        tool = get_tool(meta["name"])
        if then and tool is not None and tool.fingerprint() != then:
            changed.append(meta["name"])
    return sorted(changed)


def _drive(agent: Agent, input: dict, run: Run, recording: Recording) -> Run:
    copy = engine.launch(
        agent=agent,
        input=input,
        limits=Limits(run.max_steps, run.max_cost_usd, run.max_seconds, run.max_consecutive_errors),
        trigger=Run.Trigger.REPLAY,
        provider=run.provider,
        source=f"replay of run {run.pk}",
        fork=_fork_point(run, recording),
    )
    with replaying.replaying(recording):
        for _ in range(MAX_STEPS):
            # A savepoint, not atomic(): what the engine wrote before the recording ended
            # is kept for the comparison.
            savepoint = transaction.savepoint()
            try:
                status = engine.advance(copy.pk, time_slice=3600)
            except RecordingEnded as exc:
                transaction.savepoint_commit(savepoint)
                recording.note(str(exc))
                break
            except DatabaseError as exc:
                transaction.savepoint_rollback(savepoint)
                recording.note(f"the replay's write failed: {exc}")
                break
            transaction.savepoint_commit(savepoint)
            copy.refresh_from_db()
            if copy.status == Run.Status.WAITING or status == Run.Status.WAITING:
                if not _feed_people(copy, recording):
                    break
            elif copy.status != Run.Status.QUEUED:
                break  # finished, or the engine stopped it for a reason the steps show
    return copy


def _fork_point(run: Run, recording: Recording) -> engine.ForkPoint | None:
    """A forked run is replayed from where it started: its launched step's conversation and
    its first checkpoint's state."""
    launched = recording.steps[0][2] if recording.steps else {}
    if "history" not in launched:
        return None
    first = run.checkpoints.filter(seq=1).values_list("state", flat=True).first()
    origin = launched.get("forked_from") or {}
    return engine.ForkPoint(
        origin=str(origin.get("run", "")),
        seq=int(origin.get("seq", 0)),
        messages=launched["history"],
        state=first or {"pending": [], "recent_calls": []},
        instruction=launched.get("instruction", ""),
    )


def _feed_people(copy: Run, recording: Recording) -> bool:
    """Write the people's recorded steps that come next (decisions, the resume), as they were
    written then; False when the recording has none (it ends waiting)."""
    human = recording.human_steps_after(copy.last_seq)
    if not human:
        recording.note("the recording ends with the run waiting for a person")
        return False
    with transaction.atomic():
        locked = Run.locked(copy.pk)
        for _, kind, data, _ in human:
            if kind == Step.Kind.DECISION:
                if data.get("approval"):
                    recording.decided[data["approval"]] = data
                locked.append_step(kind, data)
            elif kind == Step.Kind.PENDING:
                _feed_operation(locked, data)
            elif data.get("event") == "resumed":
                locked.resume(data.get("detail", ""))
            else:  # cancelled
                locked.cancel(reason=data.get("detail") or data.get("reason") or "")
    return True


def _feed_operation(copy: Run, data: dict) -> None:
    """How an operation the recorded run awaited ended, for the replay's own operation of the
    same call (the oldest still open of that tool)."""
    op = copy.pending_operations.filter(tool=data.get("tool"), status="open").first()
    step = copy.append_step(Step.Kind.PENDING, {**data, "operation": op.pk if op else None})
    if op is not None and data.get("event") in PendingOperation.FINISHED:
        outcome = data.get("result") if "result" in data else {"error": data.get("error")}
        copy.pending_operations.filter(pk=op.pk).update(
            status=data["event"], result=outcome, reported_seq=step.seq
        )


def _compare(result: ReplayResult, run: Run, agent: Agent, replayed: list) -> None:
    recorded = result.recorded
    for index, (want, got) in enumerate(zip(recorded, result.replayed, strict=False)):
        if want != got:
            result.compared = index
            result.divergence = Divergence(
                index + 1, want, got, _why(run, agent, replayed[index], result.notes)
            )
            return
    n = min(len(recorded), len(result.replayed))
    result.compared = n
    if len(recorded) == len(result.replayed):
        result.identical = True
        return
    if len(result.replayed) > len(recorded):
        why = "the replay went on where the recording ends"
        result.divergence = Divergence(
            n + 1, "nothing (the recording ends)", result.replayed[n], why
        )
    else:
        why = "; ".join(result.notes) or "the replay stopped before the recording's end"
        result.divergence = Divergence(n + 1, recorded[n], "nothing (the replay stopped)", why)


def _schema_change(then: dict, now: dict) -> str:
    """What changed between two JSON schemas' fields, in words (": now requires x")."""
    parts = []
    for word, names in (
        ("now requires", set(now.get("required", [])) - set(then.get("required", []))),
        ("no longer requires", set(then.get("required", [])) - set(now.get("required", []))),
        ("no longer has", set(then.get("properties", {})) - set(now.get("properties", {}))),
    ):
        if names:
            parts.append(f"{word} {', '.join(sorted(names))}")
    return f": {'; '.join(parts)}" if parts else ""


def _why(run: Run, agent: Agent, step: tuple[str, dict], notes: list[str]) -> str:
    """Why the replayed step differs, as far as the recording and today's code can tell."""
    reasons = []
    kind, data = step
    then = {t["name"]: t for t in run.agent_config.get("tools", [])}
    if kind == Step.Kind.TOOL and data.get("tool") in then:
        name = data["tool"]
        tool = get_tool(name)
        if tool is None or name not in agent.tools:
            reasons.append(f"the agent no longer has the tool {name}")
        elif tool.input_schema() != then[name].get("input_schema"):
            change = _schema_change(then[name].get("input_schema") or {}, tool.input_schema())
            reasons.append(f"the tool {name}'s input schema changed since the run{change}")
        if data.get("is_error"):
            reasons.append(f"replayed call failed: {str(data.get('error'))[:300]}")
    if set(then) != set(agent.tools):
        reasons.append(
            f"the agent's tools changed since the run: {sorted(then)} then, "
            f"{sorted(agent.tools)} now"
        )
    if kind == Step.Kind.STATUS and data.get("event") == "launched":
        reasons.append("the agent's prompt for this input changed since the run")
    reasons.extend(notes)
    return "; ".join(reasons) or "the engine took another path with the same recorded inputs"
