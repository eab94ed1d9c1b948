"""Tools of the demo agents. They do real work on local data (shop DB, refunds, outbox)."""

import sqlite3
import time
from datetime import timedelta
from decimal import Decimal
from typing import Literal

from django.core.mail import EmailMessage
from django.db import IntegrityError, transaction
from django.db.models import Sum
from django.utils import timezone
from pydantic import EmailStr, Field

from agentkit.previews import Change
from agentkit.tools import Blast, Compensate, Pending, RetryPolicy, ToolContext, ToolError, tool

from . import shop
from .models import Refund

MAX_ROWS = 200


@tool(reversible=True, blast=Blast.NONE, timeout_seconds=5)
def list_tables() -> list[str]:
    """List the tables of the shop database."""
    with shop.connect_readonly() as db:
        rows = db.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")
        return [r["name"] for r in rows]


@tool(reversible=True, blast=Blast.NONE, timeout_seconds=5)
def describe_table(table: str = Field(max_length=64)) -> dict:
    """Columns of one table (name, type, nullable) and its row count."""
    with shop.connect_readonly() as db:
        known = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if table not in known:
            raise ToolError(f"no table named {table!r}; tables: {', '.join(sorted(known))}")
        cols = [
            {"name": r["name"], "type": r["type"], "nullable": not r["notnull"]}
            for r in db.execute(f'PRAGMA table_info("{table}")')
        ]
        count = db.execute(f'SELECT COUNT(*) FROM "{table}"').fetchone()[0]
        return {"table": table, "columns": cols, "rows": count}


@tool(reversible=True, blast=Blast.NONE, timeout_seconds=10)
def run_query(sql: str = Field(max_length=5000), ctx: ToolContext = None) -> dict:
    """Run one read-only SQL query (SQLite dialect) on the shop database. At most 200 rows."""
    deadline = ctx.deadline if ctx else time.monotonic() + 10
    try:
        with shop.connect_readonly(deadline=deadline) as db:
            cursor = db.execute(sql)
            columns = [d[0] for d in cursor.description or []]
            rows = cursor.fetchmany(MAX_ROWS + 1)
    except sqlite3.OperationalError as e:
        # Includes "attempt to write a readonly database" and "interrupted" (deadline).
        raise ToolError(f"query failed: {e}") from None
    except sqlite3.Error as e:
        raise ToolError(f"query failed: {e}") from None
    return {
        "columns": columns,
        "rows": [list(r) for r in rows[:MAX_ROWS]],
        "truncated": len(rows) > MAX_ROWS,
    }


def _email_preview(args: dict) -> Change:
    """The e-mail as it would leave, and who it reaches (a customer, by the shop's records)."""
    with shop.connect_readonly() as db:
        row = db.execute("SELECT name FROM customers WHERE email = ?", (args["to"],)).fetchone()
    return Change(
        subject=f"e-mail to {args['to']}",
        before=None,
        after={
            "to": args["to"],
            "recipient": row["name"] if row else "not a customer of the shop",
            "subject": args["subject"],
            "body": args["body"],
        },
    )


@tool(
    reversible=False,
    blast=Blast.MEDIUM,
    accepts_idempotency_key=True,
    timeout_seconds=10,
    describe="E-mail the report “{subject}” to {to}",
    preview=_email_preview,
)
def email_report(
    to: EmailStr,
    subject: str = Field(max_length=200),
    body: str = Field(max_length=20000),
    ctx: ToolContext = None,
) -> dict:
    """E-mail a finished report. Irreversible: the message leaves once sent."""
    headers = {"X-Idempotency-Key": ctx.idempotency_key} if ctx else {}
    EmailMessage(subject=subject, body=body, to=[to], headers=headers).send()
    return {"sent_to": to, "subject": subject}


