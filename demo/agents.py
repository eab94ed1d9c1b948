"""The demo agents: an SQL analyst, a refund desk (its default refund is gated), an order
inquiry desk that asks the operator instead of guessing, a complaint triage whose verdict
launches the refund desk (a chained run), a supplier quote that waits for a reply, an order
review whose small context is summarised as it goes, a stock check whose first supplier's
API hangs past the tool's deadline, a revenue check whose answer is validated and verified
before the run may succeed, a customer reply whose personal data is guarded and whose
e-mails are rate limited, an order briefing whose text streams into the trace as it is
written, a refund desk whose approvals escalate, a goodwill desk whose gate policy learns
from its approvers, and a shipping-quotes desk whose four lookups of one turn run together."""

import json
import re
import sys
from dataclasses import dataclass, replace
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from django import forms
from django.conf import settings

import approvals.engine_gates  # noqa: F401  (registers ask_operator)
from agentkit.agents import (
    CATALOGUE,
    Agent,
    EscalationTier,
    FollowUp,
    GateRules,
    LearningRules,
    Limits,
    RunResult,
    register,
)
from agentkit.llm.scripted import text, tool_use
from agentkit.mcp import McpServer
from agentkit.pii import PiiPolicy, masker
from agentkit.tools import RateLimit
from agentkit.verification import Verifier

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


@dataclass(frozen=True)
class Outcome:
    """What became of one of the agent's tool calls, as the conversation tells it."""

    tool: str
    asked: dict  # the arguments the model proposed (an approver may have edited them)
    ok: bool
    value: Any  # the parsed result; the error's text when not ok

    @property
    def result(self) -> dict:
        """The result when it is an object (a call confirmed by an operator has no fields)."""
        return self.value if self.ok and isinstance(self.value, dict) else {}


def outcomes_of(messages: list[dict], tool: str) -> list[Outcome]:
    """The results of the calls to `tool`, oldest first: run, failed, rejected or expired (a
    decision comes back as the call's error: "rejected by approver: …", "approval expired …")."""
    asked = {}
    for message in messages:
        if message["role"] == "assistant" and isinstance(message["content"], list):
            for block in message["content"]:
                if block.get("type") == "tool_use" and block["name"] == tool:
                    asked[block["id"]] = block.get("input") or {}
    found = []
    for message in messages:
        if message["role"] != "user" or not isinstance(message["content"], list):
            continue
        for block in message["content"]:
            if block.get("type") != "tool_result" or block.get("tool_use_id") not in asked:
                continue
            content = block.get("content")
            if isinstance(content, list):
                content = "".join(c.get("text", "") for c in content)
            proposed = asked[block["tool_use_id"]]
            if block.get("is_error"):
                found.append(Outcome(tool, proposed, False, content))
                continue
            try:
                found.append(Outcome(tool, proposed, True, json.loads(content)))
            except (TypeError, ValueError):
                found.append(Outcome(tool, proposed, True, content))
    return found


def outcome_of(messages: list[dict], tool: str) -> Outcome | None:
    """The newest call to `tool`'s outcome (outcomes_of), None when it was never called."""
    found = outcomes_of(messages, tool)
    return found[-1] if found else None


def changed(asked: Any, done: Any) -> bool:
    """Whether a value that ran differs from the one proposed (an approver's edit): numbers
    are compared as numbers, since "689.0" proposed and "689.00" refunded are one amount."""
    try:
        return Decimal(str(asked)) != Decimal(str(done))
    except ArithmeticError:
        return str(asked) != str(done)


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
        query = outcome_of(messages, "run_query")
        if query is None or not query.ok:
            return [text(f"The query failed ({query and query.value}); there is no report.")]
        result = query.result
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
        sql_analyst_conclusion,
    ]


def _revenue_headline(messages: list[dict]) -> str:
    query = outcome_of(messages, "run_query")
    rows = query.result.get("rows") if query else None
    if not rows:
        return "The query found no orders."
    category, orders, revenue = rows[0][:3]
    return f"{category} brings in the most: {revenue} over {orders} orders."


