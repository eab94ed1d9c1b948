"""Migrations run on data and run backwards: a data migration is checked on the rows it was
written for (migrate to the one before, insert, migrate, assert), and every app of ours goes
to zero and back, so the backward paths (the append-only triggers' included) are run too.
On SQLite and, in CI's second pass, on Postgres."""

from datetime import UTC, timedelta
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.db.models import Sum
from django.db.utils import DatabaseError
from django.utils import timezone
from django_test_migrations.migrator import Migrator

from tests.conftest import on_postgres

pytestmark = pytest.mark.django_db(transaction=True)

# Apps with migrations of ours, dependents first (migrating an app to zero takes what depends
# on it along).
USD = Decimal("0.000001")
OUR_APPS = ["triggers", "gateway", "demo", "approvals", "runs"]


@pytest.fixture(scope="module")
def _schema(django_db_blocker):
    """Whether a migrator test left the schema behind the latest migrations. The migrator
    tests start from an empty database (they drop every table), so the schema is only brought
    back up when something next needs it: a test of this module that is not a migrator test,
    or the tests of other modules after this one. Bringing it back after each migrator test
    (django-test-migrations' `migrator`) ran all the migrations once a test."""
    schema = {"behind": False}
    yield schema
    if schema["behind"]:
        with django_db_blocker.unblock():
            _catch_up()


def _catch_up() -> None:
    # As the migrator's reset then a transactional test's teardown leave it: every table,
    # empty but for what post_migrate adds.
    call_command("migrate", verbosity=0)
    call_command("flush", interactive=False, verbosity=0)


@pytest.fixture
def migrator(transactional_db, _schema):
    # Not the plugin's `migrator`: its factory brings the schema back after every test.
    _schema["behind"] = True
    return Migrator()


@pytest.fixture(autouse=True)
def _latest_schema_unless_a_migrator_test(request, _schema, django_db_blocker):
    if _schema["behind"] and "migrator" not in request.fixturenames:
        with django_db_blocker.unblock():
            _catch_up()
        _schema["behind"] = False


def _run(Run, **fields):
    return Run.objects.create(
        agent="refund-desk",
        agent_config={},
        provider="scripted",
        max_steps=10,
        max_cost_usd=Decimal("1"),
        max_seconds=600,
        max_consecutive_errors=3,
        **fields,
    )


def test_runs_0004_backfills_outcome_counters_summary_and_waiting_time(migrator):
    old = migrator.apply_initial_migration(("runs", "0003_steps_append_only"))
    Run, Step = old.apps.get_model("runs", "Run"), old.apps.get_model("runs", "Step")
    t0 = timezone.now() - timedelta(hours=1)
    run = _run(
        Run,
        input={"order_id": 13, "amount": "689.00", "reason": "damaged   lid"},
        status="succeeded",
        termination_reason="completed",
    )
    timeline = [
        ("status", {"from": "running", "to": "waiting"}, 0),
        ("decision", {"status": "approved", "edited_args": {"amount": "500"}}, 90),
        ("status", {"from": "waiting", "to": "queued"}, 90),
        ("tool", {"tool": "issue_refund", "is_error": True, "error": "refund API timed out"}, 100),
        ("status", {"from": "running", "to": "waiting"}, 110),
        ("decision", {"status": "rejected", "reason": "no"}, 140),
        ("status", {"from": "waiting", "to": "queued"}, 140),
        ("tool", {"tool": "send_email", "is_error": True, "error": "rejected by arthur: no"}, 141),
        ("decision", {"status": "answered", "answer": "order 13"}, 150),
        ("decision", {"status": "expired"}, 160),
        ("decision", {"status": "approved", "edited_args": None}, 170),
        ("status", {"from": "running", "to": "waiting"}, 180),  # still waiting at the end
    ]
    for seq, (kind, data, at) in enumerate(timeline, start=1):
        Step.objects.create(
            run=run, seq=seq, kind=kind, data=data, created_at=t0 + timedelta(seconds=at), hash="h"
        )
    untouched = _run(Run, input=[], status="queued")

    new = migrator.apply_tested_migration(("runs", "0004_run_outcome_and_working_time"))
    Run = new.apps.get_model("runs", "Run")
    run = Run.objects.get(pk=run.pk)
    assert (run.approved_count, run.edited_count, run.rejected_count) == (1, 1, 1)
    assert (run.answered_count, run.expired_count) == (1, 1)
    assert run.tool_failed_count == 1  # the timeout; the rejected e-mail is not a failure
    assert run.seconds_waited == pytest.approx(90 + 30)
    assert run.waiting_since == t0 + timedelta(seconds=180)
    # The input's fields in the order the database keeps them (jsonb sorts keys).
    assert set(run.input_summary.split(" · ")) == {
        "order id 13",
        "amount 689.00",
        "reason damaged lid",
    }
    untouched = Run.objects.get(pk=untouched.pk)
    assert (untouched.approved_count, untouched.seconds_waited, untouched.input_summary) == (
        0,
        0,
        "",
    )