@tool(reversible=True, blast=Blast.NONE, timeout_seconds=5)
def lookup_customer(
    email: EmailStr | None = None, customer_id: int | None = Field(default=None, ge=1)
) -> dict:
    """Find a customer by e-mail or id, with their order count and total spent."""
    if not email and not customer_id:
        raise ToolError("give an email or a customer_id")
    with shop.connect_readonly() as db:
        if customer_id:
            row = db.execute("SELECT * FROM customers WHERE id = ?", (customer_id,)).fetchone()
        else:
            row = db.execute("SELECT * FROM customers WHERE email = ?", (email,)).fetchone()
        if not row:
            raise ToolError("no such customer")
        stats = db.execute(
            "SELECT COUNT(*), COALESCE(SUM(total), 0) FROM orders WHERE customer_id = ?",
            (row["id"],),
        ).fetchone()
    return {**dict(row), "orders": stats[0], "total_spent": round(stats[1], 2)}


@tool(reversible=True, blast=Blast.NONE, timeout_seconds=5)
def lookup_order(order_id: int = Field(ge=1)) -> dict:
    """One order with its product, customer and what has been refunded so far."""
    with shop.connect_readonly() as db:
        row = db.execute(
            """SELECT o.*, p.name AS product, c.name AS customer, c.email AS customer_email
               FROM orders o JOIN products p ON p.id = o.product_id
               JOIN customers c ON c.id = o.customer_id WHERE o.id = ?""",
            (order_id,),
        ).fetchone()
    if not row:
        raise ToolError(f"no order {order_id}")
    refunded = _refunded(order_id)
    return {**dict(row), "refunded": str(refunded)}


def _refunded(order_id: int) -> Decimal:
    """What stands refunded on an order: its refunds less the reversed ones."""
    kept = Refund.objects.filter(order_id=order_id, reversed_at__isnull=True)
    return kept.aggregate(s=Sum("amount"))["s"] or Decimal(0)


def _refund_effect(args: dict) -> str:
    return f"Refund {Decimal(str(args['amount'])):.2f} on order {args['order_id']}"


def _refund_preview(args: dict) -> list[Change]:
    """The order's refunds before and after, and the refund record the call would add."""
    order_id, amount = args["order_id"], Decimal(str(args["amount"]))
    with shop.connect_readonly() as db:
        order = db.execute("SELECT total FROM orders WHERE id = ?", (order_id,)).fetchone()
    if not order:
        raise ToolError(f"no order {order_id}")
    total = Decimal(str(order["total"]))
    refunded = _refunded(order_id)
    after = refunded + amount
    return [
        Change(
            subject=f"order {order_id}",
            before={
                "total": f"{total:.2f}",
                "refunded": f"{refunded:.2f}",
                "left to refund": f"{total - refunded:.2f}",
            },
            after={
                "total": f"{total:.2f}",
                "refunded": f"{after:.2f}",
                "left to refund": f"{total - after:.2f}",
            },
        ),
        Change(
            subject="new refund",
            before=None,
            after={"order": order_id, "amount": f"{amount:.2f}", "reason": args.get("reason", "")},
        ),
    ]


@tool(
    reversible=False,
    blast=Blast.HIGH,
    accepts_idempotency_key=True,
    timeout_seconds=10,
    on_reject="tell_agent",
    describe=_refund_effect,
    preview=_refund_preview,
    # Undone by taking the refund back: the refund the call made, named by its result.
    compensate=Compensate(
        "reverse_refund",
        lambda args, result: {
            "refund_id": result["refund_id"],
            "reason": f"compensation of the refund on order {args['order_id']}",
        },
    ),
)
def issue_refund(
    order_id: int = Field(ge=1),
    amount: Decimal = Field(gt=0, max_digits=10, decimal_places=2),
    reason: str = Field(default="", max_length=300),
    ctx: ToolContext = None,
) -> dict:
    """Refund part or all of an order to the customer's original payment method."""
    key = ctx.idempotency_key if ctx else None
    if key:
        existing = Refund.objects.filter(idempotency_key=key).first()
        if existing:
            return _refund_result(existing, replayed=True)
    with shop.connect_readonly() as db:
        order = db.execute("SELECT total FROM orders WHERE id = ?", (order_id,)).fetchone()
    if not order:
        raise ToolError(f"no order {order_id}")
    with transaction.atomic():
        refunded = _refunded(order_id)
        left = Decimal(str(order["total"])) - refunded
        if amount > left:
            raise ToolError(f"refund of {amount} exceeds the {left} left on order {order_id}")
        try:
            with transaction.atomic():
                refund = Refund.objects.create(
                    order_id=order_id,
                    amount=amount,
                    reason=reason,
                    idempotency_key=key,
                    run_id=ctx.run_id if ctx else None,
                )
        except IntegrityError:
            # Same key raced in from another attempt: that refund is the one.
            return _refund_result(Refund.objects.get(idempotency_key=key), replayed=True)
    return _refund_result(refund)


