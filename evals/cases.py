"""Cases from people's decisions: one decided approval of a proposed call becomes a case; and
from verifier failures: a final answer the agent's verifier failed becomes a case whose
expected outcome is an answer that passes it.

A case is built from what the run's timeline recorded when the model proposed the call: the
conversation before that model turn (engine.conversation up to the step before it) and the
engine's state there. The person's verdict is the expected outcome: the call as proposed
(approved), the call with their arguments (edited), or not that call (rejected).
"""

import copy
from dataclasses import dataclass
from datetime import date, datetime, time
from uuid import UUID

from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.utils import timezone

from accounts import teams
from approvals.models import Approval
from runs import engine
from runs.models import Step

from .models import Case, Dataset

DECIDED = (Approval.Status.APPROVED, Approval.Status.REJECTED)


class CaseError(ValueError):
    """Why this approval cannot become a case, in words for the operator."""


def decisions_reaching(user) -> QuerySet:
    """The decided calls `user` may turn into cases: people's decisions (not a rule's or a
    grant's), of calls a model proposed, on agents the user may launch."""
    agents = teams.scope(user, teams.Power.LAUNCH)
    if agents.nothing:
        return Approval.objects.none()
    return Approval.objects.filter(
        agents.q("run__agent"),
        kind=Approval.Kind.ACTION,
        status__in=DECIDED,
        decided_by__isnull=False,
        llm_seq__gt=0,
    )


def verifier_failures_reaching(user) -> QuerySet:
    """The failed checks of a final answer (verify steps) `user` may turn into cases, on
    agents the user may launch. A verifier that checks a tool call (`after_tools`) is left
    out: its case would be a call, not an answer."""
    agents = teams.scope(user, teams.Power.LAUNCH)
    if agents.nothing:
        return Step.objects.none()
    return Step.objects.filter(
        agents.q("run__agent"), kind=Step.Kind.VERIFY, data__passed=False
    ).exclude(data__has_key="after")


def verdict_of(approval: Approval) -> str:
    if approval.status == Approval.Status.REJECTED:
        return Case.Verdict.REJECTED
    edited = approval.edited_args is not None and approval.edited_args != approval.args
    return Case.Verdict.EDITED if edited else Case.Verdict.APPROVED


@dataclass
class DecisionFilter:
    """A filtered list of decisions (the bulk "add to dataset"); empty fields filter nothing."""

    verdict: str = ""  # one of Case.Verdict, or "" for every decision
    tool: str = ""
    since: date | None = None
    until: date | None = None
    run: UUID | None = None  # the decisions of one run (its page's "add to a dataset")

    def failures(self, steps: QuerySet) -> list[Step]:
        """The verifier failures among `steps` the filter selects (`tool` names a verifier)."""
        if self.verdict not in ("", Case.Verdict.VERIFIER_FAILED):
            return []
        if self.run:
            steps = steps.filter(run_id=self.run)
        if self.tool:
            steps = steps.filter(data__verifier=self.tool)
        steps = self._within(steps, "created_at")
        return list(steps.select_related("run").order_by("created_at", "pk"))

    def _within(self, rows: QuerySet, field: str) -> QuerySet:
        """`rows` whose `field` falls between since and until (whole days, local time)."""
        zone = timezone.get_current_timezone()
        if self.since:
            rows = rows.filter(**{f"{field}__gte": datetime.combine(self.since, time.min, zone)})
        if self.until:
            rows = rows.filter(**{f"{field}__lte": datetime.combine(self.until, time.max, zone)})
        return rows

    def apply(self, approvals: QuerySet) -> list[Approval]:
        if self.verdict == Case.Verdict.VERIFIER_FAILED:
            return []
        if self.run:
            approvals = approvals.filter(run_id=self.run)
        if self.verdict == Case.Verdict.REJECTED:
            approvals = approvals.filter(status=Approval.Status.REJECTED)
        elif self.verdict == Case.Verdict.APPROVED:
            approvals = approvals.filter(status=Approval.Status.APPROVED)
        if self.tool:
            approvals = approvals.filter(tool=self.tool)
        approvals = self._within(approvals, "decided_at")
        approvals = approvals.select_related("run", "decided_by").order_by("decided_at", "pk")
        if self.verdict in (Case.Verdict.EDITED, Case.Verdict.APPROVED):
            # Edited or not is a comparison of two JSON values: decided here, not in SQL.
            return [a for a in approvals if verdict_of(a) == self.verdict]
        return list(approvals)