def sql_analyst_conclusion(messages: list[dict]) -> list[dict]:
    """The analyst's last word: the report's fate (sent, to whom; rejected; failed)."""
    sent = outcome_of(messages, "email_report")
    headline = _revenue_headline(messages)
    if sent is not None and sent.ok:
        to = sent.result.get("sent_to", "its recipient")
        subject = sent.result.get("subject", "the report")
        return [text(f"Report “{subject}” e-mailed to {to}. {headline}")]
    why = sent.value if sent is not None else "it was never sent"
    return [text(f"The report was not e-mailed: {why}. {headline}")]


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
        refund = outcome_of(messages, "issue_refund")
        result = refund.result if refund else {}
        order = _find_order(messages)
        if "refund_id" not in result:
            return [text(f"No refund was issued: {refund.value if refund else 'not asked'}")]
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
        refund_desk_conclusion,
    ]


def refund_desk_conclusion(messages: list[dict]) -> list[dict]:
    """The refund as made (an approver may have changed its amount) and whether the customer
    was told."""
    refund = outcome_of(messages, "issue_refund")
    made = refund.result if refund else {}
    amount = Decimal(str(made.get("amount", 0)))
    said = f"Refund issued: {amount:.2f} on order {made.get('order_id')}"
    proposed = refund.asked.get("amount") if refund else None
    if proposed is not None and changed(proposed, amount):
        said += f" (I proposed {proposed}; the approver changed it)"
    email = outcome_of(messages, "send_customer_email")
    if email is not None and email.ok:
        to = email.result.get("sent_to", "the customer")
        return [text(f"{said}. The customer was told by e-mail at {to}.")]
    why = email.value if email is not None else "no e-mail was written"
    return [text(f"{said}. The customer was not told: the e-mail was not sent ({why}).")]


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


# --- Order review (a long run whose older turns are summarised to fit its context) ------------
class OrderReviewInput(forms.Form):
    first_order = forms.IntegerField(min_value=1, max_value=390, initial=40)
    count = forms.IntegerField(min_value=2, max_value=10, initial=10)


def order_review_script(data: dict) -> list:
    first, count = data["first_order"], data["count"]
    orders = range(first, first + count)
    return [
        *([text(f"Next, order {n}."), tool_use("lookup_order", order_id=n)] for n in orders),
        [text(f"Reviewed orders {first} to {first + count - 1}: none needs a refund.")],
    ]


register(
    Agent(
        slug="order-review",
        title="Order review",
        description=(
            "Looks at a range of orders one by one. Its context is small on purpose: the "
            "oldest lookups are summarised by a model call (a step in the trace) as it goes."
        ),
        model="claude-sonnet-4-6",
        system_prompt=(
            "You review shop orders one at a time with lookup_order and say at the end which "
            "ones need a refund."
        ),
        tools=("lookup_order",),
        input_form=OrderReviewInput,
        prompt=lambda d: (
            f"Review orders {d['first_order']} to {d['first_order'] + d['count'] - 1}, one by one."
        ),
        script=order_review_script,
        summary=lambda d: f"orders {d['first_order']}+{d['count']}",
        limits=Limits(max_steps=14, max_cost_usd=Decimal("0.50"), max_seconds=300),
        context_budget_tokens=1200,
        summarise_context=True,
        # Summaries are plain prose: a cheaper model writes them.
        step_models={"summary": "claude-haiku-4-5"},
    )
)


# --- Stock check (a supplier's API hangs: the call is abandoned at its deadline) ---------------
class StockCheckInput(forms.Form):
    product = forms.CharField(max_length=200, initial="M4 hex bolts, stainless")
    first_supplier = forms.EmailField(initial="api@slow-parts.example", max_length=254)
    second_supplier = forms.EmailField(initial="sales@acme-parts.example", max_length=254)


def stock_check_script(data: dict) -> list:
    def conclude(messages):
        asked = outcomes_of(messages, "check_supplier_stock")
        failed = "; ".join(
            f"{o.asked.get('supplier')} did not answer ({o.value})" for o in asked if not o.ok
        )
        answered = [o.result for o in asked if "in_stock" in o.result]
        if not answered:
            return [text(f"No supplier answered: {failed or 'none was asked'}.")]
        found = f"{answered[-1]['supplier']} has {answered[-1]['in_stock']} in stock."
        return [text(f"{found} Before that, {failed}." if failed else found)]

    def second(messages):
        result = last_tool_result(messages)
        note = "did not answer in time" if "timed out" in str(result) else "answered"
        return [
            text(f"{data['first_supplier']} {note}; I'll ask {data['second_supplier']}."),
            tool_use(
                "check_supplier_stock", supplier=data["second_supplier"], product=data["product"]
            ),
        ]

    return [
        [
            text(f"I'll ask {data['first_supplier']} first."),
            tool_use(
                "check_supplier_stock", supplier=data["first_supplier"], product=data["product"]
            ),
        ],
        second,
        conclude,
    ]


