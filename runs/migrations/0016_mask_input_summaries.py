"""Runs launched before run inputs were masked kept their one-line input summary in clear: for
every run whose agent had a PII policy, the summary is made again from the masked input, as a
launch makes it now (runs/engine/loop.py). The input itself is untouched (the run page, the
API and exports mask it as they show it). Nothing to undo: the clear summary is not kept."""

from django.db import migrations

from agentkit import pii
from agentkit.agents import SUMMARY_CHARS, SUMMARY_FIELDS, get_agent

BATCH = 500


def summary(agent_slug: str, masked: dict) -> str:
    agent = get_agent(agent_slug)
    if agent is not None:
        return agent.summarize(masked)
    # An agent no longer in the catalogue: the catalogue's generic summary.
    text = " · ".join(
        f"{name.replace('_', ' ')} {value}"
        for name, value in list(masked.items())[:SUMMARY_FIELDS]
        if value not in (None, "")
    )
    text = " ".join(text.split())
    return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1] + "…"


def forwards(apps, schema_editor):
    Run = apps.get_model("runs", "Run")
    changed = []
    runs = Run.objects.filter(agent_config__has_key="pii").only(
        "agent", "agent_config", "input", "input_summary"
    )
    for run in runs.iterator(chunk_size=BATCH):
        if not isinstance(run.input, dict):
            continue
        new = summary(run.agent, pii.masker(run.agent_config.get("pii"))(run.input))
        if new != run.input_summary:
            run.input_summary = new
            changed.append(run)
        if len(changed) >= BATCH:
            Run.objects.bulk_update(changed, ["input_summary"])
            changed = []
    Run.objects.bulk_update(changed, ["input_summary"])


class Migration(migrations.Migration):
    dependencies = [("runs", "0015_agent_day_spend")]
    operations = [migrations.RunPython(forwards, migrations.RunPython.noop, elidable=True)]
