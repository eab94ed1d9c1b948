r"""Fill a Postgres database with many finished runs and steps, for the list-page benchmarks.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentops_bench \
        uv run python bench/seed_runs.py --runs 100000 --steps-per-run 10

Rows are generated inside Postgres (generate_series), so 1 000 000 steps take seconds, not
minutes. The data is shaped like real runs (statuses, agents, triggers, launchers, inputs,
outputs, costs) but the step hashes are not a valid chain: these runs are for list pages.
Existing runs are left alone; re-running adds more. Ends with VACUUM ANALYZE of both tables,
as autovacuum would after a bulk load.
"""

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")

import django

django.setup()

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

RUNS_SQL = """
INSERT INTO runs_run (
    id, agent, agent_config, provider, input, status, status_detail, termination_reason, output,
    trigger, launched_by_id, max_steps, max_cost_usd, max_seconds, max_consecutive_errors,
    step_count, error_count, consecutive_errors, retry_count, tokens_in, tokens_out, cost_usd,
    last_seq, last_hash, version, lease_owner, created_at, started_at, finished_at, updated_at,
    approved_count, edited_count, rejected_count, answered_count, expired_count,
    tool_failed_count, input_summary, seconds_waited, source, traceparent)
SELECT
    gen_random_uuid(),
    (ARRAY['sql-analyst', 'refund-desk'])[1 + i %% 2],
    '{"slug": "bench", "title": "Bench agent", "tools": [], "model": "claude-sonnet-4-6",
      "system_prompt": ""}'::jsonb,
    'scripted',
    jsonb_build_object('order_id', i, 'reason', 'bench run ' || i, 'question', 'revenue ' || i),
    s.status,
    '',
    CASE s.status WHEN 'succeeded' THEN 'completed' WHEN 'failed' THEN 'max_cost'
        WHEN 'cancelled' THEN 'cancelled' ELSE '' END,
    CASE s.status WHEN 'succeeded' THEN 'Answer for run ' || i ELSE '' END,
    (ARRAY['form', 'api', 'schedule', 'webhook'])[1 + i %% 4],
    %(user_id)s,
    20, 1.0, 600, 3,
    %(steps)s / 2, 0, 0, 0, 1000 + i %% 500, 200 + i %% 100, (i %% 1000) / 10000.0,
    %(steps)s, md5(i::text), 1, '',
    now() - make_interval(secs => i * 30),
    now() - make_interval(secs => i * 30),
    CASE WHEN s.status IN ('succeeded', 'failed', 'cancelled')
        THEN now() - make_interval(secs => i * 30 - 20) END,
    now() - make_interval(secs => i * 30),
    (i %% 3 = 0)::int, (i %% 11 = 0)::int, (i %% 7 = 0)::int, 0, (i %% 53 = 0)::int,
    (i %% 17 = 0)::int, 'order ' || i || ' · bench run ' || i, 0, 'bench seed', ''
FROM generate_series(%(start)s, %(stop)s) AS i
CROSS JOIN LATERAL (SELECT CASE
    WHEN i %% 100 = 0 THEN 'running' WHEN i %% 100 = 1 THEN 'waiting'
    WHEN i %% 100 = 2 THEN 'queued' WHEN i %% 10 = 3 THEN 'failed'
    WHEN i %% 25 = 4 THEN 'cancelled' ELSE 'succeeded' END AS status) s
"""

STEPS_SQL = """
INSERT INTO runs_step (run_id, seq, kind, data, cost_usd, tokens_in, tokens_out, latency_ms,
                       created_at, prev_hash, hash)
SELECT r.id, n,
    (ARRAY['llm', 'tool'])[1 + n %% 2],
    CASE WHEN n %% 2 = 1
        THEN jsonb_build_object('content', jsonb_build_array(jsonb_build_object(
            'type', 'text', 'text', 'Thinking about step ' || n)), 'model', 'claude-sonnet-4-6')
        ELSE jsonb_build_object('tool', 'lookup_order', 'tool_use_id', 'toolu_' || n,
            'args', jsonb_build_object('order_id', n), 'result', jsonb_build_object('ok', true),
            'is_error', false) END,
    0.001, 100, 20, 300, r.created_at + make_interval(secs => n), md5((n - 1)::text), md5(n::text)
FROM runs_run r CROSS JOIN generate_series(1, r.last_seq) AS n
WHERE r.id = ANY(%s)
"""


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--steps-per-run", type=int, default=10)
    args = parser.parse_args()
    if not settings.IS_POSTGRES:
        sys.exit("point DATABASE_URL at Postgres")
    call_command("migrate", verbosity=0)
    from django.contrib.auth import get_user_model

    user, _ = get_user_model().objects.get_or_create(username="bench")
    started = time.monotonic()
    batch = 20_000
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM runs_run")
        offset = cur.fetchone()[0]
        for start in range(1, args.runs + 1, batch):
            stop = min(args.runs, start + batch - 1)
            cur.execute("SELECT now()")
            cur.execute(
                RUNS_SQL + " RETURNING id",
                {
                    "user_id": user.pk,
                    "steps": args.steps_per_run,
                    "start": offset + start,
                    "stop": offset + stop,
                },
            )
            ids = [row[0] for row in cur.fetchall()]
            cur.execute(STEPS_SQL, [ids])
            print(f"  {stop:>8} runs", flush=True)
        # What autovacuum does to a production table soon after a bulk load: statistics, and
        # the visibility map that lets counts read an index alone. Without it the figures are
        # those of a database nobody has ever vacuumed.
        cur.execute("VACUUM ANALYZE runs_run")
        cur.execute("VACUUM ANALYZE runs_step")
        cur.execute("SELECT count(*) FROM runs_run")
        runs = cur.fetchone()[0]
        cur.execute("SELECT count(*) FROM runs_step")
        steps = cur.fetchone()[0]
    print(f"seeded in {time.monotonic() - started:.1f}s: {runs} runs, {steps} steps in total")


if __name__ == "__main__":
    main()
