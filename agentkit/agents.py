"""The agent catalogue: what each agent is, what it may use, how far it may go.

Agents are registered in code (see demo/agents.py). A run stores `Agent.snapshot()` at
launch, so later edits to an agent never change what a past run says it ran with.
"""

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django import forms

from agentkit import mcp
from agentkit.llm.base import Provider
from agentkit.llm.scripted import ScriptedProvider, Turn
from agentkit.pii import PiiPolicy
from agentkit.plan_tool import SUBMIT_PLAN
from agentkit.tools import REGISTRY, RateLimit, Tool
from agentkit.verification import Verifier, json_schema


@dataclass(frozen=True)
class Limits:
    max_steps: int = 20
    max_cost_usd: Decimal = Decimal("1.00")
    max_seconds: int = 600
    max_consecutive_errors: int = 3

    def as_dict(self) -> dict[str, Any]:
        return {
            "max_steps": self.max_steps,
            "max_cost_usd": str(self.max_cost_usd),
            "max_seconds": self.max_seconds,
            "max_consecutive_errors": self.max_consecutive_errors,
        }


@dataclass(frozen=True)
class EscalationTier:
    """One step of an approval's escalation chain: after `after` with no decision, these
    people are notified (usernames, and everyone holding one of `roles`), and from then on
    they may decide it too, even when the agent names its approvers."""

    after: timedelta
    users: tuple[str, ...] = ()
    roles: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "after_seconds": int(self.after.total_seconds()),
            "users": list(self.users),
            "roles": list(self.roles),
        }


@dataclass(frozen=True)
class LearningRules:
    """Opt-in: the gate policy learns from this agent's approvers (approvals/learning/rules.py).

    It tracks people's decisions per (tool, argument pattern) and, after `bar` consecutive
    approvals without an edit, *proposes* an auto-approve rule that an admin may accept (with
    a cap on hits and an expiry). It never applies a rule by itself and never covers an
    irreversible call of high or critical risk. Off unless declared; the LEARNING_POLICY
    setting switches it off everywhere."""

    bar: int = 30  # consecutive approvals without an edit before a rule is proposed
    # Amount bands, as shares of each threshold: a call of 40 under a 500 limit has a record
    # in the bands "<= 50" (0.1), "<= 125", "<= 250" and "<= 500".
    bands: tuple[float, ...] = (0.1, 0.25, 0.5, 1.0)
    # tool -> argument names a pattern also matches by equality (enumerated fields)
    match_fields: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Share of rule-covered calls still shown to a person (a sampled check of the rule).
    check_rate: float = 0.15
    # Share of borderline calls (one notch below the gate) sampled when the agent sets no
    # GateRules.sample_rate: a policy that learns keeps people looking at what runs.
    sample_rate: float = 0.15
    default_expiry: timedelta = timedelta(days=30)
    default_max_hits: int = 500

    def as_dict(self) -> dict[str, Any]:
        return {
            "bar": self.bar,
            "bands": [float(b) for b in self.bands],
            "match_fields": {t: list(f) for t, f in self.match_fields.items()},
            "check_rate": self.check_rate,
            "sample_rate": self.sample_rate,
            "default_expiry_seconds": int(self.default_expiry.total_seconds()),
            "default_max_hits": self.default_max_hits,
        }