register(
    Agent(
        slug="stock-check",
        title="Stock check",
        description=(
            "Asks suppliers' stock APIs for a product. The first one's API hangs: the engine "
            "abandons the call at its 2 s deadline, retries once, and the agent moves on."
        ),
        model="claude-sonnet-4-6",
        system_prompt=(
            "You find a supplier with the product in stock. Ask one supplier at a time with "
            "check_supplier_stock; if one does not answer, ask the next."
        ),
        tools=("check_supplier_stock",),
        input_form=StockCheckInput,
        prompt=lambda d: (
            f"Who has {d['product']} in stock? Ask {d['first_supplier']}, "
            f"then {d['second_supplier']} if needed."
        ),
        script=stock_check_script,
        summary=lambda d: f"{d['product']} · {d['first_supplier']}",
        limits=Limits(max_steps=6, max_cost_usd=Decimal("0.20"), max_seconds=120),
    )
)


# --- Revenue check (its answer is checked: an output schema, then a verifier) ---------------
class RevenueCheckInput(forms.Form):
    question = forms.CharField(
        max_length=500,
        initial="What is the shop's total revenue over all orders?",
        help_text="A question whose answer is one revenue figure.",
    )


# The figure the verifier recomputes, whatever query the agent ran.
TOTAL_REVENUE_SQL = "SELECT ROUND(SUM(total), 2) AS revenue, COUNT(*) AS orders FROM orders"
DELIVERED_REVENUE_SQL = (
    "SELECT ROUND(SUM(total), 2) AS revenue, COUNT(*) AS orders FROM orders "
    "WHERE status = 'delivered'"
)
REVENUE_ANSWER = {
    "type": "object",
    "required": ["revenue", "orders"],
    "properties": {
        "revenue": {"type": "number", "minimum": 0},
        "orders": {"type": "integer", "minimum": 0},
        "note": {"type": "string", "maxLength": 300},
    },
    "additionalProperties": False,
}


def same_revenue(result: RunResult, recomputed: dict) -> str | None:
    """The verifier's judgement: the answer's figure against the one recomputed over every
    order (None: they agree to the cent)."""
    revenue, orders = recomputed["rows"][0]
    said = result.json()
    if abs(float(said["revenue"]) - float(revenue)) < 0.005 and said["orders"] == orders:
        return None
    return (
        f"recomputed over all {orders} orders the revenue is {revenue}; the answer says "
        f"{said['revenue']} over {said['orders']} orders"
    )


def revenue_check_script(data: dict) -> list:
    def figures(messages) -> tuple:
        result = last_tool_result(messages) or {}
        rows = result.get("rows") if isinstance(result, dict) else None
        return tuple(rows[0]) if rows else (0, 0)

    def prose(messages):
        revenue, _ = figures(messages)
        return [text(f"Total revenue is {revenue}.")]

    def as_json(messages):
        revenue, orders = figures(messages)
        return [text(json.dumps({"revenue": revenue, "orders": orders}))]

    return [
        # The mistake the verifier is for: "revenue" counted on delivered orders only.
        [text("I'll sum the delivered orders."), tool_use("run_query", sql=DELIVERED_REVENUE_SQL)],
        prose,  # not JSON: the output schema sends it back
        as_json,  # JSON, but the wrong figure: the verifier sends it back
        [
            text("Revenue counts every order, not only delivered ones. Summing them all."),
            tool_use("run_query", sql=TOTAL_REVENUE_SQL),
        ],
        as_json,
    ]


register(
    Agent(
        slug="revenue-check",
        title="Revenue check",
        description=(
            "Answers with one revenue figure as JSON; the answer must match a schema, and a "
            "verifier recomputes the figure with a read-only query before the run may succeed."
        ),
        model="claude-sonnet-4-6",
        system_prompt=(
            "You answer revenue questions over the shop database (read-only SQLite). Answer "
            'with one JSON object: {"revenue": <number>, "orders": <orders counted>}.'
        ),
        tools=("list_tables", "describe_table", "run_query"),
        input_form=RevenueCheckInput,
        prompt=lambda d: d["question"],
        script=revenue_check_script,
        limits=Limits(max_steps=8, max_cost_usd=Decimal("0.30"), max_seconds=120),
        output_schema=REVENUE_ANSWER,
        verifier=Verifier(
            name="revenue recomputed",
            tool=("run_query", lambda result: {"sql": TOTAL_REVENUE_SQL}),
            check=same_revenue,
            max_attempts=2,
        ),
    )
)


