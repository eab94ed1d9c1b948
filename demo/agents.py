"""The demo agents: an SQL analyst, a refund desk (its default refund is gated), an order
inquiry desk that asks the operator instead of guessing, and a complaint triage whose verdict
launches the refund desk (a chained run)."""

import json
import re
from datetime import timedelta
from decimal import Decimal

from django import forms

import approvals.gates  # noqa: F401  (registers ask_operator)
from agentops.agents import (
    Agent,
    FollowUp,
    GateRules,
    LearningRules,
    Limits,
    RunResult,
    register,
)
from agentops.llm.scripted import text, tool_use

from . import tools


def last_tool_result(messages: list[dict]) -> dict | list | str | None:
    """The newest tool result in the conversation, parsed from JSON where it is JSON."""
    for message in reversed(messages):
        if message["role"] != "user" or not isinstance(message["content"], list):
            continue
        for block in reversed(message["content"]):
            if block.get("type") == "tool_result":
                content = block.get("content")
                if isinstance(content, list):
                    content = "".join(c.get("text", "") for c in content)
                try:
                    return json.loads(content)
                except (TypeError, ValueError):
                    return content
    return None


# --- SQL analyst --------------------------------------------------------------------------------
class SqlAnalystInput(forms.Form):
    question = forms.CharField(
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 3}),
        initial="Which product categories bring in the most revenue?",
        help_text="What you want to know about the shop's customers, orders and products.",
    )
    report_to = forms.EmailField(
        label="E-mail the report to", initial="analytics@example.com", max_length=254
    )


REVENUE_SQL = (
    "SELECT p.category, COUNT(*) AS orders, ROUND(SUM(o.total), 2) AS revenue "
    "FROM orders o JOIN products p ON p.id = o.product_id "
    "GROUP BY p.category ORDER BY revenue DESC"
)


def sql_analyst_script(data: dict) -> list:
    def report(messages):
        result = last_tool_result(messages) or {}
        lines = [" | ".join(str(c) for c in row) for row in result.get("rows", [])]
        body = f"Question: {data['question']}\n\n" + " | ".join(result.get("columns", [])) + "\n"
        body += "\n".join(lines)
        return [
            text("The query answered the question. I'll e-mail the report."),
            tool_use(
                "email_report", to=data["report_to"], subject="Revenue by category", body=body
            ),
        ]

    return [
        [text("I'll look at the schema first."), tool_use("list_tables")],
        [tool_use("describe_table", table="orders"), tool_use("describe_table", table="products")],
        [
            text("Orders join products on product_id; I'll sum totals by category."),
            tool_use("run_query", sql=REVENUE_SQL),
        ],
        report,
        [text("Report sent. Revenue by category is in the e-mail.")],
    ]


register(
    Agent(
        slug="sql-analyst",
        title="SQL analyst",
        description="Answers questions over the shop database and e-mails a report.",
        model="claude-sonnet-4-6",
        system_prompt=(
            "You are a careful data analyst. Explore the schema before querying. Queries are "
            "read-only SQLite. When you have the answer, e-mail a short report to the "
            "requested address with email_report, then summarise it in one paragraph."
        ),
        tools=("list_tables", "describe_table", "run_query", "email_report", "ask_operator"),
        input_form=SqlAnalystInput,
        prompt=lambda d: f"{d['question']}\n\nE-mail the report to {d['report_to']}.",
        script=sql_analyst_script,
        limits=Limits(max_steps=12, max_cost_usd=Decimal("0.50"), max_seconds=300),
        gates=GateRules(allow_lists={"email_report": {"to": ("analytics@example.com",)}}),
    )
)


# --- Refund desk --------------------------------------------------------------------------------
class RefundDeskInput(forms.Form):
    # Bounded: SQLite (the shop) stores 64-bit integers; a larger id was a tool crash.
    # Order 13 (a standing desk, 689.00): a full refund is past the 500 gate and within the
    # order's total, so the default input shows an approval whose approved refund succeeds.
    order_id = forms.IntegerField(
        min_value=1, max_value=2**63 - 1, initial=13, help_text="The order to refund."
    )
    amount = forms.DecimalField(
        min_value=Decimal("0.01"),
        max_digits=10,
        decimal_places=2,
        required=False,
        help_text="Leave empty to refund what is left on the order.",
    )
    reason = forms.CharField(max_length=500, initial="Arrived damaged")