@dataclass(frozen=True)
class GateRules:
    """Declared gate policy for one agent; evaluated by approvals/gates/policy.py on the
    server."""

    # tool -> {"arg": threshold}: gate when the argument exceeds it
    thresholds: dict[str, dict[str, Decimal]] = field(default_factory=dict)
    # tool -> {"arg": allowed values}: gate when the argument is not listed
    allow_lists: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=dict)
    always_gate: tuple[str, ...] = ()
    never_gate: tuple[str, ...] = ()
    confidence_threshold: float | None = None  # gate when the model says it is less sure
    continue_every_n_steps: int = 0  # periodic "continue?" checkpoint; 0 is off
    sample_rate: float = 0.0  # share of borderline calls gated anyway
    approval_timeout: timedelta = timedelta(hours=24)
    # At the deadline: reject (the agent is told the call was denied and goes on), fail (the
    # run fails) or halt (the run stops where it is, waiting, until an operator resumes or
    # cancels it).
    on_expiry: str = "reject"
    # Reminders to the approvers while nobody decides: when these shares of the approval's
    # time are left (0.5 = half-life, 0.1 = 10 % left), and, before each escalation tier, when
    # `remind_before_escalation` of the tier's delay is left (0 turns that one off).
    reminders: tuple[float, ...] = (0.5, 0.1)
    remind_before_escalation: float = 0.2
    four_eyes_from: str = "high"  # blast radius from which the launcher may not approve
    quorum_from: str = ""  # blast radius needing `quorum` distinct approvers ("" off)
    quorum: int = 2
    approvers: tuple[str, ...] = ()  # usernames allowed to decide; empty means any approver
    # Who is notified (and may then decide) when nobody has decided after each tier's delay;
    # at the deadline `on_expiry` applies as always (approvals/notify/escalation.py).
    escalation: tuple[EscalationTier, ...] = ()
    # tool -> share of its borderline calls sampled, overriding sample_rate for that tool
    sample_rates: dict[str, float] = field(default_factory=dict)
    learning: LearningRules | None = None  # earned auto-approval (off unless declared)
    # Post-hoc review: how many of this agent's calls that ran without a person are sampled
    # for a reviewer each day (approvals/learning/review.py); None is the installation's
    # AGENTOPS_REVIEW_SAMPLE_PER_DAY, 0 turns it off for this agent.
    review_per_day: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "thresholds": {
                t: {a: str(v) for a, v in d.items()} for t, d in self.thresholds.items()
            },
            "allow_lists": {
                t: {a: list(v) for a, v in d.items()} for t, d in self.allow_lists.items()
            },
            "always_gate": list(self.always_gate),
            "never_gate": list(self.never_gate),
            "confidence_threshold": self.confidence_threshold,
            "continue_every_n_steps": self.continue_every_n_steps,
            "sample_rate": self.sample_rate,
            "approval_timeout_seconds": int(self.approval_timeout.total_seconds()),
            "on_expiry": self.on_expiry,
            "reminders": [float(r) for r in self.reminders],
            "remind_before_escalation": float(self.remind_before_escalation),
            "four_eyes_from": self.four_eyes_from,
            "quorum_from": self.quorum_from,
            "quorum": self.quorum,
            "approvers": list(self.approvers),
            "escalation": [tier.as_dict() for tier in self.escalation],
            "sample_rates": dict(self.sample_rates),
            "learning": self.learning.as_dict() if self.learning else None,
            "review_per_day": self.review_per_day,
        }


@dataclass(frozen=True)
class RunResult:
    """What a follow-up's mapping sees of the run that succeeded."""

    run_id: str
    agent: str
    input: dict[str, Any]
    output: str  # the model's final answer

    def json(self) -> Any:
        """The final answer parsed as JSON: the whole text, else a ```json fenced block in
        it, else its first `{` to its last `}` (a model's prose around an object). ValueError
        when none parses (the follow-up is then not launched, and its step says why)."""
        text = self.output.strip()
        candidates = [text]
        fenced = _JSON_FENCE.search(text)
        if fenced:
            candidates.append(fenced[1])
        if "{" in text and "}" in text:
            candidates.append(text[text.index("{") : text.rindex("}") + 1])
        for candidate in candidates:
            try:
                return json.loads(candidate)
            except ValueError:
                continue
        raise ValueError("the run's output is not JSON")


_JSON_FENCE = re.compile(r"```(?:json)?\s*\n(.*?)\n\s*```", re.DOTALL)


@dataclass(frozen=True)
class FollowUp:
    """An agent launched when a run of the declaring agent succeeds (a chained run).

    `input` maps the finished run to the next agent's input; the result is validated like
    any launch's input. It may raise or return None to launch nothing: the parent's timeline
    records why either way. Code, so only `name` and `agent` go into the snapshot.
    """

    agent: str
    input: Callable[[RunResult], dict[str, Any] | None]
    # Tells two follow-ups of one agent apart; the next agent's slug by default.
    name: str = ""

    @property
    def key(self) -> str:
        return self.name or self.agent


