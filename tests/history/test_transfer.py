"""Export on one installation, import on another: the chain is checked, the run replays."""

import json
import os
import subprocess
import sys
import uuid
from decimal import Decimal

import pytest
from django.conf import settings
from django.urls import reverse
from django.utils.dateparse import parse_datetime

from history import transfer
from history.transfer import ImportRefused, import_run
from runs.models import Run, Step

pytestmark = pytest.mark.django_db


def exported(client, user, run: Run, fmt: str = "jsonl") -> str:
    client.force_login(user)
    response = client.get(reverse("runs:export", args=[run.pk, fmt]))
    assert response.status_code == 200
    return b"".join(response.streaming_content).decode()


# Migrates a second, fresh installation: minutes on a loaded runner.
@pytest.mark.timeout(900)
def test_an_export_imported_on_a_fresh_installation_replays_the_same(
    client,
    refunded,
    operator,
    tmp_path,
):
    path = tmp_path / "run.jsonl"
    path.write_text(exported(client, operator, refunded))
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'laptop.sqlite3'}",
        "DJANGO_SETTINGS_MODULE": "agentops.settings",
    }
    env.pop("REDIS_URL", None)

    def manage(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=settings.BASE_DIR,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )

    assert manage("migrate", "-v0").returncode == 0
    done = manage("import_run", str(path), "--replay")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"imported run {refunded.pk} (refund-desk, {refunded.last_seq} steps, succeeded)" in (
        done.stdout
    )
    assert f"identical: {refunded.last_seq} of {refunded.last_seq} step(s)" in done.stdout
    again = manage("import_run", str(path))
    assert again.returncode != 0 and "is here already" in again.stderr


def rehomed(doc: dict) -> dict:
    """The export as another installation's run would be: a new id, the chain rebuilt over
    it (this database keeps the original, and a step's hash covers its run's id)."""
    doc = json.loads(json.dumps(doc))
    doc["run"]["id"] = str(uuid.uuid4())
    prev = ""
    for record in doc["steps"]:
        step = Step(
            run_id=doc["run"]["id"],
            seq=record["seq"],
            kind=record["kind"],
            data=record["data"],
            cost_usd=Decimal(str(record["cost_usd"])),
            created_at=parse_datetime(record["created_at"]),
            prev_hash=prev,
        )
        record["prev_hash"], record["hash"] = prev, step.compute_hash()
        prev = record["hash"]
    return doc


def test_an_import_keeps_the_timeline_and_its_chain(client, refunded, operator):
    doc = json.loads(exported(client, operator, refunded, fmt="json"))
    with pytest.raises(ImportRefused, match="is here already"):
        import_run(json.dumps(doc))
    with pytest.raises(ImportRefused, match="step #1 was changed"):
        # The steps' hashes are over the run's own id: another id breaks them all.
        import_run(json.dumps({**doc, "run": {**doc["run"], "id": str(uuid.uuid4())}}))

    doc = rehomed(doc)
    imported = import_run(json.dumps(doc))
    assert list(imported.steps.order_by("seq").values_list("seq", "kind", "data", "hash")) == [
        (s["seq"], s["kind"], s["data"], s["hash"]) for s in doc["steps"]
    ]
    assert list(imported.checkpoints.order_by("seq").values_list("seq", "state")) == list(
        refunded.checkpoints.order_by("seq").values_list("seq", "state")
    )
    assert imported.verify_chain() == (True, None)
    assert (imported.status, imported.output, imported.last_seq) == (
        Run.Status.SUCCEEDED,
        refunded.output,
        refunded.last_seq,
    )
    assert imported.source == "imported; " + (refunded.source or "no source")


def _lines(doc: dict) -> list[dict]:
    """The JSON export as the JSON Lines export's records."""
    return [
        {"run": doc["run"]},
        *doc["steps"],
        *({"checkpoint": c} for c in doc["checkpoints"]),
    ]


def _text(lines: list[dict]) -> str:
    return "\n".join(json.dumps(line) for line in lines)


def _spliced(lines: list[dict]) -> None:
    """Step #3 chained to a foreign step, with its own hash and every later one recomputed:
    each step's hash is its content's, only the link to step #2 is wrong."""
    run = transfer._run(lines[0]["run"])
    lines[3]["prev_hash"] = "f" * 64
    for i in range(3, len(lines)):
        if "seq" not in lines[i]:
            break
        if i > 3:
            lines[i]["prev_hash"] = lines[i - 1]["hash"]
        lines[i]["hash"] = transfer._step(run, lines[i]).compute_hash()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda ls: ls[3]["data"].update(args={"order_id": 1}), "step #3 was changed"),
        (_spliced, "step #3 is not chained"),
        (lambda ls: ls.pop(2), "step #2 is missing"),
        (lambda ls: [ls.pop(i) for i in range(len(ls) - 1, 0, -1) if "seq" in ls[i]][:1], "holds"),
        (lambda ls: ls[0].pop("run"), "does not start with a run record"),
        (lambda ls: ls[0]["run"].update(status="exploded"), "unknown status"),
    ],
)
def test_a_changed_or_truncated_file_is_refused_and_nothing_is_stored(
    client,
    refunded,
    operator,
    change,
    message,
):
    doc = json.loads(exported(client, operator, refunded, fmt="json"))
    import_run(_text(_lines(rehomed(doc))))  # unchanged, it imports
    lines = _lines(rehomed(doc))
    change(lines)
    runs = Run.objects.count()
    with pytest.raises(ImportRefused, match=message):
        import_run(_text(lines))
    assert Run.objects.count() == runs


def test_garbage_is_refused_with_a_message():
    for text, message in [
        ("", "empty"),
        ("not json", "line 1 is not JSON"),
        ('{"run": {"id": "x"}}', "not a run export"),
    ]:
        with pytest.raises(ImportRefused, match=message):
            import_run(text)


def test_an_active_run_is_imported_as_cancelled(client, operator, no_enqueue):
    from tests.demo.test_demo_flows import launch_default

    run = launch_default("sql-analyst", operator)
    imported = import_run(json.dumps(rehomed(json.loads(exported(client, operator, run, "json")))))
    assert imported.status == Run.Status.CANCELLED
    assert "imported while queued" in imported.status_detail
