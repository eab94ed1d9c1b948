"""Hand-built statements for the writes every agent step makes.

The ORM spent more CPU building these three statements (the run's compare-and-set UPDATE,
the step's INSERT, the checkpoint's upsert) than the rest of a step together
(bench/engine_throughput.py: ~45 % of the worker's CPU). The SQL text is built once per
shape; values go through Django's own field adaptation (`get_db_prep_save`), so UUIDs,
dates, decimals and JSON are stored exactly as the ORM stores them, on SQLite and Postgres.
"""

import functools
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.models import Model


def _column(model: type[Model], name: str) -> str:
    return connection.ops.quote_name(model._meta.get_field(name).column)


def _prep(model: type[Model], values: dict[str, Any]) -> list:
    # `connection` is a proxy that looks the thread's connection up on every attribute.
    conn = connections[DEFAULT_DB_ALIAS]
    fields = _fields(model, tuple(values))
    return [f.get_db_prep_save(v, conn) for f, v in zip(fields, values.values(), strict=True)]


@functools.cache
def _fields(model: type[Model], names: tuple) -> tuple:
    return tuple(model._meta.get_field(name) for name in names)


@functools.cache
def _update_sql(model: type[Model], set_names: tuple, where_names: tuple) -> str:
    sets = ", ".join(f"{_column(model, n)} = %s" for n in set_names)
    where = " AND ".join(f"{_column(model, n)} = %s" for n in where_names)
    return f"UPDATE {connection.ops.quote_name(model._meta.db_table)} SET {sets} WHERE {where}"


def update(model: type[Model], values: dict[str, Any], where: dict[str, Any]) -> int:
    """UPDATE model SET values WHERE every `where` field equals its value; rows changed.

    Plain values only (no F expressions); `auto_now` fields are not filled in.
    """
    sql = _update_sql(model, tuple(values), tuple(where))
    with connection.cursor() as cursor:
        cursor.execute(sql, _prep(model, values) + _prep(model, where))
        return cursor.rowcount


@functools.cache
def _insert_sql(
    model: type[Model], names: tuple, conflict: tuple, update_names: tuple, returning: bool
) -> str:
    table = connection.ops.quote_name(model._meta.db_table)
    sql = (
        f"INSERT INTO {table} ({', '.join(_column(model, n) for n in names)}) "
        f"VALUES ({', '.join(['%s'] * len(names))})"
    )
    if conflict:
        sets = ", ".join(
            f"{_column(model, n)} = EXCLUDED.{_column(model, n)}" for n in update_names
        )
        sql += (
            f" ON CONFLICT ({', '.join(_column(model, n) for n in conflict)}) DO UPDATE SET {sets}"
        )
    if returning:
        sql += f" RETURNING {_column(model, model._meta.pk.name)}"
    return sql


def insert(obj: Model, names: tuple[str, ...], *, conflict=(), update_names=()) -> None:
    """INSERT obj's `names` fields (an upsert with `conflict`); sets an auto pk from RETURNING.

    Field defaults must already be on obj (they are, once the model is instantiated).
    """
    model = type(obj)
    pk = model._meta.pk
    returning = pk.name not in names and connection.features.can_return_columns_from_insert
    sql = _insert_sql(model, names, tuple(conflict), tuple(update_names), returning)
    fields = model._meta
    values = {n: getattr(obj, fields.get_field(n).attname) for n in names}
    with connection.cursor() as cursor:
        cursor.execute(sql, _prep(model, values))
        if returning:
            obj.pk = cursor.fetchone()[0]
    obj._state.adding = False