# The default summary shows this many input fields; any summary is cut to SUMMARY_CHARS.
SUMMARY_FIELDS = 3
SUMMARY_CHARS = 120


@dataclass(frozen=True)
class Agent:
    slug: str
    title: str
    description: str
    model: str
    system_prompt: str
    tools: tuple[str, ...]
    input_form: type[forms.Form]
    # Builds the first user message from the validated input.
    prompt: Callable[[dict[str, Any]], str]
    # Scripted model turns for this input (demo runs without an API key).
    script: Callable[[dict[str, Any]], list[Turn]]
    limits: Limits = field(default_factory=Limits)
    # Upper bounds an operator may raise the limits to at launch.
    max_limits: Limits = field(default_factory=lambda: Limits(200, Decimal("20.00"), 3600, 10))
    gates: GateRules = field(default_factory=GateRules)
    max_tokens: int = 1024
    # One line that tells a run from the others in lists ("order 42 · refund 600"), from
    # the validated input; None: the first fields of the input (`summarize`). Code, so it
    # stays out of the snapshot: the line is stored on the run at launch.
    summary: Callable[[dict[str, Any]], str] | None = None
    # Agents launched when a run succeeds, with its output mapped into their input
    # (runs/chains.py). The agents named must be registered first.
    follow_ups: tuple[FollowUp, ...] = ()
    # Past a pending operation's deadline: "agent" (it is told), "person" (an operator
    # decides), or "" for what the tool's Pending says.
    on_pending_timeout: str = ""
    # The tokens the model's conversation may take (0: AGENTOPS["CONTEXT_TOKEN_BUDGET"]).
    # Past it the oldest turns are summarised by a model call when `summarise_context`
    # (runs/engine/summary.py), else dropped.
    context_budget_tokens: int = 0
    summarise_context: bool = False
    # Checked after the model's final answer, before the run may succeed (docs/admins/
    # verification.md); the final answer's JSON schema, or a pydantic model (the same page,
    # "Output validation"), and how many invalid answers the agent may give before the run fails.
    verifier: Verifier | None = None
    output_schema: dict[str, Any] | type | None = None
    output_attempts: int = 2
    # Personal data in what leaves the system (calls' arguments, the final answer): redact,
    # gate or block (agentkit/pii.py). None: not looked for.
    pii: PiiPolicy | None = None
    # tool -> RateLimit across all runs of this agent, on top of the tool's own limit.
    rate_limits: dict[str, RateLimit] = field(default_factory=dict)
    # The model's text appears in the run's live trace as it is written (the provider's
    # streaming API), not only once the answer is complete.
    stream_text: bool = False
    # Seconds between the scripted model's words when it streams, so that a demo without an
    # API key is seen typing. Only for runs of an agent with stream_text.
    scripted_typing: float = 0.0
    # When a tool call fails (after its retries): "end" tells the agent, as ever; "ask" holds
    # the failure from the agent and parks the run until an operator retries the call (maybe
    # with edited arguments), skips it with a note, or gives the agent another instruction.
    on_failure: str = "end"
    # MCP servers whose tools the agent takes besides `tools` (agentkit/mcp.py), listed when
    # a run starts; gate rules name them with the server's prefix ("warehouse_stock_level").
    mcp_servers: tuple[mcp.McpServer, ...] = ()
    # Read-only tool calls of one model turn run at once, at most this many (1: one after
    # another); None: AGENTOPS["MAX_PARALLEL_TOOLS"] (runs/engine/parallel.py).
    max_parallel_tools: int | None = None
    # Answers a model call when `model` is overloaded (529) or still failing after its
    # retries; the step says which model answered (runs/engine/model.py).
    fallback_model: str = ""
    # A cheaper model for some of the run's model calls: "summary" (context summaries) and
    # "verify" (a verifier's review, unless the verifier names its own model).
    step_models: dict[str, str] = field(default_factory=dict)
    # How long the prompt cache keeps the run's prefix: "5m" (writes cost 1.25x an input
    # token) or "1h" (2x), for agents whose runs wait on people longer than five minutes and
    # would otherwise write the whole conversation again when they resume.
    prompt_cache_ttl: str = "5m"
    # The agent may submit a plan for approval before acting (agentkit/plan_tool.py): it is
    # offered `submit_plan`, and calls that follow an approved plan need no new gate.
    plans: bool = False
    # When a run fails or is cancelled after calls with a declared compensation committed,
    # their compensations are requested at once (runs/compensation/models.py), as an operator would
    # from the run page: each still gated as the rules say, each once through the ledger.
    compensate_on_failure: bool = False

    def compensating_tools(self) -> list[Tool]:
        """The tools that undo the agent's calls (Tool.compensate), not offered to its model:
        only a compensation calls them."""
        own = set(self.tools)
        names = {c.tool for n in self.tools if (c := REGISTRY[n].compensate)}
        return [REGISTRY[n] for n in sorted(names - own) if n in REGISTRY]

    def follow_up(self, key: str) -> FollowUp | None:
        return next((f for f in self.follow_ups if f.key == key), None)

    def summarize(self, input: dict[str, Any]) -> str:
        """The run's one-line summary of `input`, at most SUMMARY_CHARS characters."""
        text = ""
        if self.summary is not None:
            try:
                text = str(self.summary(input))
            except Exception:  # a summary is a label: it must never stop a launch
                text = ""
        if not text:
            text = " · ".join(
                f"{name.replace('_', ' ')} {value}"
                for name, value in list(input.items())[:SUMMARY_FIELDS]
                if value not in (None, "")
            )
        text = " ".join(text.split())  # one line
        return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1] + "…"

    def tool_objects(self) -> list[Tool]:
        return [REGISTRY[name] for name in self.tools] + self.mcp_tools()[0]

    def mcp_tools(self) -> tuple[list[Tool], list[dict[str, Any]]]:
        """The tools of the agent's MCP servers (listed unless the last listing is recent),
        and each server as a run's snapshot records it: a server that cannot be listed adds
        no tools, and its entry says why."""
        tools: list[Tool] = []
        servers = []
        for server in self.mcp_servers:
            entry = server.as_dict()
            try:
                listed = mcp.tools_of(server)
            except mcp.McpUnavailable as exc:
                entry["error"] = str(exc)
            else:
                tools += listed
                entry["tools"] = [t.name for t in listed]
            servers.append(entry)
        return tools, servers

    def scripted_provider(self, input: dict[str, Any]) -> ScriptedProvider:
        verifier = self.verifier
        review = verifier.script(input) if verifier and verifier.script else ()
        return ScriptedProvider(
            self.script(input), verifier_turns=review, typing=self.scripted_typing
        )

    def validate_input(self, data: Any) -> tuple[dict[str, Any] | None, dict[str, list[str]]]:
        """(cleaned input, {}) or (None, field errors). The web form and the API share it."""
        if not isinstance(data, dict):
            return None, {"__all__": ["input must be an object"]}
        unknown = set(data) - set(self.input_form.base_fields)
        if unknown:
            return None, {"__all__": [f"unknown field(s): {', '.join(sorted(unknown))}"]}
        form = self.input_form(data=data)
        if not form.is_valid():
            return None, {k: [str(m) for m in v] for k, v in form.errors.items()}
        return _jsonable(form.cleaned_data), {}

    def input_schema(self) -> dict[str, Any]:
        return form_json_schema(self.input_form)

    def resolve_limits(
        self, overrides: dict[str, Any] | None
    ) -> tuple[Limits | None, dict[str, list[str]]]:
        """The agent's limits with operator overrides applied, refused beyond max_limits."""
        if not overrides:
            return self.limits, {}
        errors: dict[str, list[str]] = {}
        values: dict[str, Any] = {}
        for name, value in overrides.items():
            if value in (None, ""):
                continue
            if name not in Limits.__dataclass_fields__:
                errors[name] = ["unknown limit"]
                continue
            cap = getattr(self.max_limits, name)
            try:
                parsed = Decimal(str(value)) if name == "max_cost_usd" else int(value)
            except (ArithmeticError, ValueError, TypeError):
                errors[name] = ["must be a number"]
                continue
            if parsed <= 0:
                errors[name] = ["must be positive"]
            elif parsed > cap:
                errors[name] = [f"must be at most {cap}"]
            else:
                values[name] = parsed
        if errors:
            return None, errors
        return replace(self.limits, **values), {}

    def snapshot(self) -> dict[str, Any]:
        snapshot: dict[str, Any] = {
            "slug": self.slug,
            "title": self.title,
            "model": self.model,
            "system_prompt": self.system_prompt,
            "tools": [REGISTRY[name].metadata() for name in self.tools],
            "limits": self.limits.as_dict(),
            "gates": self.gates.as_dict(),
            "max_tokens": self.max_tokens,
        }
        if self.mcp_servers:
            remote, snapshot["mcp"] = self.mcp_tools()
            snapshot["tools"] += [t.metadata() for t in remote]
        if self.on_pending_timeout:
            snapshot["on_pending_timeout"] = self.on_pending_timeout
        if self.context_budget_tokens:
            snapshot["context_budget_tokens"] = self.context_budget_tokens
        if self.summarise_context:
            snapshot["summarise_context"] = True
        if self.verifier is not None:
            snapshot["verifier"] = self.verifier.as_dict(self.step_models.get("verify", self.model))
        if self.fallback_model:
            snapshot["fallback_model"] = self.fallback_model
        if self.step_models:
            snapshot["step_models"] = dict(self.step_models)
        if self.prompt_cache_ttl != "5m":
            snapshot["prompt_cache_ttl"] = self.prompt_cache_ttl
        if self.output_schema is not None:
            snapshot["output_schema"] = json_schema(self.output_schema)
            snapshot["output_attempts"] = self.output_attempts
        # Only when declared: the engine's guards look for these keys, and nothing else pays.
        if self.pii is not None:
            snapshot["pii"] = self.pii.as_dict()
        if self.rate_limits:
            snapshot["rate_limits"] = {t: r.as_dict() for t, r in self.rate_limits.items()}
        if self.stream_text:
            snapshot["stream_text"] = True
        if self.on_failure != "end":
            snapshot["on_failure"] = self.on_failure
        if self.plans:
            snapshot["plans"] = True
        if self.max_parallel_tools is not None:
            snapshot["max_parallel_tools"] = self.max_parallel_tools
        compensating = self.compensating_tools()
        if compensating:
            # Beside the model's tools, so that gate rules may name them (gates/config.py).
            snapshot["compensating_tools"] = [t.metadata() for t in compensating]
        if self.compensate_on_failure:
            snapshot["compensate_on_failure"] = True
        if self.follow_ups:
            # What the run promised to launch when it succeeds; the mappings are code.
            snapshot["follow_ups"] = [{"name": f.key, "agent": f.agent} for f in self.follow_ups]
        return snapshot