def build_case(dataset: Dataset, approval: Approval, *, by=None) -> Case:
    """The case `approval` makes for `dataset` (not saved)."""
    run = approval.run
    if run.agent != dataset.agent:
        raise CaseError(f"the call was made by {run.agent}; the dataset is {dataset.agent}'s")
    if approval.kind != Approval.Kind.ACTION or approval.status not in DECIDED:
        raise CaseError("only an approved or rejected call can become a case")
    if not approval.llm_seq:
        raise CaseError("no model turn proposed this call")
    before = approval.llm_seq - 1
    checkpoint = run.checkpoints.filter(seq__lte=before).order_by("-seq").first()
    if checkpoint is None:
        raise CaseError(f"run {run.pk} has no checkpoint before step #{approval.llm_seq}")
    state = copy.deepcopy(checkpoint.state)
    # The model is about to be asked: nothing pending or being checked at that point.
    state["pending"] = []
    state.pop("checking", None)
    verdict = verdict_of(approval)
    return Case(
        dataset=dataset,
        source_run=run,
        source_approval=approval,
        input=run.input,
        context=engine.conversation(run, upto_seq=before),
        state=state,
        tool=approval.tool,
        proposed_args=approval.args,
        verdict=verdict,
        expected_args=approval.final_args if verdict != Case.Verdict.REJECTED else approval.args,
        reason=approval.reason,
        decided_by=approval.decided_by.get_username() if approval.decided_by else "",
        decided_at=approval.decided_at,
        added_by=by,
    )


def build_verifier_case(dataset: Dataset, failed: Step, *, by=None) -> Case:
    """The case a failed check of a final answer makes for `dataset` (not saved): the
    conversation before the model turn that gave the answer, and the answer."""
    run = failed.run
    if run.agent != dataset.agent:
        raise CaseError(f"the answer was {run.agent}'s; the dataset is {dataset.agent}'s")
    if failed.kind != Step.Kind.VERIFY or failed.data.get("passed") or "after" in failed.data:
        raise CaseError("only a final answer its verifier failed can become a case")
    answered = run.steps.filter(kind=Step.Kind.LLM, seq__lt=failed.seq).order_by("-seq").first()
    if answered is None:
        raise CaseError(f"no model turn gave the answer checked at step #{failed.seq}")
    before = answered.seq - 1
    checkpoint = run.checkpoints.filter(seq__lte=before).order_by("-seq").first()
    if checkpoint is None:
        raise CaseError(f"run {run.pk} has no checkpoint before step #{answered.seq}")
    state = copy.deepcopy(checkpoint.state)
    state["pending"] = []
    state.pop("checking", None)
    said = engine.conversation(run, upto_seq=answered.seq)[-1]["content"]
    answer = "\n".join(
        b.get("text", "") for b in said if isinstance(b, dict) and b.get("type") == "text"
    )
    return Case(
        dataset=dataset,
        source_run=run,
        source_seq=failed.seq,
        input=run.input,
        context=engine.conversation(run, upto_seq=before),
        state=state,
        tool=failed.data.get("verifier", "")[:64],
        proposed_args={"answer": answer},
        verdict=Case.Verdict.VERIFIER_FAILED,
        reason=failed.data.get("reason", ""),
        decided_by="verifier",
        decided_at=failed.created_at,
        added_by=by,
    )


def add_failures(dataset: Dataset, failed_steps, *, by=None) -> tuple[list[Case], list[str]]:
    """Add each verifier failure as a case, as `add` does decisions."""
    held = set(
        dataset.cases.filter(source_seq__isnull=False).values_list("source_run_id", "source_seq")
    )
    return _add_each(
        dataset,
        failed_steps,
        key=lambda failed: (failed.run_id, failed.seq),
        held=held,
        where=lambda failed: f"check #{failed.seq} of run {failed.run_id}",
        build=build_verifier_case,
        by=by,
    )


def add(dataset: Dataset, approvals, *, by=None) -> tuple[list[Case], list[str]]:
    """Add each approval as a case: (cases added, why others were not). An approval already
    in the dataset is skipped, not an error (a bulk add of an overlapping filter)."""
    held = set(dataset.cases.values_list("source_approval_id", flat=True))
    return _add_each(
        dataset,
        approvals,
        key=lambda approval: approval.pk,
        held=held,
        where=lambda approval: f"{approval.tool} of run {approval.run_id}",
        build=build_case,
        by=by,
    )


def _add_each(dataset, sources, *, key, held, where, build, by) -> tuple[list[Case], list[str]]:
    """A case from each source not in the dataset yet (`held`: the keys of those that are,
    read once), each saved on its own: one that cannot be a case is said why, not fatal."""
    added, skipped = [], []
    for source in sources:
        if key(source) in held:
            skipped.append(f"{where(source)}: already in {dataset.name}")
            continue
        try:
            case = build(dataset, source, by=by)
            with transaction.atomic():
                case.save()
        except CaseError as exc:
            skipped.append(f"{where(source)}: {exc}")
        except IntegrityError:  # added meanwhile by someone else
            skipped.append(f"{where(source)}: already in {dataset.name}")
        else:
            held.add(key(source))
            added.append(case)
    return added, skipped