def refund_desk_script(data: dict) -> list:
    def refund(messages):
        order = last_tool_result(messages)
        if not isinstance(order, dict):
            # The lookup failed (no such order): a model would say so, not crash.
            return [text(f"I could not look up order {data['order_id']}: {order}. No refund.")]
        left = Decimal(str(order.get("total", 0))) - Decimal(str(order.get("refunded", 0)))
        amount = Decimal(data["amount"]) if data.get("amount") else left
        if amount <= 0:
            return [text(f"Order {data['order_id']} is already refunded in full. No refund.")]
        return [
            text(f"Order {data['order_id']} is eligible; refunding {amount}."),
            tool_use(
                "issue_refund", order_id=data["order_id"], amount=str(amount), reason=data["reason"]
            ),
        ]

    def tell_customer(messages):
        result = last_tool_result(messages)
        order = _find_order(messages)
        if not isinstance(result, dict) or "refund_id" not in result:
            return [text(f"No refund was issued: {result}")]
        return [
            tool_use(
                "send_customer_email",
                to=order.get("customer_email", "customer@example.com"),
                subject=f"Your refund for order {data['order_id']}",
                body=f"We refunded {result['amount']} for order {data['order_id']}.",
            )
        ]

    return [
        [text("Checking the order."), tool_use("lookup_order", order_id=data["order_id"])],
        refund,
        tell_customer,
        [text("Refund issued and the customer informed.")],
    ]


def _find_order(messages: list[dict]) -> dict:
    for message in messages:
        if message["role"] == "user" and isinstance(message["content"], list):
            for block in message["content"]:
                if block.get("type") == "tool_result":
                    try:
                        value = json.loads(block.get("content") or "")
                    except (TypeError, ValueError):
                        continue
                    if isinstance(value, dict) and "customer_email" in value:
                        return value
    return {}


register(
    Agent(
        slug="refund-desk",
        title="Refund desk",
        description="Looks up an order, refunds it and tells the customer.",
        model="claude-sonnet-4-6",
        system_prompt=(
            "You handle refund requests. Look the order up, refund no more than what is left "
            "on it, then e-mail the customer a short confirmation."
        ),
        tools=(
            "lookup_customer",
            "lookup_order",
            "issue_refund",
            "send_customer_email",
            "ask_operator",
        ),
        input_form=RefundDeskInput,
        prompt=lambda d: (
            f"Refund order {d['order_id']}"
            + (f" by {d['amount']}" if d.get("amount") else " in full")
            + f". Reason: {d['reason']}"
        ),
        script=refund_desk_script,
        summary=lambda d: (
            f"order {d['order_id']} · "
            + (f"refund {d['amount']}" if d.get("amount") else "full refund")
        ),
        limits=Limits(max_steps=10, max_cost_usd=Decimal("0.50"), max_seconds=300),
        gates=GateRules(
            thresholds={"issue_refund": {"amount": Decimal(500)}},
            approval_timeout=timedelta(hours=24),
        ),
    )
)


# --- Order inquiry (asks instead of guessing) ---------------------------------------------------
class OrderInquiryInput(forms.Form):
    customer_email = forms.EmailField(
        label="Customer e-mail", initial="grace.thompson1@example.com", max_length=254
    )
    message = forms.CharField(
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 3}),
        initial="Where is my order? It still has not arrived.",
        help_text="What the customer wrote.",
    )


RECENT_ORDERS = 4
_ORDER_IN_ANSWER = re.compile(r"order (\d+)")


def order_inquiry_script(data: dict) -> list:
    def recent_orders(messages):
        customer = last_tool_result(messages)
        if not isinstance(customer, dict) or "id" not in customer:
            return [text(f"I could not find the customer: {customer}. Nothing to look up.")]
        sql = (
            "SELECT o.id, p.name AS product, o.status, o.ordered_on FROM orders o "
            "JOIN products p ON p.id = o.product_id "
            f"WHERE o.customer_id = {int(customer['id'])} "
            f"ORDER BY o.ordered_on DESC LIMIT {RECENT_ORDERS}"
        )
        return [
            text("The message names no order; I'll list their recent ones."),
            tool_use("run_query", sql=sql),
        ]

    def ask(messages):
        result = last_tool_result(messages)
        rows = result.get("rows", []) if isinstance(result, dict) else []
        if not rows:
            return [text("The customer has no orders; nothing to look up.")]
        options = [f"order {r[0]} · {r[1]} ({r[2]}, {r[3]})" for r in rows]
        return [
            text("Several orders could be meant; I'll ask rather than guess."),
            tool_use(
                "ask_operator",
                question=f"Which order does the customer mean? They wrote: {data['message']}",
                options=options,
            ),
        ]

    def look_up(messages):
        answer = last_tool_result(messages)
        picked = answer.get("answer", "") if isinstance(answer, dict) else ""
        match = _ORDER_IN_ANSWER.search(picked)
        if not match:
            return [text(f"No order was chosen ({answer}); I did not look any up.")]
        return [tool_use("lookup_order", order_id=int(match[1]))]

    def reply(messages):
        order = last_tool_result(messages)
        if not isinstance(order, dict):
            return [text(f"The lookup failed: {order}")]
        return [
            text(
                f"Order {order.get('id')} ({order.get('product')}) is {order.get('status')}, "
                f"ordered on {order.get('ordered_on')}. Suggested reply: your "
                f"{order.get('product')} is {order.get('status')}; we will keep you posted."
            )
        ]

    return [
        [text("Finding the customer."), tool_use("lookup_customer", email=data["customer_email"])],
        recent_orders,
        ask,
        look_up,
        reply,
    ]


