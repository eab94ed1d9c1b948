"""Two regression runs of one dataset side by side: each case's outcome under both versions,
and which cases got better or worse."""

from dataclasses import dataclass

from .models import CaseResult, RegressionRun


@dataclass
class Row:
    case_id: int | None
    label: str
    before: CaseResult | None
    after: CaseResult | None

    @property
    def change(self) -> str:
        was = self.before.outcome if self.before else None
        now = self.after.outcome if self.after else None
        if was == now:
            return "same"
        if now == CaseResult.Outcome.PASS:
            return "fixed"
        if was == CaseResult.Outcome.PASS:
            return "broken"
        return "changed"


class NotComparable(ValueError):
    pass


def compare(before: RegressionRun, after: RegressionRun) -> list[Row]:
    """A row per case of either run, in the dataset's order."""
    if before.dataset_id != after.dataset_id:
        raise NotComparable("the two regression runs replayed different datasets")
    mine = {r.case_id: r for r in before.results.select_related("case")}
    theirs = {r.case_id: r for r in after.results.select_related("case")}
    rows = []
    for case_id in sorted(set(mine) | set(theirs), key=lambda i: (i is None, i or 0)):
        result = mine.get(case_id) or theirs.get(case_id)
        case = result.case
        label = f"#{case_id} {case.verdict} {case.tool}" if case else "(deleted case)"
        rows.append(Row(case_id, label, mine.get(case_id), theirs.get(case_id)))
    return rows