def test_runs_0015_sums_the_recorded_model_steps_and_adds_each_new_one(migrator):
    old = migrator.apply_initial_migration(("runs", "0014_model_stop_reasons"))
    Run, Step = old.apps.get_model("runs", "Run"), old.apps.get_model("runs", "Step")
    day = timezone.now().replace(hour=12) - timedelta(days=2)
    refunds = _run(Run, input={}, status="queued")
    sql = _run(Run, input={}, status="queued")
    Run.objects.filter(pk=sql.pk).update(agent="sql")
    recorded = [
        (refunds, "llm", "0.010000", 100, 10, day),
        (refunds, "llm", "0.020000", 200, 20, day + timedelta(hours=1)),
        (refunds, "tool", "0", 0, 0, day + timedelta(hours=2)),  # not a model call
        (refunds, "llm", "0.400000", 4000, 400, day + timedelta(days=1)),
        (sql, "llm", "0.003000", 30, 3, day),
    ]
    for seq, (run, kind, cost, tokens_in, tokens_out, at) in enumerate(recorded, start=1):
        Step.objects.create(
            run=run,
            seq=seq,
            kind=kind,
            data={},
            created_at=at,
            hash="h",
            cost_usd=Decimal(cost),
            tokens_in=tokens_in,
            tokens_out=tokens_out,
        )

    new = migrator.apply_tested_migration(("runs", "0015_agent_day_spend"))
    Spend, Step = new.apps.get_model("runs", "AgentDaySpend"), new.apps.get_model("runs", "Step")

    def spent() -> dict:
        rows = Spend.objects.values("agent", "day").annotate(
            calls=Sum("calls"), tokens=Sum("tokens_in"), cost=Sum("cost_usd")
        )
        return {
            (r["agent"], r["day"]): (r["calls"], r["tokens"], Decimal(r["cost"]).quantize(USD))
            for r in rows
        }

    first, second = day.date(), day.date() + timedelta(days=1)
    assert spent() == {
        ("refund-desk", first): (2, 300, Decimal("0.030000")),
        ("refund-desk", second): (1, 4000, Decimal("0.400000")),
        ("sql", first): (1, 30, Decimal("0.003000")),
    }
    # From here on the trigger adds each model step as it is inserted.
    Step.objects.create(
        run_id=sql.pk,
        seq=6,
        kind="llm",
        data={},
        created_at=day,
        hash="h",
        cost_usd=Decimal("0.5"),
        tokens_in=5,
        tokens_out=1,
    )
    Step.objects.create(run_id=sql.pk, seq=7, kind="llm_error", data={}, created_at=day, hash="h")
    assert spent()[("sql", first)] == (2, 35, Decimal("0.503000"))


def test_runs_0021_sums_again_with_summaries_verifier_calls_tool_costs_and_the_cache(migrator):
    old = migrator.apply_initial_migration(("runs", "0017_agent_day_spend_storage"))
    Run, Step = old.apps.get_model("runs", "Run"), old.apps.get_model("runs", "Step")
    day = timezone.now().replace(hour=12) - timedelta(days=1)
    run = _run(Run, input={}, status="queued")
    recorded = [
        ("llm", "0.010000", 100, 10),
        ("summary", "0.002000", 20, 2),  # left out before 0018
        ("verify", "0.003000", 30, 3),  # left out before 0018
        ("tool", "0.500000", 0, 0),  # a paid tool call
        ("tool", "0", 0, 0),  # a free one: not counted
    ]
    for seq, (kind, cost, tokens_in, tokens_out) in enumerate(recorded, start=1):
        Step.objects.create(
            run=run,
            seq=seq,
            kind=kind,
            data={},
            created_at=day,
            hash="h",
            cost_usd=Decimal(cost),
            tokens_in=tokens_in,
            tokens_out=tokens_out,
        )
    Spend = old.apps.get_model("runs", "AgentDaySpend")
    assert Spend.objects.aggregate(c=Sum("cost_usd"))["c"] == Decimal("0.01")

    new = migrator.apply_tested_migration(("runs", "0021_spend_counts_every_charged_step"))
    Spend, Step = new.apps.get_model("runs", "AgentDaySpend"), new.apps.get_model("runs", "Step")

    def spent() -> tuple:
        row = Spend.objects.aggregate(
            calls=Sum("calls"),
            tokens=Sum("tokens_in"),
            cost=Sum("cost_usd"),
            tool=Sum("tool_cost_usd"),
        )
        return row["calls"], row["tokens"], Decimal(row["cost"]).quantize(USD), row["tool"]

    assert spent() == (3, 150, Decimal("0.515000"), Decimal("0.5"))
    # From here on the trigger adds them as they are inserted.
    Step.objects.create(
        run_id=run.pk,
        seq=6,
        kind="verify",
        data={},
        created_at=day,
        hash="h",
        cost_usd=Decimal("0.001"),
        tokens_in=1,
        tokens_out=1,
    )
    assert spent() == (4, 151, Decimal("0.516000"), Decimal("0.5"))
    # The prompt-cache figures of 0020 are still added, and summed again from the steps.
    cached = {"usage": {"cache_read_input_tokens": 40, "cache_creation_input_tokens": 7}}
    Step.objects.create(
        run_id=run.pk,
        seq=7,
        kind="llm",
        data={**cached, "cache_saved_usd": "0.000100"},
        created_at=day,
        hash="h",
        cost_usd=Decimal("0.001"),
        tokens_in=50,
        tokens_out=1,
    )
    cache = Spend.objects.aggregate(
        read=Sum("cache_read_tokens"), write=Sum("cache_write_tokens"), saved=Sum("cache_saved_usd")
    )
    assert (cache["read"], cache["write"], Decimal(cache["saved"]).quantize(USD)) == (
        40,
        7,
        Decimal("0.000100"),
    )