# The model calls an agent may give a model of their own (Agent.step_models).
STEP_MODEL_KINDS = ("summary", "verify")

CATALOGUE: dict[str, Agent] = {}


def register(agent: Agent) -> Agent:
    if SUBMIT_PLAN in agent.tools and not agent.plans:
        raise ValueError(f"agent {agent.slug}: offer submit_plan by declaring plans=True")
    if agent.plans and SUBMIT_PLAN not in agent.tools:
        agent = replace(agent, tools=(*agent.tools, SUBMIT_PLAN))
    missing = [t for t in agent.tools if t not in REGISTRY]
    if missing:
        raise LookupError(f"agent {agent.slug} uses unknown tools: {missing}")
    _check_follow_ups(agent)
    if agent.on_pending_timeout not in ("", "agent", "person"):
        raise ValueError(f"agent {agent.slug}: on_pending_timeout must be agent or person")
    if agent.on_failure not in ("end", "ask"):
        raise ValueError(f"agent {agent.slug}: on_failure must be end or ask")
    unknown_steps = set(agent.step_models) - set(STEP_MODEL_KINDS)
    if unknown_steps:
        raise ValueError(
            f"agent {agent.slug}: step_models for {sorted(unknown_steps)}; "
            f"known: {', '.join(STEP_MODEL_KINDS)}"
        )
    if agent.fallback_model == agent.model:
        raise ValueError(f"agent {agent.slug}: its fallback_model is its model")
    if agent.prompt_cache_ttl not in ("5m", "1h"):
        raise ValueError(f"agent {agent.slug}: prompt_cache_ttl must be 5m or 1h")
    if agent.max_parallel_tools is not None and agent.max_parallel_tools < 1:
        raise ValueError(f"agent {agent.slug}: max_parallel_tools must be at least 1")
    if agent.context_budget_tokens < 0:
        raise ValueError(f"agent {agent.slug}: context_budget_tokens must not be negative")
    _check_verification(agent)
    _check_guards(agent)
    _check_compensations(agent)
    for server in agent.mcp_servers:
        mcp.declare(server)
    CATALOGUE[agent.slug] = agent
    return agent


