"""The tool registry: typed Python functions plus the risk metadata gates and retries use.

A tool's JSON schema comes from its signature (via pydantic). Arguments from the model are
validated before anything runs; bad arguments become an error result the model sees.
"""

import copy
import enum
import functools
import hashlib
import inspect
import json
import time
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

import pydantic
import typing_extensions  # is_typeddict: both kinds of TypedDict (pydantic needs its own)
from django.conf import settings
from django.core import signing

from agentkit.circuit import CircuitBreaker
from agentkit.verification import json_schema

# Signs a pending operation's callback token (runs/pending/models.py checks it).
CALLBACK_SALT = "agentops.pending.callback"


class Blast(enum.IntEnum):
    """How much a wrong call can hurt. Ordered, so policies can say `>= MEDIUM`."""

    NONE = 0
    LOW = 1
    MEDIUM = 2
    HIGH = 3
    CRITICAL = 4

    @property
    def label(self) -> str:
        return self.name.lower()


class ToolError(Exception):
    """A business error (not found, refused): shown to the model, never retried."""


class ToolInfraError(Exception):
    """A transient failure (timeout, connection, 5xx upstream): retried per the tool's policy."""


class ToolArgsError(Exception):
    def __init__(self, message: str, errors: list[dict[str, Any]] | None = None):
        super().__init__(message)
        self.errors = errors or []


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 3
    base_seconds: float = 0.2
    max_seconds: float = 5.0


@dataclass(frozen=True)
class RateLimit:
    """At most `calls` calls in any window of `per`, across all runs and workers (counted in
    the database: runs/rate_limits.py). Only calls that run count. Past it, "wait": the run
    waits without a worker until the window has room (the trace says until when); "fail":
    the call is refused and the model told the limit."""

    calls: int
    per: timedelta
    on_limit: str = "wait"

    def __post_init__(self) -> None:
        if self.calls < 1 or self.per.total_seconds() < 1:
            raise ValueError("RateLimit needs calls >= 1 and a window of at least a second")
        if self.on_limit not in ("wait", "fail"):
            raise ValueError(f"RateLimit.on_limit must be wait or fail, not {self.on_limit!r}")

    def as_dict(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "per_seconds": int(self.per.total_seconds()),
            "on_limit": self.on_limit,
        }

    def describe(self) -> str:
        return f"at most {self.calls} per {window_words(self.per)}"


def window_words(per: timedelta) -> str:
    """A window as a person says it: "hour", "15 minutes", "2 days"."""
    seconds = int(per.total_seconds())
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds % size == 0:
            n = seconds // size
            return unit if n == 1 else f"{n} {unit}s"
    return f"{seconds} seconds"


@dataclass(frozen=True)
class ToolContext:
    """What the engine passes a tool that asks for it (a `ctx` parameter)."""

    run_id: str
    idempotency_key: str
    deadline: float  # time.monotonic() value after which the tool should give up

    @property
    def seconds_left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    @property
    def callback_url(self) -> str:
        """Where the outside world reports that what this call started has finished (a tool
        returning `Pending(completion="callback")` hands it on: in an e-mail, to an API).
        The signed token is the only credential: unguessable, bound to this one call."""
        token = signing.Signer(salt=CALLBACK_SALT).sign(self.idempotency_key)
        base = settings.AGENTOPS["PUBLIC_URL"].rstrip("/")
        return f"{base}/api/pending/{token}"


@dataclass(frozen=True)
class Pending:
    """What a tool returns when the call started something that finishes later: an e-mail
    whose reply the agent needs, an export, a ticket. The run records it as an operation it
    awaits (runs/pending/models.py): shown to the model on every turn and on the run page; when the
    model has nothing else to do, the run waits without a worker until the operation
    completes (a callback to `ctx.callback_url`, an operator marking it done, or `poll`)
    or its deadline passes (the agent is told, or a person is asked: `on_timeout`)."""

    awaits: str  # in words: "the supplier's reply to quote request Q-17"
    deadline: timedelta
    result: Any = None  # what the call returned meanwhile (a message id), shown to the model
    completion: str = "callback"  # "callback", "operator" or "poll"
    # For completion="poll": a tool without side effects, called with these arguments every
    # poll_every; it returns Pending while not done, a result when done (ToolError: failed).
    poll: tuple[str, dict[str, Any]] | None = None
    poll_every: timedelta | None = None
    on_timeout: str = "agent"  # "agent": told it timed out; "person": an operator decides

    def __post_init__(self) -> None:
        if self.completion not in ("callback", "operator", "poll"):
            raise ValueError(f"unknown completion {self.completion!r}")
        if self.on_timeout not in ("agent", "person"):
            raise ValueError(f"unknown on_timeout {self.on_timeout!r}")
        if (self.completion == "poll") != (self.poll is not None):
            raise ValueError("poll=(tool, args) goes with completion='poll', and only with it")


