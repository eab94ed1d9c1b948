"""`manage.py regression run DATASET [--agent SLUG] [--fail-under 0.9]`: replay a regression
dataset against an agent's current version, print a table, and exit 1 when the pass rate is
below the bar (for CI); `manage.py regression compare A B`: two regression runs side by side.
Exit 2: the run could not start (unknown dataset or agent, no cases)."""

import json

from django.core.management.base import BaseCommand, CommandError

from evals.comparison import NotComparable, compare
from evals.models import Dataset, RegressionRun
from evals.rehearsal import PROVIDERS, RegressionError, start


def _rate(value: str) -> float:
    try:
        rate = float(value)
    except ValueError:
        raise CommandError(f"--fail-under {value!r} is not a number", returncode=2) from None
    if not 0 <= rate <= 1:
        raise CommandError("--fail-under is a pass rate between 0 and 1", returncode=2)
    return rate


class Command(BaseCommand):
    help = "Regression runs of datasets built from people's decisions."

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True)
        run = actions.add_parser("run", help="replay every case of a dataset")
        run.add_argument("dataset", help="the dataset's name")
        run.add_argument("--agent", default="", help="the agent to replay (the dataset's)")
        run.add_argument("--provider", default="", choices=("", *PROVIDERS))
        run.add_argument("--fail-under", default="0", help="the pass rate below which to exit 1")
        run.add_argument("--json", action="store_true", help="print the results as JSON")
        both = actions.add_parser("compare", help="two regression runs side by side")
        both.add_argument("before", type=int)
        both.add_argument("after", type=int)

    def handle(self, *args, action: str, **options):
        if action == "compare":
            return self._compare(options["before"], options["after"])
        bar = _rate(options["fail_under"])
        dataset = Dataset.objects.filter(name=options["dataset"]).first()
        if dataset is None:
            known = ", ".join(Dataset.objects.values_list("name", flat=True)[:20]) or "none"
            raise CommandError(
                f"no dataset {options['dataset']!r} (datasets: {known})", returncode=2
            )
        try:
            regression = start(dataset, options["agent"], provider=options["provider"])
        except RegressionError as exc:
            raise CommandError(str(exc), returncode=2) from None
        if regression.error:
            raise CommandError(f"the regression run failed: {regression.error}", returncode=2)
        results = list(regression.results.select_related("case"))
        if options["json"]:
            self.stdout.write(json.dumps(_as_dict(regression, results), indent=2))
        else:
            self._table(regression, results)
        if regression.pass_rate < bar:
            self.stderr.write(f"pass rate {regression.pass_rate:.1%} is below {bar:.1%}")
            raise SystemExit(1)

    def _table(self, regression: RegressionRun, results) -> None:
        self.stdout.write(f"{'case':>6}  {'expected':9} {'tool':22} {'result':6}  detail")
        for r in results:
            case = r.case
            line = f"{r.case_id or '-':>6}  {case.verdict if case else '-':9} "
            line += f"{(case.tool if case else '')[:22]:22} {r.outcome:6}  {r.detail[:100]}"
            style = self.style.SUCCESS if r.passed else self.style.ERROR
            self.stdout.write(style(line))
            for row in r.diff:
                self.stdout.write(
                    f"{'':8}{row['field']}: expected {json.dumps(row['expected'])}, "
                    f"proposed {json.dumps(row['proposed'])}"
                )
        v = regression.version
        self.stdout.write(
            f"regression run {regression.pk}: {regression.passed}/{regression.cases} passed "
            f"({regression.pass_rate:.1%}) · {regression.agent} version {regression.fingerprint} "
            f"(model {v.get('model')}, prompt {v.get('system_prompt_hash')}, tools "
            f"{v.get('tools_hash')}) · {regression.provider} · cost ${regression.cost_usd:.4f}"
        )

    def _compare(self, before_id: int, after_id: int) -> None:
        runs = RegressionRun.objects.in_bulk([before_id, after_id])
        missing = [str(i) for i in (before_id, after_id) if i not in runs]
        if missing:
            raise CommandError(f"no regression run {', '.join(missing)}", returncode=2)
        before, after = runs[before_id], runs[after_id]
        try:
            rows = compare(before, after)
        except NotComparable as exc:
            raise CommandError(str(exc), returncode=2) from None
        self.stdout.write(f"{'case':32} {before.fingerprint:>12} {after.fingerprint:>12}  change")
        for row in rows:
            was = row.before.outcome if row.before else "-"
            now = row.after.outcome if row.after else "-"
            self.stdout.write(f"{row.label[:32]:32} {was:>12} {now:>12}  {row.change}")
        self.stdout.write(
            f"{'pass rate':32} {before.passed}/{before.cases:>10} {after.passed}/{after.cases:>10}"
        )


def _as_dict(regression: RegressionRun, results) -> dict:
    return {
        "regression_run": regression.pk,
        "dataset": regression.dataset.name,
        "agent": regression.agent,
        "version": regression.version,
        "fingerprint": regression.fingerprint,
        "passed": regression.passed,
        "cases": regression.cases,
        "pass_rate": regression.pass_rate,
        "cost_usd": str(regression.cost_usd),
        "results": [
            {
                "case": r.case_id,
                "outcome": r.outcome,
                "proposed_tool": r.proposed_tool,
                "proposed_args": r.proposed_args,
                "diff": r.diff,
                "detail": r.detail,
            }
            for r in results
        ],
    }