# --- Customer reply (PII guard and a rate limit) ------------------------------------------------
class CustomerReplyInput(forms.Form):
    order_id = forms.IntegerField(
        min_value=1,
        max_value=2**63 - 1,
        initial=13,
        help_text="The order the customer wrote about.",
    )
    message = forms.CharField(
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 3}),
        initial=(
            "I was charged twice for this order on my card 4242 4242 4242 4242. "
            "Please call me back on +44 20 7946 0958."
        ),
        help_text="What the customer wrote (it may carry personal data).",
    )


CUSTOMER_REPLY_PII = PiiPolicy(
    detectors=("email", "phone", "card", "iban", "us_ssn", "uk_nino"),
    on_tool_args="gate",
    on_output="redact",
    exempt=("send_customer_email.to",),  # the recipient is where it goes
)


def customer_reply_script(data: dict) -> list:
    """Quotes the customer's message back in the reply (as a hasty agent would): the card
    number and phone in it are what the PII guard puts before a person."""

    def reply(messages):
        order = last_tool_result(messages)
        if not isinstance(order, dict):
            return [text(f"I could not look up order {data['order_id']}: {order}.")]
        return [
            text("Replying to the customer, quoting their message."),
            tool_use(
                "send_customer_email",
                to=order.get("customer_email", "customer@example.com"),
                subject=f"About your order {data['order_id']}",
                body=(
                    f"You wrote: {data['message']}\n\n"
                    "We are looking into it and will get back to you within a day."
                ),
            ),
        ]

    def conclude(messages):
        order = data["order_id"]
        email = outcome_of(messages, "send_customer_email")
        if email is None or not email.ok:
            why = email.value if email is not None else "no e-mail was written"
            return [text(f"I did not reply to the customer about order {order}: {why}.")]
        sent = email.result
        if "body" not in sent:  # a person answered that the e-mail did go out
            return [text(f"Replied to the customer about order {order} ({email.value}).")]
        # The conversation shows the model its own call as the timeline keeps it, masked
        # under the PII policy: what was sent is compared in that form too.
        masked = masker(CUSTOMER_REPLY_PII.as_dict())
        edited = any(
            email.asked.get(arg) not in (sent[key], masked(sent[key]))
            for arg, key in (("to", "sent_to"), ("subject", "subject"), ("body", "body"))
        )
        return [
            text(
                f"Replied to {sent['sent_to']} about order {order}"
                + (", as the approver edited the e-mail" if edited else "")
                + f". The e-mail said: {sent['body']}"
            )
        ]

    return [
        [text("Looking the order up."), tool_use("lookup_order", order_id=data["order_id"])],
        reply,
        conclude,
    ]


register(
    Agent(
        slug="customer-reply",
        title="Customer reply",
        description=(
            "Answers a customer's message about an order by e-mail. Personal data in the e-mail "
            "is put before a person, and redacted from the run's output; at most 20 replies "
            "an hour."
        ),
        model="claude-sonnet-4-6",
        system_prompt=(
            "You answer customers' messages about their orders. Look the order up, then reply "
            "by e-mail. Never repeat card numbers or phone numbers."
        ),
        tools=("lookup_order", "send_customer_email"),
        input_form=CustomerReplyInput,
        prompt=lambda d: f"Order {d['order_id']}: the customer wrote: {d['message']}",
        script=customer_reply_script,
        # What the customer wrote, masked under the PII policy like the rest of the run.
        summary=lambda d: f"order {d['order_id']} · {d['message']}",
        limits=Limits(max_steps=6, max_cost_usd=Decimal("0.20"), max_seconds=300),
        pii=CUSTOMER_REPLY_PII,
        rate_limits={"send_customer_email": RateLimit(20, per=timedelta(hours=1))},
    )
)


