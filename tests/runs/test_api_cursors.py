"""A run's timeline and checkpoints over the API page by keyset cursor (runs/api_paging.py):
a walk by `next_cursor` sees every row once, rows added between two pages never shift the
pages after them, a cursor the list cannot read is a 422 naming `cursor`, and the count stops
at its cap."""

import pytest

from runs import api_paging
from runs.models import Checkpoint
from tests.runs.factories import add_steps, make_run

pytestmark = pytest.mark.django_db


def walk(client, path: str, limit: int, key: str = "seq") -> list:
    seen, cursor = [], None
    while True:
        query = {"limit": limit, **({"cursor": cursor} if cursor else {})}
        page = client.get(path, query)
        assert page.status_code == 200, page.content
        seen += [item[key] for item in page.json()["items"]]
        cursor = page.json()["next_cursor"]
        if cursor is None:
            return seen


def add_checkpoints(run, seqs) -> None:
    for seq in seqs:
        Checkpoint.objects.create(run=run, seq=seq, state={})


def test_runs_launched_between_two_pages_shift_nothing(as_viewer, operator, no_enqueue):
    runs = [make_run(operator) for _ in range(5)]
    newest_first = [str(r.pk) for r in reversed(runs)]
    first = as_viewer.get("/api/runs", {"limit": 2}).json()
    assert [r["id"] for r in first["items"]] == newest_first[:2]
    make_run(operator)  # newest: at the top of the list, before every page read so far
    by_cursor = as_viewer.get("/api/runs", {"limit": 2, "cursor": first["next_cursor"]}).json()
    assert [r["id"] for r in by_cursor["items"]] == newest_first[2:4]
    # What OFFSET paging did: the second page repeats the first page's last run.
    by_offset = as_viewer.get("/api/runs", {"limit": 2, "offset": 2}).json()
    assert [r["id"] for r in by_offset["items"]] == newest_first[1:3]


def test_checkpoints_walk_by_cursor_while_the_run_goes_on(as_viewer, operator, no_enqueue):
    run = make_run(operator)
    add_checkpoints(run, range(10, 17))
    path = f"/api/runs/{run.pk}/checkpoints"
    expected = list(run.checkpoints.order_by("seq").values_list("seq", flat=True))
    assert walk(as_viewer, path, 2) == expected

    first = as_viewer.get(path, {"limit": 3}).json()
    assert first["count"] == len(expected) and first["count_capped"] is False
    add_checkpoints(run, [17, 18])  # the run goes on between two pages
    second = as_viewer.get(path, {"limit": 3, "cursor": first["next_cursor"]}).json()
    assert [c["seq"] for c in second["items"]] == expected[3:6]
    assert walk(as_viewer, path, 4) == [*expected, 17, 18]


def test_steps_walk_by_cursor_as_by_after(as_viewer, operator, no_enqueue):
    run = make_run(operator)
    add_steps(run, 7)
    path = f"/api/runs/{run.pk}/steps"
    expected = list(run.steps.order_by("seq").values_list("seq", flat=True))
    assert walk(as_viewer, path, 3) == expected
    first = as_viewer.get(path, {"limit": 3}).json()
    by_after = as_viewer.get(path, {"limit": 3, "after": first["items"][-1]["seq"]}).json()
    by_cursor = as_viewer.get(path, {"limit": 3, "cursor": first["next_cursor"]}).json()
    assert by_cursor["items"] == by_after["items"]
    last = as_viewer.get(path, {"limit": 100}).json()
    assert last["has_more"] is False and last["next_cursor"] is None


@pytest.mark.parametrize(
    "path", ["/api/runs", "/api/runs/{run}/checkpoints", "/api/runs/{run}/steps"]
)
@pytest.mark.parametrize("cursor", ["bm9wZQ", "%%", "x" * 201, api_paging.encode("-1")])
def test_a_cursor_the_list_cannot_read_is_a_422_naming_it(
    as_viewer, operator, no_enqueue, path, cursor
):
    run = make_run(operator)
    response = as_viewer.get(path.format(run=run.pk), {"cursor": cursor})
    assert response.status_code == 422, response.content
    assert response.json()["errors"][0]["loc"] == ["query", "cursor"]
    assert response.json()["errors"][0]["msg"]


def test_steps_refuse_after_and_cursor_together(as_viewer, operator, no_enqueue):
    run = make_run(operator)
    response = as_viewer.get(
        f"/api/runs/{run.pk}/steps", {"after": 1, "cursor": api_paging.encode("1")}
    )
    assert response.status_code == 422
    assert "not both" in response.json()["errors"][0]["msg"]


def test_the_checkpoint_count_stops_at_its_cap(as_viewer, operator, no_enqueue, monkeypatch):
    run = make_run(operator)
    add_checkpoints(run, range(10, 15))
    monkeypatch.setattr(api_paging, "COUNT_CAP", 3)
    body = as_viewer.get(f"/api/runs/{run.pk}/checkpoints", {"limit": 1}).json()
    assert body["count"] == 3 and body["count_capped"] is True


def test_the_schema_documents_the_cursors(client):
    paths = client.get("/api/openapi.json").json()["paths"]
    for path in ("/api/runs", "/api/runs/{run_id}/checkpoints", "/api/runs/{run_id}/steps",
                 "/api/approvals", "/api/grants"):  # fmt: skip
        params = {p["name"]: p for p in paths[path]["get"]["parameters"]}
        assert "cursor" in params, path