def test_runs_0016_masks_the_input_summaries_of_runs_with_a_pii_policy(migrator):
    old = migrator.apply_initial_migration(("runs", "0015_agent_day_spend"))
    Run = old.apps.get_model("runs", "Run")
    message = {"message": "Call me on +44 20 7946 0958 or mail jo@example.com"}
    policy = {"detectors": ["email", "phone"], "patterns": {}}
    guarded = _run(Run, input=message, input_summary="message Call me on +44 20 7946 0958")
    Run.objects.filter(pk=guarded.pk).update(agent="customer-reply", agent_config={"pii": policy})
    gone = _run(Run, input=message, input_summary="clear")
    Run.objects.filter(pk=gone.pk).update(agent="retired-agent", agent_config={"pii": policy})
    unguarded = _run(Run, input=message, input_summary="message Call me on +44 20 7946 0958")

    new = migrator.apply_tested_migration(("runs", "0016_mask_input_summaries"))
    Run = new.apps.get_model("runs", "Run")
    for run in (guarded, gone):
        summary = Run.objects.get(pk=run.pk).input_summary
        assert "7946" not in summary and "jo@example.com" not in summary, summary
        assert summary.startswith("message Call me on"), summary
    assert Run.objects.get(pk=unguarded.pk).input_summary.endswith("7946 0958")
    assert Run.objects.get(pk=guarded.pk).input == message  # the input itself is kept


def _tables() -> set[str]:
    return set(connection.introspection.table_names())


def _trigger_names() -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT tgname FROM pg_trigger WHERE NOT tgisinternal")
        return {name for (name,) in cursor.fetchall()}


# Every migration of ours twice on SQLite: about 30 s on a quiet runner, 75 s at load 11.
@pytest.mark.timeout(900)
def test_every_app_of_ours_migrates_to_zero_and_back():
    before = _tables()
    for app in OUR_APPS:
        call_command("migrate", app, "zero", verbosity=0)
    left = {t for t in _tables() if t.split("_", 1)[0] in OUR_APPS}
    assert left == set(), f"tables left after migrating to zero: {sorted(left)}"
    call_command("migrate", verbosity=0)
    assert _tables() == before


@on_postgres
def test_the_append_only_triggers_go_with_their_migrations_and_come_back():
    triggers = {"runs_step_append_only"}
    assert triggers <= _trigger_names()
    call_command("migrate", "runs", "0002", verbosity=0)
    assert not triggers & _trigger_names()
    call_command("migrate", verbosity=0)
    assert triggers <= _trigger_names()

    # And they work again: a step can be written, never rewritten.
    from runs.models import Run, Step

    run = _run(Run, input={}, status="queued")
    step = Step.objects.create(run=run, seq=1, kind="status", data={"to": "queued"}, hash="h")
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        Step.objects.filter(pk=step.pk).update(data={"to": "running"})