# A call's cost is recorded on its step, whose column has 6 decimal places and 12 digits.
COST_PLACES = Decimal("0.000001")
MAX_CALL_COST_USD = Decimal("999999")


def call_cost(value: Any) -> Decimal:
    """A cost in USD as the step records it, or ValueError: a finite amount, 0 or more."""
    try:
        cost = Decimal(str(value))
    except InvalidOperation:
        raise ValueError(f"a tool call's cost must be an amount in USD, not {value!r}") from None
    if not cost.is_finite() or not Decimal(0) <= cost <= MAX_CALL_COST_USD:
        raise ValueError(f"a tool call's cost must be 0 to {MAX_CALL_COST_USD} USD, not {value}")
    return cost.quantize(COST_PLACES)


@dataclass(frozen=True)
class Charged:
    """What a tool returns when the call's cost is known only once it ran (a paid API that
    bills by the page, the minute): the result the model sees, and what the call cost in USD,
    in place of the tool's declared `cost_usd`. Recorded on the tool step; it counts toward
    the run's cost limit, the agent's spend and its budget."""

    result: Any
    cost_usd: Decimal

    def __post_init__(self) -> None:
        object.__setattr__(self, "cost_usd", call_cost(self.cost_usd))


@dataclass(frozen=True)
class Compensate:
    """How a committed call of a tool with side effects is undone (refund -> reverse refund,
    create -> delete): the compensating tool, and its arguments from the effect's arguments
    and result (None: the effect's arguments as they are). The compensating call is a tool
    call like any other: gated by the agent's rules, once through the ledger (runs/
    compensation.py). The mapping may raise (a result it cannot read): then the effect is
    not compensable, and the operator is told why."""

    tool: str
    args: "Callable[[dict[str, Any], Any], dict[str, Any]] | None" = None

    def arguments(self, args: dict[str, Any], result: Any) -> dict[str, Any]:
        mapped = dict(args) if self.args is None else self.args(args, result)
        if not isinstance(mapped, dict):
            raise TypeError(f"the mapping gave a {type(mapped).__name__}, not an object")
        return mapped


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    fn: Callable[..., Any]
    args_model: type[pydantic.BaseModel]
    reversible: bool
    blast: Blast
    accepts_idempotency_key: bool = False
    timeout_seconds: float = 10.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    # What an approver's rejection does: tell the agent (it can adapt) or fail the run.
    on_reject: str = "tell_agent"
    wants_ctx: bool = False
    # How the call's effect reads to a person ("Refund 600.00 on order 42"): a format string
    # over the parsed arguments or a function of them; see `effect`.
    describe: "str | Callable[[dict[str, Any]], str] | None" = None
    # The JSON schema its result must match (docs/admins/verification.md); None: unchecked.
    output_schema: dict[str, Any] | None = None
    # Across all runs of all agents (an agent may add its own: Agent.rate_limits).
    rate_limit: RateLimit | None = None
    # Called on the worker's own thread, its deadline not enforced (runs/engine/deadlines.py):
    # for tools without side effects that cannot block (in-memory work, no network, no
    # locks). Handing such a call to a pool thread cost more than the call.
    inline: bool = False
    # What a call would change, computed read-only when its gate opens and again when a
    # person decides (agentkit/previews.py): a function of the parsed arguments returning a
    # previews.Change or a list of them.
    preview: "Callable[[dict[str, Any]], Any] | None" = None
    # What each call costs in USD (a paid API), charged to the run whenever the tool runs;
    # a call that returns Charged says its own cost instead.
    cost_usd: Decimal = Decimal(0)
    # The call that undoes a committed call of this tool (Compensate); None: it cannot be.
    compensate: Compensate | None = None

    @property
    def has_side_effects(self) -> bool:
        return not (self.reversible and self.blast == Blast.NONE)

    def input_schema(self) -> dict[str, Any]:
        # A copy: the caller may change it (the snapshot each launch stores is built on it).
        return copy.deepcopy(_json_schema(self.args_model))

    def anthropic_schema(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema(),
            **({"rate_limit": self.rate_limit.as_dict()} if self.rate_limit else {}),
        }

    def validate(self, args: Any) -> dict[str, Any]:
        """Parsed arguments as plain JSON values, or ToolArgsError with a readable message."""
        if not isinstance(args, dict):
            raise ToolArgsError(f"arguments for {self.name} must be an object")
        try:
            parsed = self.args_model.model_validate(args)
        except pydantic.ValidationError as e:
            parts = [
                f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}"
                for err in e.errors()
            ]
            raise ToolArgsError(
                f"invalid arguments for {self.name}: " + "; ".join(parts),
                [{"loc": list(err["loc"]), "msg": err["msg"]} for err in e.errors()],
            ) from None
        return parsed.model_dump(mode="json")

    def call(self, args: dict[str, Any], ctx: ToolContext) -> Any:
        kwargs = dict(self.args_model.model_validate(args))
        if self.wants_ctx:
            kwargs["ctx"] = ctx
        result = self.fn(**kwargs)
        if isinstance(result, pydantic.BaseModel):  # a typed result: recorded as JSON
            return result.model_dump(mode="json")
        return result

    def effect(self, args: dict[str, Any]) -> str:
        """One line saying what this call would do, from its parsed arguments. The tool's own
        `describe` when it has one and it can read these arguments; otherwise the tool's name
        and its arguments (long values cut)."""
        if self.describe is not None:
            try:
                if callable(self.describe):
                    return str(self.describe(args))
                return self.describe.format(**args)
            except (KeyError, IndexError, TypeError, ValueError, ArithmeticError):
                pass  # arguments it cannot read (an edit, an old call): the plain form below
        shown = ", ".join(f"{k}={_short(v)}" for k, v in sorted(args.items()))
        return f"Call {self.name} with {shown}" if shown else f"Call {self.name}"

    def metadata(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "reversible": self.reversible,
            "blast": self.blast.label,
            "accepts_idempotency_key": self.accepts_idempotency_key,
            "timeout_seconds": self.timeout_seconds,
            "on_reject": self.on_reject,
            **({"cost_usd": str(self.cost_usd)} if self.cost_usd else {}),
            **({"compensate": self.compensate.tool} if self.compensate else {}),
            "input_schema": self.input_schema(),
            "fingerprint": self.fingerprint(),
        }

    def fingerprint(self) -> str:
        """What the tool is, as code: a hash of its function's source and its input schema.
        Recorded with each run (its snapshot), so a replay can tell a tool whose code changed
        since the run from one that did not (history/replay.py)."""
        schema = json.dumps(self.input_schema(), sort_keys=True, default=str)
        return hashlib.sha256(f"{_code_of(self.fn)}\n{schema}".encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=1024)
