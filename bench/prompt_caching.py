"""Tokens and cost of a 10-turn run with and without prompt caching, on the fake Messages API.

    uv run python bench/prompt_caching.py [--turns 10] [--system-tokens 2000]

Runs, in this process (runs.engine.advance, the real anthropic SDK against
tests/support/fake_messages_api.py, which caches by prefix hash as the real API does, with its
1024-token minimum), a run of a bench agent whose system prompt is about `--system-tokens`
tokens (a policy text, as production prompts are) and whose model looks up one order per turn
for `--turns` turns, then answers. Once with ANTHROPIC_PROMPT_CACHING on, once off. Prints per
case the run's input tokens (of which read from / written to the cache), output tokens, cost
(claude-sonnet-4 prices: 3 USD per million input tokens, 3.75 a cache write, 0.30 a read) and
what caching saved. Migrates the configured database first (embedded SQLite by default).
"""

import argparse
import os
import sys
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")
os.environ.setdefault("DEBUG", "false")
os.environ.setdefault("SECRET_KEY", "bench-only-not-a-secret")

import django

django.setup()

from dataclasses import replace  # noqa: E402

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402

from agentkit.agents import get_agent, register  # noqa: E402
from agentkit.llm import Usage  # noqa: E402
from runs import engine, queue  # noqa: E402
from runs.models import Run  # noqa: E402
from tests.support.fake_messages_api import FakeMessagesServer, reply, text, tool_use  # noqa: E402

POLICY = (
    "Orders are reviewed against the refund policy: a delivered order may be refunded within "
    "thirty days when the item arrived damaged, late by more than five working days, or not "
    "as described; the amount never exceeds what was paid less earlier refunds. "
)


def one_run(agent, server: FakeMessagesServer, turns: int) -> Run:
    server.push(
        *(
            reply([text(f"Order {40 + i}."), tool_use("lookup_order", order_id=40 + i)])
            for i in range(turns)
        ),
        reply([text("Reviewed; none needs a refund.")]),
    )
    data, errors = agent.validate_input({"first_order": 40, "count": turns})
    assert not errors, errors
    run = engine.launch(agent=agent, input=data, provider="anthropic")
    while engine.advance(run.pk, time_slice=60) == "requeued":
        pass
    run.refresh_from_db()
    if run.status != Run.Status.SUCCEEDED:
        sys.exit(f"run ended {run.status}: {run.termination_reason}")
    return run


def figures(run: Run) -> tuple[Usage, Decimal, Decimal]:
    usage = Usage()
    saved = Decimal(0)
    for data in run.steps.filter(kind="llm").values_list("data", flat=True):
        u = Usage(**data["usage"])
        usage = Usage(
            usage.input_tokens + u.input_tokens,
            usage.output_tokens + u.output_tokens,
            usage.cache_creation_input_tokens + u.cache_creation_input_tokens,
            usage.cache_read_input_tokens + u.cache_read_input_tokens,
        )
        saved += Decimal(data.get("cache_saved_usd", "0"))
    return usage, run.cost_usd, saved


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--system-tokens", type=int, default=2000)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    queue.enqueue = lambda run_id: None  # this process advances the runs itself
    base = get_agent("order-review")
    policy = POLICY * max(1, args.system_tokens * 4 // len(POLICY))
    agent = register(
        replace(
            base,
            slug="bench-caching",
            system_prompt=base.system_prompt + "\n\n" + policy,
            context_budget_tokens=0,
            summarise_context=False,
            limits=replace(base.limits, max_steps=args.turns + 5, max_cost_usd=Decimal(5)),
        )
    )
    with FakeMessagesServer() as server:
        settings.ANTHROPIC_API_KEY = "bench"
        settings.ANTHROPIC_BASE_URL = server.base_url
        print(f"{args.turns} turns + the answer, system prompt ~{len(policy) // 4} tokens")
        results = {}
        for caching in (False, True):
            settings.ANTHROPIC_PROMPT_CACHING = caching
            server.cache.clear()
            usage, cost, saved = figures(one_run(agent, server, args.turns))
            results[caching] = cost
            print(
                f"caching {'on ' if caching else 'off'}: input {usage.total_input_tokens} tokens "
                f"({usage.cache_read_input_tokens} read from cache, "
                f"{usage.cache_creation_input_tokens} written, {usage.input_tokens} uncached), "
                f"output {usage.output_tokens}, cost ${cost:.6f}, saved by caching ${saved:.6f}"
            )
        print(f"cost with caching: {results[True] / results[False] * 100:.1f} % of without")


if __name__ == "__main__":
    main()