def _check_verification(agent: Agent) -> None:
    verifier = agent.verifier
    if verifier is not None and verifier.tool is not None:
        tool = REGISTRY.get(verifier.tool[0])
        if tool is None or tool.has_side_effects:
            raise ValueError(
                f"agent {agent.slug}: a verifier's tool must be registered and have no side "
                f"effects ({verifier.tool[0]!r})"
            )
    if agent.output_schema is not None:
        json_schema(agent.output_schema)  # a bad schema fails here, not in a run
    if agent.output_attempts < 1:
        raise ValueError(f"agent {agent.slug}: output_attempts must be at least 1")


def _check_guards(agent: Agent) -> None:
    """Guards name the agent's own tools; rate limits only tools with side effects (the ones
    that go through the ledger, where the limit is counted)."""
    for name in agent.rate_limits:
        if name not in agent.tools:
            raise LookupError(f"agent {agent.slug}: rate limit for {name}, not one of its tools")
        if not REGISTRY[name].has_side_effects:
            raise ValueError(f"agent {agent.slug}: rate limits apply to tools with side effects")
    if agent.pii is not None:
        unknown = [t for t in agent.pii.tools if t not in agent.tools]
        if unknown:
            raise LookupError(f"agent {agent.slug}: PII guard for tools it lacks: {unknown}")
        checked = agent.verifier is not None or agent.output_schema is not None
        if agent.pii.on_output and checked:
            # A checked answer ends the run in verification.py, which does not hold it for the
            # PII guard: refused rather than letting personal data through unguarded.
            raise ValueError(
                f"agent {agent.slug}: a PII guard on the final answer cannot be combined with "
                "a verifier or an output schema yet"
            )