def _refund_result(refund: Refund, *, replayed: bool = False) -> dict:
    out = {"refund_id": refund.pk, "order_id": refund.order_id, "amount": str(refund.amount)}
    if replayed:
        out["replayed"] = True
    return out


@tool(
    reversible=False,
    blast=Blast.HIGH,
    accepts_idempotency_key=True,
    timeout_seconds=10,
    describe="Reverse refund #{refund_id}",
)
def reverse_refund(
    refund_id: int = Field(ge=1),
    reason: str = Field(default="", max_length=300),
    ctx: ToolContext = None,
) -> dict:
    """Take a refund back (the compensation of issue_refund): the amount no longer counts as
    refunded on its order. Idempotent: a refund reversed already is reported, not reversed
    twice."""
    key = ctx.idempotency_key if ctx else None
    with transaction.atomic():
        refund = Refund.objects.select_for_update().filter(pk=refund_id).first()
        if refund is None:
            raise ToolError(f"no refund {refund_id}")
        if refund.reversed_at is not None:
            return _reversal_result(refund, replayed=True)
        refund.reversed_at = timezone.now()
        refund.reversal_key = key
        refund.save(update_fields=["reversed_at", "reversal_key"])
    return _reversal_result(refund)


def _reversal_result(refund: Refund, *, replayed: bool = False) -> dict:
    out = {
        "refund_id": refund.pk,
        "order_id": refund.order_id,
        "amount": str(refund.amount),
        "reversed": True,
    }
    if replayed:
        out["replayed"] = True
    return out


@tool(
    reversible=False,
    blast=Blast.MEDIUM,
    accepts_idempotency_key=False,
    timeout_seconds=10,
    describe="E-mail {to}: {subject}",
    preview=_email_preview,
)
def send_customer_email(
    to: EmailStr, subject: str = Field(max_length=200), body: str = Field(max_length=10000)
) -> dict:
    """E-mail a customer. Irreversible, and the mail system cannot de-duplicate retries."""
    EmailMessage(subject=subject, body=body, to=[to]).send()
    # What was sent, as sent: an approver may have edited it, and the agent reports it.
    return {"sent_to": to, "subject": subject, "body": body}


@tool(
    reversible=False,
    blast=Blast.LOW,
    accepts_idempotency_key=True,
    timeout_seconds=10,
    describe="Ask {supplier} for a quote: {quantity} x {product}",
)
def request_quote(
    supplier: EmailStr,
    product: str = Field(max_length=200),
    quantity: int = Field(ge=1, le=100_000),
    ctx: ToolContext = None,
) -> Pending:
    """E-mail a supplier for a price quote. The reply comes later: the run is told when it
    arrives (or when the supplier has not answered within the hour)."""
    body = (
        f"Please quote your price for {quantity} x {product}.\n\n"
        f"Reply by posting your quote to {ctx.callback_url}\n"
        'as JSON, e.g. {"result": {"unit_price": "4.20", "currency": "EUR"}}.'
    )
    headers = {"X-Idempotency-Key": ctx.idempotency_key}
    EmailMessage(
        subject=f"Quote request: {product}", body=body, to=[supplier], headers=headers
    ).send()
    return Pending(
        awaits=f"{supplier}'s quote for {quantity} x {product}",
        deadline=timedelta(hours=1),
        result={"sent_to": supplier},
    )


# Suppliers whose stock API hangs (the demo of enforced deadlines: check_supplier_stock).
HANGING_SUPPLIER_DOMAINS = ("slow-parts.example",)
HANG_SECONDS = 30


