"""Cross-run drift: an agent whose recent runs differ from the runs before them.
Why and how: docs/design/modules.md."""

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal

from django.conf import settings
from django.db.models import Count, F, Window
from django.db.models.functions import MD5, RowNumber
from django.utils import timezone

from .models import Run, Step

LOOK_BACK = timedelta(days=90)  # runs older than this are no one's baseline
REPEATED = 3
COST_RISE = Decimal("1.5")
MIN_COST_DELTA = Decimal("0.01")
STEPS_CHANGE = 0.5
MIN_STEPS_DELTA = 2
RATE_RISE = 0.2
MIN_DECISIONS = 3
MIX_DISTANCE = 0.3
MIN_TOOL_CALLS = 5
UNWATCHED = (Run.Trigger.SCHEDULE, Run.Trigger.WEBHOOK, Run.Trigger.CHAINED)


@dataclass(frozen=True)
class Finding:
    metric: str  # cost, steps, failures, rejections, tools, repeated_output
    recent: str
    baseline: str
    words: str


@dataclass
class Drift:
    agent: str
    recent_runs: int
    baseline_runs: int
    findings: list[Finding] = field(default_factory=list)


@dataclass
class _Window:
    runs: list[dict] = field(default_factory=list)
    tools: Counter = field(default_factory=Counter)
    approved: int = 0
    rejected: int = 0

    @property
    def size(self) -> int:
        return len(self.runs)

    def mean(self, key: str) -> Decimal:
        return sum((Decimal(r[key]) for r in self.runs), Decimal(0)) / self.size

    @property
    def failure_rate(self) -> float:
        return sum(r["status"] == Run.Status.FAILED for r in self.runs) / self.size

    @property
    def rejection_rate(self) -> float | None:
        decided = self.approved + self.rejected
        return self.rejected / decided if decided else None


def window_size() -> int:
    return max(2, int(settings.AGENTOPS["DRIFT_RUNS"]))


def flags(runs, now=None) -> list[Drift]:
    """The agents of `runs` (a queryset: the viewer's runs) whose recent runs drifted, each
    with the findings and their numbers; agents without a finding are left out."""
    now = now or timezone.now()
    n = window_size()
    rows = list(
        runs.filter(status__in=Run.TERMINAL_STATUSES, finished_at__gte=now - LOOK_BACK)
        .annotate(
            place=Window(RowNumber(), partition_by=[F("agent")], order_by=F("finished_at").desc()),
            output_md5=MD5("output"),
        )
        .filter(place__lte=2 * n)
        .values("id", "agent", "status", "trigger", "cost_usd", "step_count", "output_md5", "place")
        .order_by("agent", "place")
    )
    windows: dict[str, tuple[_Window, _Window]] = defaultdict(lambda: (_Window(), _Window()))
    where = {}
    for row in rows:
        side = windows[row["agent"]][0 if row["place"] <= n else 1]
        side.runs.append(row)
        where[row["id"]] = side
    for run_id, tool, count in (
        Step.objects.filter(run_id__in=list(where), kind=Step.Kind.TOOL)
        .values_list("run_id", "data__tool")
        .annotate(n=Count("*"))
        .order_by()
    ):
        where[run_id].tools[str(tool)] += count
    for run_id, decision in Step.objects.filter(
        run_id__in=list(where), kind=Step.Kind.DECISION, data__kind="action"
    ).values_list("run_id", "data__decision"):
        if decision == "approve":
            where[run_id].approved += 1
        elif decision == "reject":
            where[run_id].rejected += 1
    found = []
    for agent, (recent, baseline) in sorted(windows.items()):
        drift = Drift(agent, recent.size, baseline.size, _repeated(recent))
        if baseline.size == n:
            drift.findings += _compared(recent, baseline)
        if drift.findings:
            found.append(drift)
    return found


def _compared(recent: _Window, base: _Window) -> list[Finding]:
    found = []
    cost, was = recent.mean("cost_usd"), base.mean("cost_usd")
    if cost - was >= MIN_COST_DELTA and cost >= was * COST_RISE:
        found.append(
            Finding(
                "cost",
                f"{cost:.4f}",
                f"{was:.4f}",
                f"cost per run {cost:.4f} USD, was {was:.4f} ({_change(cost, was)})",
            )
        )
    steps, was = recent.mean("step_count"), base.mean("step_count")
    if abs(steps - was) >= MIN_STEPS_DELTA and abs(steps - was) >= was * Decimal(STEPS_CHANGE):
        found.append(
            Finding(
                "steps",
                f"{steps:.1f}",
                f"{was:.1f}",
                f"model calls per run {steps:.1f}, was {was:.1f} ({_change(steps, was)})",
            )
        )
    rate, was = recent.failure_rate, base.failure_rate
    if rate - was >= RATE_RISE:
        found.append(
            Finding(
                "failures", f"{rate:.0%}", f"{was:.0%}", f"runs failed {rate:.0%}, was {was:.0%}"
            )
        )
    rate, was = recent.rejection_rate, base.rejection_rate
    if (
        rate is not None
        and recent.approved + recent.rejected >= MIN_DECISIONS
        and rate - (was or 0) >= RATE_RISE
    ):
        before = "no decision" if was is None else f"{was:.0%}"
        found.append(
            Finding(
                "rejections",
                f"{rate:.0%}",
                before,
                f"gated calls rejected {rate:.0%} ({recent.rejected} of "
                f"{recent.approved + recent.rejected}), was {before}",
            )
        )
    found += _tool_mix(recent.tools, base.tools)
    return found


def _tool_mix(recent: Counter, base: Counter) -> list[Finding]:
    total, was_total = sum(recent.values()), sum(base.values())
    if total < MIN_TOOL_CALLS or was_total < MIN_TOOL_CALLS:
        return []
    shares = {t: (recent[t] / total, base[t] / was_total) for t in set(recent) | set(base)}
    distance = sum(abs(now - was) for now, was in shares.values()) / 2
    if distance < MIX_DISTANCE:
        return []
    moved = sorted(shares.items(), key=lambda item: (-abs(item[1][0] - item[1][1]), item[0]))
    words = ", ".join(f"{t} {now:.0%} (was {was:.0%})" for t, (now, was) in moved[:3])
    return [Finding("tools", f"{distance:.2f}", "0", f"tool mix moved {distance:.2f}: {words}")]


def _repeated(recent: _Window) -> list[Finding]:
    last = [
        r for r in recent.runs if r["status"] == Run.Status.SUCCEEDED and r["trigger"] in UNWATCHED
    ][:REPEATED]
    outputs = {r["output_md5"] for r in last}
    empty = MD5_OF_EMPTY
    if len(last) < REPEATED or len(outputs) != 1 or outputs == {empty}:
        return []
    return [
        Finding(
            "repeated_output",
            f"{REPEATED} runs",
            "",
            f"the last {REPEATED} unattended successful runs gave the very same output, verbatim",
        )
    ]


MD5_OF_EMPTY = "d41d8cd98f00b204e9800998ecf8427e"


def _change(now: Decimal, was: Decimal) -> str:
    if not was:
        return "none before"
    return f"{(now - was) * 100 / was:+.0f}%"