def test_accounts_0004_puts_an_existing_install_in_one_team_with_everyone_s_powers(migrator):
    old = migrator.apply_initial_migration(("accounts", "0003_teams"))
    User = old.apps.get_model("accounts", "User")
    Group = old.apps.get_model("auth", "Group")
    Run = old.apps.get_model("runs", "Run")

    def user(name: str, *roles: str, **fields):
        made = User.objects.create(username=name, **fields)
        made.groups.add(*(Group.objects.get_or_create(name=r)[0] for r in roles))
        return made

    user("olivia", "operator")
    user("april", "approver", "viewer")
    user("adam", "admin")
    user("root", is_superuser=True)
    user("nora")
    _run(Run, input={})  # refund-desk
    retired = _run(Run, input={})
    Run.objects.filter(pk=retired.pk).update(agent="retired-agent")  # no longer in the code

    new = migrator.apply_tested_migration(("accounts", "0004_default_team_for_existing_installs"))
    Team = new.apps.get_model("accounts", "Team")
    (team,) = Team.objects.all()
    assert (team.name, team.slug) == ("Everyone", "everyone")
    agents = set(team.agents.values_list("agent", flat=True))
    assert {"refund-desk", "sql-analyst", "retired-agent"} <= agents
    powers = {
        m.user.username: (m.launch, m.decide, m.administer)
        for m in team.members.select_related("user")
    }
    assert powers == {
        "olivia": (True, False, False),
        "april": (False, True, False),
        "adam": (True, True, True),
        "root": (True, True, True),
        "nora": (False, False, False),
    }


def test_accounts_0004_gives_a_fresh_install_no_team(migrator):
    migrator.apply_initial_migration(("accounts", "0003_teams"))
    new = migrator.apply_tested_migration(("accounts", "0004_default_team_for_existing_installs"))
    assert not new.apps.get_model("accounts", "Team").objects.exists()


@on_postgres
@pytest.mark.parametrize("table", ["runs_step", "runs_checkpoint"])
def test_the_timeline_has_no_index_on_run_id_alone(table):
    # UNIQUE(run_id, seq)'s index serves every lookup by run; one on run_id alone only costs.
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s", [table])
        indexes = dict(cursor.fetchall())
    assert any("(run_id, seq, run_created)" in d for d in indexes.values()), indexes
    assert not [n for n, d in indexes.items() if d.endswith("(run_id)")], indexes


def test_runs_0028_keeps_every_step_and_checkpoint_with_its_runs_creation_and_goes_back(migrator):
    old = migrator.apply_initial_migration(
        [
            ("runs", "0027_step_checkpoint_no_run_index"),
            ("approvals", "0016_refuse_truncate_plans_and_links"),
        ]
    )
    Run, Step = old.apps.get_model("runs", "Run"), old.apps.get_model("runs", "Step")
    Checkpoint = old.apps.get_model("runs", "Checkpoint")
    runs = [_run(Run, input={}, status="queued") for _ in range(2)]
    Run.objects.filter(pk=runs[0].pk).update(created_at=timezone.now() - timedelta(days=45))
    steps = {}
    for run in runs:
        for seq in (1, 2, 3):
            step = Step.objects.create(
                run=run, seq=seq, kind="status", data={"n": seq}, hash=f"h{seq}"
            )
            steps[step.pk] = (run.pk, seq)
        Checkpoint.objects.create(run=run, seq=3, state={"at": 3})
    created = dict(Run.objects.values_list("pk", "created_at"))

    new = migrator.apply_tested_migration(("runs", "0028_partitioned_timeline"))
    Step, Checkpoint = new.apps.get_model("runs", "Step"), new.apps.get_model("runs", "Checkpoint")
    rows = Step.objects.values_list("pk", "run_id", "seq", "run_created")
    assert {pk: (run, seq) for pk, run, seq, _ in rows} == steps
    assert all(at == created[run] for _, run, _, at in rows)
    assert all(created[c.run_id] == c.run_created for c in Checkpoint.objects.all())
    # Ids go on from where they were.
    later = Step.objects.create(
        run_id=runs[1].pk, seq=4, kind="status", data={}, hash="h4", run_created=created[runs[1].pk]
    )
    assert later.pk > max(steps)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT tableoid::regclass::text FROM runs_step WHERE run_id = %s", [runs[0].pk]
            )
            month = created[runs[0].pk].astimezone(UTC).strftime("%Y_%m")
            assert {name for (name,) in cursor.fetchall()} == {f"runs_step_p{month}"}
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
            Step.objects.filter(pk=later.pk).update(data={"forged": True})

    back = migrator.apply_tested_migration(("runs", "0027_step_checkpoint_no_run_index"))
    Step = back.apps.get_model("runs", "Step")
    assert set(Step.objects.values_list("pk", flat=True)) == {*steps, later.pk}
    if connection.vendor == "postgresql":
        assert "runs_step_append_only" in _trigger_names()
        assert not {t for t in _tables() if t.startswith("runs_step_p")}