def _check_compensations(agent: Agent) -> None:
    """A compensation names a registered tool with side effects (one without has nothing to
    undo with: a "compensation" that changes nothing would read as done in the audit); an
    agent that compensates on failure has something to compensate."""
    for name in agent.tools:
        declared = REGISTRY[name].compensate
        if declared is None:
            continue
        target = REGISTRY.get(declared.tool)
        if target is None:
            raise LookupError(
                f"agent {agent.slug}: tool {name} is compensated by {declared.tool!r}, "
                "which is not a registered tool"
            )
        if not target.has_side_effects:
            raise ValueError(
                f"agent {agent.slug}: tool {name} is compensated by {declared.tool}, which has "
                "no side effects: it would undo nothing"
            )
    if agent.compensate_on_failure and not any(REGISTRY[n].compensate for n in agent.tools):
        raise ValueError(
            f"agent {agent.slug}: compensate_on_failure, but none of its tools declares a "
            "compensation"
        )


def _check_follow_ups(agent: Agent) -> None:
    """Follow-ups name agents registered before this one, once each, and never lead back to
    it: a chain always ends."""
    keys = [f.key for f in agent.follow_ups]
    if len(set(keys)) != len(keys):
        raise ValueError(f"agent {agent.slug}: two follow-ups named alike ({keys}); give names")
    unknown = [f.agent for f in agent.follow_ups if f.agent not in CATALOGUE]
    if unknown:
        raise LookupError(
            f"agent {agent.slug} follows up with unknown agents {unknown}: register them first"
        )
    seen, todo = set(), [f.agent for f in agent.follow_ups]
    while todo:
        slug = todo.pop()
        if slug == agent.slug:
            raise ValueError(f"agent {agent.slug}: its follow-ups lead back to it")
        if slug not in seen and slug in CATALOGUE:
            seen.add(slug)
            todo += [f.agent for f in CATALOGUE[slug].follow_ups]