def _code_of(fn: Callable[..., Any]) -> str:
    target = inspect.unwrap(fn)
    try:
        return inspect.getsource(target)
    except (OSError, TypeError):  # built in, or made at run time: its bytecode and constants
        code = getattr(target, "__code__", None)
        if code is None:
            return repr(target)
        return f"{code.co_code.hex()}|{code.co_consts!r}|{code.co_names!r}"


def _short(value: Any, limit: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@functools.cache
def _json_schema(args_model: type[pydantic.BaseModel]) -> dict[str, Any]:
    # Generating it costs more than the rest of a launch's snapshot; the model never changes.
    schema = args_model.model_json_schema()
    schema.pop("title", None)
    return schema


REGISTRY: dict[str, Tool] = {}


def tool(
    *,
    reversible: bool,
    blast: Blast,
    accepts_idempotency_key: bool = False,
    timeout_seconds: float = 10.0,
    retry: RetryPolicy | None = None,
    on_reject: str = "tell_agent",
    name: str | None = None,
    describe: str | Callable[[dict[str, Any]], str] | None = None,
    output_schema: "dict[str, Any] | type[pydantic.BaseModel] | None" = None,
    rate_limit: RateLimit | None = None,
    inline: bool = False,
    preview: Callable[[dict[str, Any]], Any] | None = None,
    cost_usd: "Decimal | str | int" = 0,
    compensate: Compensate | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a function as a tool. Its docstring is the description the model reads.
    `describe` says how a call's effect reads to an approver: a format string over the
    parsed arguments ("Send {subject!r} to {to}") or a function of them. `output_schema`
    (a JSON schema or a pydantic model) is what its result must match: a result that does
    not is a guard step, and the model gets an error instead. `rate_limit` caps its calls
    across all runs (tools with side effects only: those go step by step through the
    ledger, where the limit is counted). `inline`: an instant tool without side effects,
    called on the worker's thread with no deadline enforced (a call that can block, wait on
    the network or take long must not say so: nothing could abandon it). `preview`: a
    read-only function of the parsed arguments saying what a call would change
    (agentkit/previews.py), shown to the approver of a gated call and checked again when
    they decide. `cost_usd`: what each call costs (a paid API), charged to the run; a call
    may return Charged instead. `compensate`: the call that undoes a committed call of this
    tool (Compensate), offered when a run fails or is cancelled after it committed."""
    per_call = call_cost(cost_usd)

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        tool_name = name or fn.__name__
        if rate_limit is not None and reversible and blast == Blast.NONE:
            raise ValueError(f"tool {tool_name}: rate limits apply to tools with side effects")
        if inline and not (reversible and blast == Blast.NONE):
            # An effect's call goes through the ledger, whose "outcome unknown" needs a
            # deadline that can end the call.
            raise ValueError(f"tool {tool_name}: only a tool without side effects runs inline")
        if compensate is not None and reversible and blast == Blast.NONE:
            raise ValueError(f"tool {tool_name}: only a call with side effects has one to undo")
        sig = inspect.signature(fn)
        fields: dict[str, Any] = {}
        wants_ctx = False
        for pname, param in sig.parameters.items():
            if pname == "ctx":
                wants_ctx = True
                continue
            annotation = param.annotation if param.annotation is not inspect._empty else Any
            default = ... if param.default is inspect._empty else param.default
            fields[pname] = (annotation, default)
        model = pydantic.create_model(
            f"{tool_name}_args",
            __config__=pydantic.ConfigDict(extra="forbid", strict=False),
            **fields,
        )
        REGISTRY[tool_name] = Tool(
            name=tool_name,
            description=inspect.cleandoc(fn.__doc__ or tool_name),
            fn=fn,
            args_model=model,
            reversible=reversible,
            blast=blast,
            accepts_idempotency_key=accepts_idempotency_key,
            timeout_seconds=timeout_seconds,
            retry=retry or RetryPolicy(),
            on_reject=on_reject,
            wants_ctx=wants_ctx,
            describe=describe,
            output_schema=json_schema(output_schema) if output_schema is not None else _returns(fn),
            rate_limit=rate_limit,
            inline=inline,
            preview=preview,
            cost_usd=per_call,
            compensate=compensate,
        )
        return fn

    return register


def _returns(fn: Callable[..., Any]) -> dict[str, Any] | None:
    """The output schema a tool's return annotation gives: a pydantic model or a TypedDict
    says what the result must be; anything else (dict, Any, none) says nothing checkable."""
    try:
        returns = typing.get_type_hints(fn).get("return")
    except (NameError, TypeError):
        return None
    if isinstance(returns, type) and (
        issubclass(returns, pydantic.BaseModel) or typing_extensions.is_typeddict(returns)
    ):
        return pydantic.TypeAdapter(returns).json_schema()
    return None


# Where a name the registry lacks may still be found: tools listed at run time, from MCP
# servers agents declare (agentkit/mcp.py adds its resolver when imported).
RESOLVERS: list[Callable[[str], "Tool | None"]] = []


def get_tool(name: str) -> Tool | None:
    found = REGISTRY.get(name)
    if found is None:
        for resolve in RESOLVERS:
            found = resolve(name)
            if found is not None:
                break
    return found


# Shared by the workers through Redis when there is one (agentkit/circuit.py).
breaker = CircuitBreaker()