@tool(
    reversible=True,
    blast=Blast.NONE,
    timeout_seconds=2,
    retry=RetryPolicy(max_attempts=2, base_seconds=0.2, max_seconds=0.5),
    # A paid API: each attempt is billed, the one that hung too (docs/admins/budgets.md).
    cost_usd="0.01",
)
def check_supplier_stock(supplier: EmailStr, product: str = Field(max_length=200)) -> dict:
    """Ask a supplier's stock API how many units of a product it has. Read-only."""
    if supplier.rsplit("@", 1)[-1] in HANGING_SUPPLIER_DOMAINS:
        # Their API accepts the connection and never answers; the engine abandons the call
        # at its deadline (2 s) and retries once, then tells the agent it timed out.
        time.sleep(HANG_SECONDS)
    units = sum(map(ord, supplier + product)) % 900 + 100
    return {"supplier": supplier, "product": product, "in_stock": units}


# --- Goodwill credit (the learning gate policy's demo) ----------------------------------------
GOODWILL_REASONS = ("late delivery", "damaged item", "other")


@tool(
    reversible=False,
    blast=Blast.MEDIUM,
    accepts_idempotency_key=True,
    timeout_seconds=10,
    describe="Goodwill credit of {amount} to {customer_email} ({reason})",
)
def grant_goodwill_credit(
    customer_email: EmailStr,
    amount: Decimal = Field(gt=0, max_digits=8, decimal_places=2),
    reason: Literal["late delivery", "damaged item", "other"] = "other",
    ctx: ToolContext = None,
) -> dict:
    """Grant a customer a goodwill credit; the credit note is e-mailed to them. Irreversible:
    once granted, the customer may spend it."""
    headers = {"X-Idempotency-Key": ctx.idempotency_key} if ctx else {}
    EmailMessage(
        subject=f"A goodwill credit of {amount} for you",
        body=f"We are sorry about the {reason}. A credit of {amount} is now on your account.",
        to=[customer_email],
        headers=headers,
    ).send()
    return {"credited": str(amount), "to": customer_email, "reason": reason}


# --- Dispatch (the guided-recovery demo: the first warehouse refuses) --------------------------
WAREHOUSES = ("US-EAST", "EU-WEST")
CLOSED_WAREHOUSES = {"US-EAST": "closed for stocktaking until Monday"}


@tool(reversible=True, blast=Blast.LOW, accepts_idempotency_key=True, timeout_seconds=5)
def cancel_dispatch(dispatch: str = Field(pattern=r"^D-\d+-(US-EAST|EU-WEST)$")) -> dict:
    """Cancel a booked dispatch (the compensation of schedule_dispatch). Cancelling one that
    is cancelled already changes nothing."""
    return {"dispatch": dispatch, "cancelled": True}


@tool(
    reversible=True,
    blast=Blast.LOW,
    accepts_idempotency_key=True,
    timeout_seconds=5,
    compensate=Compensate("cancel_dispatch", lambda args, result: {"dispatch": result["dispatch"]}),
)
def schedule_dispatch(
    order_id: int = Field(ge=1), warehouse: Literal["US-EAST", "EU-WEST"] = "US-EAST"
) -> dict:
    """Book an order's dispatch from a warehouse (US-EAST or EU-WEST); cancellable."""
    closed = CLOSED_WAREHOUSES.get(warehouse)
    if closed:
        raise ToolError(f"warehouse {warehouse} is {closed}; it takes no dispatch today")
    return {
        "order_id": order_id,
        "warehouse": warehouse,
        "dispatch": f"D-{order_id}-{warehouse}",
        "ships": "today",
    }


# --- Shipping quotes (read-only lookups of one turn run together) -----------------------------
CARRIERS = ("parcelco", "swiftship", "eurofreight", "postal")
# A carrier's quote API takes this long to answer (the demo's stand-in for the network).
QUOTE_API_SECONDS = 0.5


@tool(reversible=True, blast=Blast.NONE, timeout_seconds=5)
def quote_shipping(
    carrier: Literal["parcelco", "swiftship", "eurofreight", "postal"],
    weight_kg: Decimal = Field(gt=0, le=1000),
    destination: str = Field(max_length=100),
) -> dict:
    """Ask one carrier's API for the price and delivery days of a parcel. Read-only."""
    time.sleep(QUOTE_API_SECONDS)
    seed = sum(map(ord, carrier + destination))
    price = (Decimal(seed % 40 + 8) + weight_kg * Decimal(seed % 5 + 2)).quantize(Decimal("0.01"))
    return {"carrier": carrier, "price_eur": str(price), "days": seed % 6 + 1}