# --- Order briefing (streaming model text) ------------------------------------------------------
class OrderBriefingInput(forms.Form):
    order_id = forms.IntegerField(label="Order", min_value=1, initial=42)
    audience = forms.CharField(
        max_length=200,
        initial="the support team",
        help_text="Who reads the briefing.",
    )


def order_briefing_script(data: dict) -> list:
    def brief(messages):
        order = last_tool_result(messages)
        if not isinstance(order, dict):
            return [text(f"Order {data['order_id']} could not be found: {order}")]
        facts = ", ".join(f"{k} {v}" for k, v in order.items() if k != "customer_email")
        return [
            text(
                f"Briefing on order {order.get('id')} for {data['audience']}.\n\n"
                f"{order.get('customer')} ordered {order.get('product')}; the order stands at "
                f"{order.get('total')} and its status is {order.get('status')}. So far "
                f"{order.get('refunded')} has been refunded on it.\n\n"
                "What this means for you: if the customer writes in, start from the status "
                "above rather than from what the customer remembers, check the refunded "
                "amount before promising anything, and say plainly what happens next and "
                "when. Nothing in the order calls for an action today; if the status has not "
                "moved in a week, ask the warehouse before answering.\n\n"
                f"The record as read: {facts}."
            )
        ]

    return [
        [text("I'll read the order first."), tool_use("lookup_order", order_id=data["order_id"])],
        brief,
    ]


register(
    Agent(
        slug="order-briefing",
        title="Order briefing",
        description=(
            "Reads an order and writes a briefing on it. Its text appears in the trace as the "
            "model writes it (streaming)."
        ),
        model="claude-sonnet-4-6",
        system_prompt=(
            "You brief colleagues on one order. Read it with lookup_order, then write a short, "
            "plain briefing: the facts, what they mean for the reader, what to do next."
        ),
        tools=("lookup_order",),
        input_form=OrderBriefingInput,
        prompt=lambda d: f"Write a briefing on order {d['order_id']} for {d['audience']}.",
        script=order_briefing_script,
        summary=lambda d: f"order {d['order_id']} · for {d['audience']}",
        limits=Limits(max_steps=6, max_cost_usd=Decimal("0.20"), max_seconds=300),
        stream_text=True,
        # About 150 words at 25 a second: long enough to watch it being written.
        scripted_typing=0.04,
    )
)


