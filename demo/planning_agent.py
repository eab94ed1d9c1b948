"""The planning refund desk: it submits a plan (look the order up, refund at most the asked
amount, e-mail the customer) before acting, so an operator approves the whole run on one
screen (approvals/plans/models.py). Inside the approved plan the lookup and the e-mail run without a
new gate; the refund, a high-risk call, still gets its own approval (a plan never covers what
a person must decide every time). Then it also copies the support team by e-mail, which it
did not plan: that call is gated again as a deviation ("more calls than planned")."""

from decimal import Decimal

from django import forms

from agentkit.agents import Agent, GateRules, Limits, register
from agentkit.llm.scripted import text, tool_use

from .agents import last_tool_result, outcome_of

SUPPORT = "support@example.com"


class PlannedRefundInput(forms.Form):
    # Order 13 (689.00): a partial refund well within what is left on it.
    order_id = forms.IntegerField(min_value=1, max_value=2**63 - 1, initial=13)
    amount = forms.DecimalField(
        min_value=Decimal("0.01"), max_digits=10, decimal_places=2, initial=Decimal("40.00")
    )
    reason = forms.CharField(max_length=500, initial="Arrived damaged")


def subject(data: dict) -> str:
    return f"Your refund for order {data['order_id']}"


def plan_steps(data: dict) -> list[dict]:
    order = data["order_id"]
    return [
        {"tool": "lookup_order", "args": {"order_id": order}, "note": "check what is left"},
        {
            "tool": "issue_refund",
            "envelope": [
                {"arg": "order_id", "op": "eq", "value": order},
                {"arg": "amount", "op": "lte", "value": str(data["amount"])},
            ],
            "note": "at most the amount asked",
        },
        {
            "tool": "send_customer_email",
            "envelope": [{"arg": "subject", "op": "eq", "value": subject(data)}],
            "note": "tell the customer",
        },
    ]


def planned_refund_script(data: dict) -> list:
    def refund(messages):
        order = last_tool_result(messages)
        if not isinstance(order, dict):
            return [text(f"I could not look up order {data['order_id']}: {order}. No refund.")]
        return [
            text(f"Order {data['order_id']} found; refunding {data['amount']} as planned."),
            tool_use(
                "issue_refund",
                order_id=data["order_id"],
                amount=str(data["amount"]),
                reason=data["reason"],
            ),
        ]

    def tell_customer(messages):
        made = outcome_of(messages, "issue_refund")
        if made is None or "refund_id" not in made.result:
            return [text(f"No refund was issued: {made.value if made else 'not asked'}")]
        order = outcome_of(messages, "lookup_order")
        to = (order.result if order else {}).get("customer_email", "customer@example.com")
        return [
            tool_use(
                "send_customer_email",
                to=to,
                subject=subject(data),
                body=f"We refunded {made.result['amount']} for order {data['order_id']}.",
            )
        ]

    def copy_support(messages):
        return [
            text("I will also let the support team know (this was not in the plan)."),
            tool_use(
                "send_customer_email",
                to=SUPPORT,
                subject=f"Refund made on order {data['order_id']}",
                body=f"Refunded {data['amount']} on order {data['order_id']}: {data['reason']}.",
            ),
        ]

    def conclude(messages):
        made = outcome_of(messages, "issue_refund")
        copied = outcome_of(messages, "send_customer_email")
        said = (
            f"Refund issued: {made.result['amount']} on order {data['order_id']}"
            if made and "refund_id" in made.result
            else "No refund was issued"
        )
        told = "support was copied" if copied and copied.ok else "support was not copied"
        return [text(f"{said}; {told}.")]

    return [
        [
            text("Before acting, here is my plan."),
            tool_use(
                "submit_plan",
                goal=f"Refund {data['amount']} on order {data['order_id']} and tell the customer",
                steps=plan_steps(data),
            ),
        ],
        [
            text("The plan is approved. Checking the order."),
            tool_use("lookup_order", order_id=data["order_id"]),
        ],
        refund,
        tell_customer,
        copy_support,
        conclude,
    ]


register(
    Agent(
        slug="planned-refund-desk",
        title="Refund desk (plans first)",
        description=(
            "Submits a plan (look up, refund, e-mail) for one approval before acting; calls "
            "that follow the plan run without a new gate, deviations are gated again."
        ),
        model="claude-sonnet-4-6",
        system_prompt=(
            "You handle refund requests. First submit a plan with submit_plan: look the order "
            "up, refund at most the amount asked, e-mail the customer. Then follow it."
        ),
        tools=("lookup_order", "issue_refund", "send_customer_email"),
        plans=True,
        input_form=PlannedRefundInput,
        prompt=lambda d: f"Refund {d['amount']} on order {d['order_id']}. Reason: {d['reason']}",
        script=planned_refund_script,
        summary=lambda d: f"order {d['order_id']} · planned refund {d['amount']}",
        limits=Limits(max_steps=10, max_cost_usd=Decimal("0.50"), max_seconds=300),
        gates=GateRules(thresholds={"issue_refund": {"amount": Decimal(500)}}),
    )
)