register(
    Agent(
        slug="order-inquiry",
        title="Order inquiry",
        description=(
            "Answers a customer's question about an order; asks the operator which order is "
            "meant when the message does not say."
        ),
        model="claude-sonnet-4-6",
        system_prompt=(
            "You answer customers' questions about their orders. Find the customer, then the "
            "order. When you cannot tell which order is meant, ask the operator with "
            "ask_operator instead of guessing. End with a short suggested reply."
        ),
        tools=("lookup_customer", "run_query", "lookup_order", "ask_operator"),
        input_form=OrderInquiryInput,
        prompt=lambda d: f"Customer {d['customer_email']} wrote: {d['message']}",
        script=order_inquiry_script,
        summary=lambda d: f"{d['customer_email']} · {d['message']}",
        limits=Limits(max_steps=10, max_cost_usd=Decimal("0.50"), max_seconds=300),
    )
)


# --- Complaint triage (its verdict launches the refund desk: a chained run) --------------------
class ComplaintTriageInput(forms.Form):
    order_id = forms.IntegerField(
        min_value=1, max_value=2**63 - 1, initial=13, help_text="The order complained about."
    )
    message = forms.CharField(
        max_length=400,
        widget=forms.Textarea(attrs={"rows": 3}),
        initial="The desk arrived damaged: one leg is bent and it wobbles.",
        help_text="What the customer wrote.",
    )


# Words of a complaint that, about an order the customer has, make a refund the remedy.
_REFUND_WORDS = re.compile(r"\b(damaged|broken|bent|defective|faulty|missing|wrong)\b", re.I)


def complaint_triage_script(data: dict) -> list:
    def verdict(messages):
        order = last_tool_result(messages)
        if not isinstance(order, dict):
            # No verdict to map: the follow-up says the output is not JSON, and launches nothing.
            return [text(f"I could not look up order {data['order_id']}: {order}.")]
        problem = _REFUND_WORDS.search(data["message"])
        refund = bool(problem) and order.get("status") in ("delivered", "returned")
        answer = {
            "order_id": data["order_id"],
            "action": "refund" if refund else "reply",
            "reason": (
                f"{problem[1].capitalize()} on arrival: {data['message']}"
                if refund
                else f"No refund: the order is {order.get('status')}; answer the customer."
            ),
        }
        return [
            text(
                f"Order {data['order_id']} ({order.get('product')}) is {order.get('status')}. "
                + ("A refund is the remedy." if refund else "A refund is not the remedy.")
                + f"\n```json\n{json.dumps(answer)}\n```"
            )
        ]

    return [
        [text("Looking the order up."), tool_use("lookup_order", order_id=data["order_id"])],
        verdict,
    ]


def refund_for_complaint(result: RunResult) -> dict | None:
    """The refund desk's input from the triage's verdict; None (nothing launched) when the
    verdict is not a refund."""
    verdict = result.json()
    if verdict["action"] != "refund":
        return None
    # The refund records 300 characters of its reason (issue_refund).
    return {"order_id": verdict["order_id"], "reason": str(verdict["reason"])[:300]}


register(
    Agent(
        slug="complaint-triage",
        title="Complaint triage",
        description=(
            "Reads a customer's complaint about an order and decides whether a refund is the "
            "remedy; if so, the refund desk takes over (a chained run)."
        ),
        model="claude-sonnet-4-6",
        system_prompt=(
            "You triage customer complaints. Look the order up. A refund is the remedy when a "
            "delivered or returned order arrived damaged, broken, defective, incomplete or "
            "wrong. End with one JSON object in a ```json block: "
            '{"order_id": <the order>, "action": "refund" or "reply", "reason": <one line>}.'
        ),
        tools=("lookup_order",),
        input_form=ComplaintTriageInput,
        prompt=lambda d: f"Order {d['order_id']}. The customer wrote: {d['message']}",
        script=complaint_triage_script,
        summary=lambda d: f"order {d['order_id']} · {d['message']}",
        limits=Limits(max_steps=6, max_cost_usd=Decimal("0.20"), max_seconds=120),
        follow_ups=(FollowUp(agent="refund-desk", input=refund_for_complaint),),
    )
)