def get_agent(slug: str) -> Agent | None:
    return CATALOGUE.get(slug)


def provider_for_run(run: Any) -> Provider:
    """The provider a run was launched with (stored on the run, so a resume never switches)."""
    if run.provider == "anthropic":
        # Imported on first use, not to break a cycle: a web process never needs the SDK
        # (its import time and memory); workers import it when they start (agentops/celery.py).
        from agentkit.llm.anthropic import AnthropicProvider

        return AnthropicProvider.from_settings()
    return CATALOGUE[run.agent].scripted_provider(run.input)


def _jsonable(data: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in data.items():
        out[key] = str(value) if isinstance(value, Decimal) else value
    return out


def json_type_errors(schema: dict[str, Any], data: dict[str, Any]) -> dict[str, list[str]]:
    """JSON types checked against the agent's published input schema (an API launch, a
    chained run's mapped input).

    Django forms coerce (`123` becomes "123", `true` becomes "True"); an API client that sends
    the wrong type has made a mistake it should hear about. Numbers may come as strings, so
    decimals keep their precision; null means "not given" and is left to the form.
    """
    errors: dict[str, list[str]] = {}
    for name, value in data.items():
        expected = schema["properties"].get(name, {}).get("type")
        if value is None or expected is None:
            continue
        ok = {
            "string": isinstance(value, str),
            "integer": isinstance(value, int) and not isinstance(value, bool),
            "number": isinstance(value, int | float | str) and not isinstance(value, bool),
            "boolean": isinstance(value, bool),
        }.get(expected, True)
        if not ok:
            errors[name] = [f"must be {'an' if expected == 'integer' else 'a'} {expected}"]
    return errors


def form_json_schema(form_class: type[forms.Form]) -> dict[str, Any]:
    """A JSON schema for API clients, derived from the same Django form the web UI renders."""
    props: dict[str, dict[str, Any]] = {}
    required = []
    for name, f in form_class.base_fields.items():
        prop: dict[str, Any] = {"title": str(f.label or name)}
        if f.help_text:
            prop["description"] = str(f.help_text)
        if isinstance(f, forms.BooleanField):
            prop["type"] = "boolean"
        # Decimal and Float fields subclass IntegerField in Django: test them first.
        elif isinstance(f, forms.DecimalField | forms.FloatField):
            prop["type"] = "number"
        elif isinstance(f, forms.IntegerField):
            prop["type"] = "integer"
        else:
            prop["type"] = "string"
        if isinstance(f, forms.ChoiceField):
            choices: Any = f.choices
            prop["enum"] = [c for c, _ in choices if c != ""]
        if isinstance(f, forms.EmailField):
            prop["format"] = "email"
        if max_length := getattr(f, "max_length", None):
            prop["maxLength"] = max_length
        if (min_value := getattr(f, "min_value", None)) is not None:
            prop["minimum"] = float(min_value)
        if (max_value := getattr(f, "max_value", None)) is not None:
            prop["maximum"] = float(max_value)
        if f.initial is not None:
            prop["default"] = f.initial
        if f.required:
            required.append(name)
        props[name] = prop
    return {
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": False,
    }
