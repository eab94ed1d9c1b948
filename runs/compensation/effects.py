"""What a run's committed effects are, and whether they may be compensated: the read side of
compensation (runs/compensation/models.py asks for them). Imports no engine: the run page's
rendering, which live consumers use, reads it."""

from dataclasses import dataclass

from django.core import checks

from agentkit.tools import REGISTRY, get_tool

from ..models import Compensation, Run, SideEffect


@dataclass
class Effect:
    """A committed effect of a run as the run page, the audit and the API show it."""

    effect: SideEffect
    described: str
    compensate_tool: str  # the declared compensating tool; "" when it declares none
    latest: Compensation | None  # its newest compensation request, if any
    compensations: list[Compensation]

    @property
    def state(self) -> str:
        """ "not compensable", "not compensated", "pending", "compensated" or "failed"."""
        if self.latest is not None:
            return self.latest.status
        return "not compensated" if self.compensate_tool else "not compensable"

    @property
    def requestable(self) -> bool:
        return bool(self.compensate_tool) and self.state in ("not compensated", "failed")


def why_not_offered(run: Run) -> str:
    """ "" when compensation may be asked for this run; otherwise why not, in words."""
    if run.trigger in (Run.Trigger.COMPENSATION, Run.Trigger.REPLAY):
        return f"a {run.trigger} run is not compensated itself"
    if run.status not in (Run.Status.FAILED, Run.Status.CANCELLED):
        return (
            f"the run is {run.status}: compensation is offered once a run has failed or been "
            "cancelled"
        )
    return ""


def declares_any(run: Run) -> bool:
    """Whether any of the run's tools declares a compensation (no query)."""
    for meta in run.agent_config.get("tools", []):
        tool = REGISTRY.get(meta.get("name"))
        if tool is not None and tool.compensate is not None:
            return True
    return False


def effects(run: Run) -> list[Effect]:
    """The run's committed effects, oldest first, each with its compensations."""
    committed = list(run.side_effects.filter(status=SideEffect.Status.COMMITTED).order_by("id"))
    by_effect: dict[int, list[Compensation]] = {}
    for comp in Compensation.objects.filter(run=run).select_related("requested_by"):
        by_effect.setdefault(comp.effect_id, []).append(comp)
    shown = []
    for effect in committed:
        tool = get_tool(effect.tool)
        comps = by_effect.get(effect.pk, [])
        shown.append(
            Effect(
                effect=effect,
                described=tool.effect(effect.args) if tool else effect.tool,
                compensate_tool=tool.compensate.tool if tool and tool.compensate else "",
                latest=comps[-1] if comps else None,
                compensations=comps,
            )
        )
    return shown


def check_declarations(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """The system check (runs/apps.py registers it): every declared compensation names a
    registered tool with side effects, whether or not an agent uses the tool yet (agents'
    own tools are checked when they are registered: agentkit.agents.register)."""
    errors: list[checks.CheckMessage] = []
    for name, tool in sorted(REGISTRY.items()):
        if tool.compensate is None:
            continue
        target = REGISTRY.get(tool.compensate.tool)
        if target is None or not target.has_side_effects:
            why = "is not a registered tool" if target is None else "has no side effects"
            errors.append(
                checks.Error(
                    f"tool {name!r} is compensated by {tool.compensate.tool!r}, which {why}",
                    hint="A compensation is a tool with side effects that undoes the call.",
                    obj=name,
                    id="runs.E001",
                )
            )
    return errors