# --- Supplier quote (waits for a reply without a worker) --------------------------------------
class SupplierQuoteInput(forms.Form):
    supplier = forms.EmailField(initial="sales@acme-parts.example", max_length=254)
    product = forms.CharField(max_length=200, initial="M4 hex bolts, stainless")
    quantity = forms.IntegerField(min_value=1, max_value=100_000, initial=500)


def last_operation_report(messages: list[dict]) -> str:
    """The newest "Operation #… completed/timed out" text the run was told."""
    for message in reversed(messages):
        if message["role"] == "user" and isinstance(message["content"], list):
            for block in reversed(message["content"]):
                if block.get("type") == "text" and block["text"].startswith("Operation #"):
                    return block["text"]
    return ""


def supplier_quote_script(data: dict) -> list:
    def conclude(messages):
        report = last_operation_report(messages)
        if " completed: " not in report:
            return [text(f"The supplier did not answer: {report or 'no reply'}. No quote.")]
        reply = report.split(" completed: ", 1)[1]
        try:
            quote = json.loads(reply)
            price = f"{quote['unit_price']} {quote.get('currency', '')}".strip()
        except (ValueError, TypeError, KeyError):
            return [text(f"The supplier replied, but not with a price: {reply}")]
        return [text(f"{data['supplier']} quotes {price} per unit for {data['quantity']}.")]

    return [
        [
            text("I'll ask the supplier for a quote."),
            tool_use(
                "request_quote",
                supplier=data["supplier"],
                product=data["product"],
                quantity=data["quantity"],
            ),
        ],
        [text("The request is out. Nothing else to do until the supplier replies.")],
        conclude,
    ]


register(
    Agent(
        slug="supplier-quote",
        title="Supplier quote",
        description=(
            "E-mails a supplier for a quote and waits for the reply (a pending operation: "
            "the run holds no worker meanwhile), then reports the price."
        ),
        model="claude-sonnet-4-6",
        system_prompt=(
            "You get price quotes from suppliers. Ask the supplier once with request_quote, "
            "wait for the reply, then report the unit price."
        ),
        tools=("request_quote",),
        input_form=SupplierQuoteInput,
        prompt=lambda d: f"Get a quote from {d['supplier']} for {d['quantity']} x {d['product']}.",
        script=supplier_quote_script,
        summary=lambda d: f"{d['quantity']} x {d['product']} · {d['supplier']}",
        limits=Limits(max_steps=6, max_cost_usd=Decimal("0.20"), max_seconds=300),
        gates=GateRules(never_gate=("request_quote",)),
    )
)


# --- Goodwill desk (the gate policy learns from its approvers) ---------------------------------
class GoodwillDeskInput(forms.Form):
    customer_email = forms.EmailField(initial="grace.thompson1@example.com", max_length=254)
    amount = forms.DecimalField(
        min_value=Decimal("0.01"), max_value=Decimal(1000), decimal_places=2, initial=15
    )
    reason = forms.ChoiceField(choices=[(r, r) for r in tools.GOODWILL_REASONS])


def goodwill_desk_script(data: dict) -> list:
    def report(messages):
        result = last_tool_result(messages)
        if not isinstance(result, dict) or "credited" not in result:
            return [text(f"No credit was granted: {result}")]
        return [text(f"Granted a goodwill credit of {result['credited']} to {result['to']}.")]

    return [
        [
            text(f"A {data['reason']}: a goodwill credit of {data['amount']} is fair."),
            tool_use(
                "grant_goodwill_credit",
                customer_email=data["customer_email"],
                amount=str(data["amount"]),
                reason=data["reason"],
            ),
        ],
        report,
    ]


register(
    Agent(
        slug="goodwill-desk",
        title="Goodwill desk",
        description=(
            "Grants small goodwill credits. Every credit is gated (irreversible), but the gate "
            "policy learns: after 5 unedited approvals of a pattern it proposes an auto-approve "
            "rule for an admin to accept on the rules page."
        ),
        model="claude-sonnet-4-6",
        system_prompt=(
            "You grant goodwill credits to customers who had a bad experience. Grant the "
            "amount asked with grant_goodwill_credit, then say what you did."
        ),
        tools=("grant_goodwill_credit",),
        input_form=GoodwillDeskInput,
        prompt=lambda d: (
            f"Grant {d['customer_email']} a goodwill credit of {d['amount']} ({d['reason']})."
        ),
        script=goodwill_desk_script,
        summary=lambda d: f"{d['amount']} to {d['customer_email']} · {d['reason']}",
        limits=Limits(max_steps=4, max_cost_usd=Decimal("0.10"), max_seconds=120),
        gates=GateRules(
            thresholds={"grant_goodwill_credit": {"amount": Decimal(100)}},
            learning=LearningRules(
                bar=5,
                match_fields={"grant_goodwill_credit": ("reason",)},
                default_expiry=timedelta(days=7),
                default_max_hits=100,
            ),
        ),
    )
)