# --- Decide from anywhere: escalation ------------------------------------------------------------
# The refund desk, but only the approver decides its refunds over 500; when they have not
# decided after 2 minutes the admins are told (e-mail with their own one-tap links) and may
# decide too; after 30 minutes the refund is not made and the agent is told so (on_expiry).
register(
    replace(
        CATALOGUE["refund-desk"],
        slug="refund-desk-escalating",
        title="Refund desk (escalating)",
        description=(
            "The refund desk with an escalation chain: large refunds go to the approver, "
            "then to the admins after 2 minutes without a decision."
        ),
        gates=GateRules(
            thresholds={"issue_refund": {"amount": Decimal(500)}},
            approval_timeout=timedelta(minutes=30),
            approvers=("approver",),
            escalation=(EscalationTier(after=timedelta(minutes=2), roles=("admin",)),),
        ),
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
        credit = outcome_of(messages, "grant_goodwill_credit")
        result = credit.result if credit else {}
        if "credited" not in result:
            return [text(f"No credit was granted: {credit.value if credit else 'not asked'}")]
        edits = [
            f"{field} {credit.asked.get(field)} to {result[key]}"
            for field, key in (
                ("amount", "credited"),
                ("customer_email", "to"),
                ("reason", "reason"),
            )
            if key in result and changed(credit.asked.get(field), result[key])
        ]
        said = f"Granted a goodwill credit of {result['credited']} to {result['to']}"
        if edits:
            said += " (the approver changed " + ", ".join(edits) + ")"
        return [text(said + ".")]

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


# --- Dispatch desk (guided recovery: a failed step waits for an operator's choice) ------------
class DispatchDeskInput(forms.Form):
    order_id = forms.IntegerField(min_value=1, initial=13)


def dispatch_desk_script(data: dict) -> list:
    order = data["order_id"]

    def decide(messages):
        done = outcome_of(messages, "schedule_dispatch")
        if done is not None and done.ok:
            return conclude(messages)
        # Told the failure with an operator's instruction: follow a warehouse it names.
        asked = " ".join(
            b.get("text", "")
            for m in messages
            if m["role"] == "user" and isinstance(m["content"], list)
            for b in m["content"]
            if b.get("type") == "text" and "Instruction from the operator" in b.get("text", "")
        )
        named = next((w for w in tools.WAREHOUSES if w.lower() in asked.lower()), None)
        if named:
            return [
                text(f"The operator asks for {named}; booking it there."),
                tool_use("schedule_dispatch", order_id=order, warehouse=named),
            ]
        return conclude(messages)

    def conclude(messages):
        done = outcome_of(messages, "schedule_dispatch")
        if done is None:
            return [text(f"Order {order} was not dispatched.")]
        if done.ok and "skipped_by" in done.result:
            return [
                text(
                    f"Order {order} was not dispatched: {done.result['skipped_by']} skipped it "
                    f"({done.result.get('note', '')})."
                )
            ]
        if done.ok:
            where = done.result.get("warehouse", "")
            moved = (
                f" (from {where}, not {done.asked.get('warehouse')} as first asked)"
                if changed(done.asked.get("warehouse"), where)
                else f" from {where}"
            )
            return [text(f"Order {order} ships today{moved}: dispatch {done.result['dispatch']}.")]
        return [text(f"Order {order} could not be dispatched: {done.value}")]

    return [
        [text(f"Looking up order {order}."), tool_use("lookup_order", order_id=order)],
        [
            text("Booking its dispatch from US-EAST, the usual warehouse."),
            tool_use("schedule_dispatch", order_id=order, warehouse="US-EAST"),
        ],
        decide,
        conclude,
    ]


register(
    Agent(
        slug="dispatch-desk",
        title="Dispatch desk (guided recovery)",
        description=(
            "Books an order's dispatch. The usual warehouse refuses: the run waits for an "
            "operator, who retries with another warehouse, skips the step with a note, or "
            "tells the agent what to do instead (on_failure='ask')."
        ),
        model="claude-sonnet-4-6",
        system_prompt=(
            "You book the dispatch of an order: look it up, then schedule_dispatch from a "
            "warehouse. Follow any instruction from the operator."
        ),
        tools=("lookup_order", "schedule_dispatch"),
        input_form=DispatchDeskInput,
        prompt=lambda d: f"Dispatch order {d['order_id']}.",
        script=dispatch_desk_script,
        summary=lambda d: f"dispatch order {d['order_id']}",
        limits=Limits(max_steps=8, max_cost_usd=Decimal("0.20"), max_seconds=120),
        on_failure="ask",
    )
)


# --- Exchange desk (compensation after a partial failure) -------------------------------------
class ExchangeDeskInput(forms.Form):
    order_id = forms.IntegerField(min_value=1, max_value=2**63 - 1, initial=13)
    amount = forms.DecimalField(
        min_value=Decimal("0.01"),
        max_digits=10,
        decimal_places=2,
        initial=Decimal("40.00"),
        help_text="Refunded for the damaged item before its replacement is dispatched.",
    )


def exchange_desk_script(data: dict) -> list:
    order = data["order_id"]

    def replace_it(messages):
        refund = outcome_of(messages, "issue_refund")
        if refund is None or not refund.ok:
            return [text(f"No refund was made on order {order}; no replacement either.")]
        return [
            text("Refunded. Booking the replacement from US-EAST."),
            tool_use("schedule_dispatch", order_id=order, warehouse="US-EAST"),
        ]

    return [
        [text(f"Looking up order {order}."), tool_use("lookup_order", order_id=order)],
        [
            text(f"Refunding {data['amount']} for the damaged item."),
            tool_use(
                "issue_refund", order_id=order, amount=str(data["amount"]), reason="Damaged item"
            ),
        ],
        replace_it,
        [text("The replacement could not be dispatched.")],
    ]


# Refunds, then books a replacement the warehouse refuses: one error ends the run, after the
# refund committed. The run page offers the refund's compensation (reverse_refund, gated).
register(
    Agent(
        slug="exchange-desk",
        title="Exchange desk (compensation)",
        description=(
            "Refunds a damaged item and books its replacement. The warehouse refuses and the "
            "run fails after the refund was made: the run page offers to reverse the refund "
            "(its declared compensation, gated like any call)."
        ),
        model="claude-sonnet-4-6",
        system_prompt=(
            "You exchange damaged items: look the order up, refund the amount asked, then "
            "schedule_dispatch the replacement."
        ),
        tools=("lookup_order", "issue_refund", "schedule_dispatch"),
        input_form=ExchangeDeskInput,
        prompt=lambda d: (
            f"Exchange the damaged item of order {d['order_id']}: refund {d['amount']}."
        ),
        script=exchange_desk_script,
        summary=lambda d: f"exchange order {d['order_id']} · refund {d['amount']}",
        limits=Limits(
            max_steps=8, max_cost_usd=Decimal("0.20"), max_seconds=120, max_consecutive_errors=1
        ),
        max_limits=Limits(20, Decimal("1.00"), 600, 5),
        gates=GateRules(thresholds={"issue_refund": {"amount": Decimal(500)}}),
    )
)
# The same desk, compensating by itself: the failed run's reversal is requested at once.
register(
    replace(
        CATALOGUE["exchange-desk"],
        slug="exchange-desk-auto",
        title="Exchange desk (compensates by itself)",
        description=(
            "The exchange desk, declared compensate_on_failure: when a run fails after the "
            "refund, the refund's reversal is requested at once (still gated)."
        ),
        compensate_on_failure=True,
    )
)


# --- Goodwill round (standing grants) -------------------------------------------------------------
class GoodwillRoundInput(forms.Form):
    customers = forms.CharField(
        max_length=1000,
        initial="grace.thompson1@example.com, henry.walker2@example.com, iris.young3@example.com",
        help_text="E-mail addresses, comma-separated (at most 5).",
    )
    amount = forms.DecimalField(
        min_value=Decimal("0.01"), max_value=Decimal(1000), decimal_places=2, initial=10
    )
    reason = forms.ChoiceField(choices=[(r, r) for r in tools.GOODWILL_REASONS])

    def clean_customers(self) -> str:
        found = [c.strip() for c in self.cleaned_data["customers"].split(",") if c.strip()]
        if not 1 <= len(found) <= 5:
            raise forms.ValidationError("give one to five e-mail addresses")
        for address in found:
            forms.EmailField().clean(address)
        return ", ".join(found)


def goodwill_round_script(data: dict) -> list:
    customers = data["customers"].split(", ")

    def report(messages):
        done = [m for m in messages if m.get("role") == "user" and "credited" in json.dumps(m)]
        return [text(f"Goodwill round over: {len(done)} of {len(customers)} credits granted.")]

    turns: list = [
        [
            text(f"Credit {n} of {len(customers)}."),
            tool_use(
                "grant_goodwill_credit",
                customer_email=address,
                amount=str(data["amount"]),
                reason=data["reason"],
            ),
        ]
        for n, address in enumerate(customers, start=1)
    ]
    return [*turns, report]


register(
    Agent(
        slug="goodwill-round",
        title="Goodwill round",
        description=(
            "Grants the same goodwill credit to several customers, one at a time. The first "
            "credit is gated; from its card an approver may allow the rest (a standing grant). "
            "Every second step it asks whether to go on."
        ),
        model="claude-sonnet-4-6",
        system_prompt=(
            "You grant goodwill credits to a list of customers, one grant_goodwill_credit call "
            "per customer, then say how many you granted."
        ),
        tools=("grant_goodwill_credit",),
        input_form=GoodwillRoundInput,
        prompt=lambda d: (
            f"Grant each of {d['customers']} a goodwill credit of {d['amount']} ({d['reason']})."
        ),
        script=goodwill_round_script,
        summary=lambda d: f"{d['amount']} each to {d['customers']}"[:120],
        limits=Limits(max_steps=10, max_cost_usd=Decimal("0.20"), max_seconds=300),
        gates=GateRules(
            thresholds={"grant_goodwill_credit": {"amount": Decimal(100)}},
            continue_every_n_steps=2,
        ),
    )
)


# --- Warehouse clerk (its tools come from an MCP server) -------------------------------------
WAREHOUSE = McpServer(
    name="warehouse",
    command=(sys.executable, str(Path(__file__).resolve().with_name("mcp_warehouse.py"))),
    env={"WAREHOUSE_LOG": str(settings.VAR_DIR / "warehouse.jsonl")},
)


class WarehouseClerkInput(forms.Form):
    sku = forms.CharField(max_length=40, initial="KB-101", help_text="the product's SKU")
    quantity = forms.IntegerField(min_value=1, max_value=1000, initial=5)
    order_ref = forms.CharField(max_length=40, initial="SO-1042", help_text="the order it is for")


def warehouse_clerk_script(data: dict) -> list:
    def reserve(messages):
        level = last_tool_result(messages) or {}
        return [
            text(f"{level.get('free', '?')} free; reserving {data['quantity']}."),
            tool_use(
                "warehouse_reserve_stock",
                sku=data["sku"],
                quantity=data["quantity"],
                order_ref=data["order_ref"],
            ),
        ]

    def report(messages):
        done = outcome_of(messages, "warehouse_reserve_stock")
        if done is None or not done.ok:
            return [text(f"Nothing was reserved: {done.value if done else 'no call'}.")]
        return [text(f"Reserved {done.result['reserved']} of {done.result['sku']}.")]

    return [[tool_use("warehouse_stock_level", sku=data["sku"])], reserve, report]


register(
    Agent(
        slug="warehouse-clerk",
        title="Warehouse clerk",
        description=(
            "Reserves stock for an order with the tools of the warehouse's MCP server "
            "(demo/mcp_warehouse.py, over stdio). The server says reserve_stock is destructive, "
            "so it is gated; its read-only stock_level runs because this agent's rules say so."
        ),
        model="claude-sonnet-4-6",
        system_prompt=(
            "You reserve stock for orders. Check the SKU's free stock with "
            "warehouse_stock_level, then reserve the quantity with warehouse_reserve_stock."
        ),
        tools=(),
        mcp_servers=(WAREHOUSE,),
        input_form=WarehouseClerkInput,
        prompt=lambda d: f"Reserve {d['quantity']} x {d['sku']} for order {d['order_ref']}.",
        script=warehouse_clerk_script,
        summary=lambda d: f"{d['quantity']} x {d['sku']} · {d['order_ref']}",
        limits=Limits(max_steps=5, max_cost_usd=Decimal("0.10"), max_seconds=300),
        # The server's readOnlyHint lowers nothing: the owner says the lookup may run.
        gates=GateRules(never_gate=("warehouse_stock_level",)),
    )
)


# --- Shipping quotes (four carriers asked in one turn: the lookups run together) -------------
class ShippingQuotesInput(forms.Form):
    weight_kg = forms.DecimalField(min_value=Decimal("0.1"), max_value=1000, initial=Decimal(4))
    destination = forms.CharField(max_length=100, initial="Lyon, France")


def shipping_quotes_script(data: dict) -> list:
    def conclude(messages):
        quotes = [o.result for o in outcomes_of(messages, "quote_shipping") if o.ok]
        if not quotes:
            return [text("No carrier answered.")]
        best = min(quotes, key=lambda q: Decimal(q["price_eur"]))
        listed = "; ".join(f"{q['carrier']} {q['price_eur']} EUR, {q['days']} d" for q in quotes)
        return [text(f"Cheapest: {best['carrier']} at {best['price_eur']} EUR. All: {listed}.")]

    weight = str(data["weight_kg"])
    return [
        [
            text(f"I'll ask the {len(tools.CARRIERS)} carriers at once."),
            *(
                tool_use(
                    "quote_shipping",
                    carrier=carrier,
                    weight_kg=weight,
                    destination=data["destination"],
                )
                for carrier in tools.CARRIERS
            ),
        ],
        conclude,
    ]


register(
    Agent(
        slug="shipping-quotes",
        title="Shipping quotes",
        description=(
            "Asks four carriers' quote APIs in one turn (each takes 0.5 s): the read-only "
            "lookups run together, so the turn takes about 0.5 s instead of 2."
        ),
        model="claude-sonnet-4-6",
        system_prompt=(
            "You find the cheapest carrier for a parcel. Ask every carrier with "
            "quote_shipping in one turn, then name the cheapest."
        ),
        tools=("quote_shipping",),
        input_form=ShippingQuotesInput,
        prompt=lambda d: f"Ship {d['weight_kg']} kg to {d['destination']}: which carrier?",
        script=shipping_quotes_script,
        summary=lambda d: f"{d['weight_kg']} kg to {d['destination']}",
        limits=Limits(max_steps=6, max_cost_usd=Decimal("0.20"), max_seconds=120),
        # When Sonnet is overloaded, Haiku answers (the step says which model did).
        fallback_model="claude-haiku-4-5",
    )
)
