"""The bundled sample shop database (customers, products, orders) the demo agents query.

Built deterministically on first use, so a fresh checkout needs no binary file. Agents only
ever open it read-only: the connection itself refuses writes (mode=ro + query_only).
"""

import random
import sqlite3
import threading
import time
from datetime import date, timedelta
from pathlib import Path

from django.conf import settings

_build_lock = threading.Lock()

FIRST = ["Ada", "Grace", "Alan", "Edsger", "Barbara", "Donald", "Frances", "Ken", "Radia", "Tim"]
LAST = ["Lovelace", "Hopper", "Turing", "Dijkstra", "Liskov", "Knuth", "Allen", "Thompson"]
PRODUCTS = [
    ("Mechanical keyboard", "hardware", 129.00),
    ("USB-C dock", "hardware", 219.00),
    ("27in monitor", "hardware", 449.00),
    ("Noise-cancelling headphones", "audio", 299.00),
    ("Studio microphone", "audio", 159.00),
    ("Standing desk", "furniture", 689.00),
    ("Ergonomic chair", "furniture", 899.00),
    ("Laptop stand", "furniture", 59.00),
    ("Webcam 4K", "hardware", 189.00),
    ("Cloud backup (1 year)", "software", 99.00),
    ("IDE licence", "software", 249.00),
    ("Cable kit", "accessories", 25.00),
]
SCHEMA = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, email TEXT UNIQUE NOT NULL,
    country TEXT NOT NULL, signed_up DATE NOT NULL);
CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT NOT NULL, category TEXT NOT NULL,
    price REAL NOT NULL);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL REFERENCES customers(id),
    product_id INTEGER NOT NULL REFERENCES products(id), quantity INTEGER NOT NULL,
    total REAL NOT NULL, status TEXT NOT NULL, ordered_on DATE NOT NULL);
"""


def path() -> Path:
    return Path(settings.AGENTOPS["SHOP_DB"])


def build(target: Path) -> None:
    rng = random.Random(42)
    tmp = target.with_suffix(".building")
    tmp.unlink(missing_ok=True)
    db = sqlite3.connect(tmp)
    db.executescript(SCHEMA)
    countries = ["DE", "FR", "GB", "US", "NL", "SE", "ES"]
    for i in range(1, 61):
        name = f"{FIRST[i % len(FIRST)]} {LAST[(i * 7) % len(LAST)]}"
        email = f"{name.lower().replace(' ', '.')}{i}@example.com"
        signed = date(2024, 1, 1) + timedelta(days=rng.randrange(600))
        db.execute(
            "INSERT INTO customers VALUES (?,?,?,?,?)",
            (i, name, email, rng.choice(countries), signed.isoformat()),
        )
    for i, (name, cat, price) in enumerate(PRODUCTS, start=1):
        db.execute("INSERT INTO products VALUES (?,?,?,?)", (i, name, cat, price))
    for i in range(1, 401):
        pid = rng.randrange(1, len(PRODUCTS) + 1)
        qty = rng.choice([1, 1, 1, 2, 3])
        status = rng.choice(["delivered"] * 6 + ["shipped", "processing", "returned"])
        day = date(2025, 1, 1) + timedelta(days=rng.randrange(600))
        db.execute(
            "INSERT INTO orders VALUES (?,?,?,?,?,?,?)",
            (
                i,
                rng.randrange(1, 61),
                pid,
                qty,
                round(PRODUCTS[pid - 1][2] * qty, 2),
                status,
                day.isoformat(),
            ),
        )
    db.commit()
    db.close()
    tmp.replace(target)


def ensure() -> Path:
    target = path()
    if not target.exists():
        with _build_lock:
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                build(target)
    return target


def connect_readonly(*, deadline: float | None = None) -> sqlite3.Connection:
    """A connection that cannot write, whatever SQL it is given; aborts past the deadline."""
    db = sqlite3.connect(f"file:{ensure()}?mode=ro", uri=True, check_same_thread=False)
    db.execute("PRAGMA query_only = ON")
    db.row_factory = sqlite3.Row
    if deadline is not None:
        # Returning non-zero aborts the running statement (sqlite3.OperationalError: interrupted).
        db.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
    return db
