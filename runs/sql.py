"""Hand-built statements for the writes every agent step makes.

The ORM spent more CPU building these three statements (the run's compare-and-set UPDATE,
the step's INSERT, the checkpoint's upsert) than the rest of a step together
(bench/engine_throughput.py: ~45 % of the worker's CPU). The SQL text is built once per
shape; values go through Django's own field adaptation (`get_db_prep_save`), so UUIDs,
dates, decimals and JSON are stored exactly as the ORM stores them, on SQLite and Postgres.

`update_then_insert` sends all three as one statement on Postgres: a transaction of
BEGIN, three statements and COMMIT is five round trips, and with many runs on one worker
each round trip also waits for the interpreter lock on its way back.
"""

import functools
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
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


def _attnames(obj: Model, names: tuple[str, ...]) -> dict[str, Any]:
    fields = obj._meta
    return {n: getattr(obj, fields.get_field(n).attname) for n in names}


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
    with connection.cursor() as cursor:
        cursor.execute(sql, _prep(model, _attnames(obj, names)))
        if returning:
            obj.pk = cursor.fetchone()[0]
    obj._state.adding = False


@functools.cache
def _cast(model: type[Model], name: str) -> str:
    # INSERT .. SELECT does not type its parameters from the target columns the way VALUES does.
    return f"CAST(%s AS {model._meta.get_field(name).db_type(connection)})"


@functools.cache
def _update_then_insert_sql(
    model: type[Model], set_names: tuple, where_names: tuple, inserts: tuple
) -> str:
    parts = [f"u AS ({_update_sql(model, set_names, where_names)} RETURNING 1)"]
    for i, (target, names, conflict, update_names) in enumerate(inserts):
        insert = _insert_sql(target, names, conflict, update_names, returning=True)
        values = f"VALUES ({', '.join(['%s'] * len(names))})"
        select = f"SELECT {', '.join(_cast(target, n) for n in names)} FROM u"
        parts.append(f"i{i} AS ({insert.replace(values, select, 1)})")
    pks = "".join(
        f", (SELECT {_column(t, t._meta.pk.name)} FROM i{i})" for i, (t, *_) in enumerate(inserts)
    )
    return f"WITH {', '.join(parts)} SELECT (SELECT count(*) FROM u){pks}"


def update_then_insert(
    model: type[Model],
    values: dict[str, Any],
    where: dict[str, Any],
    inserts: list[tuple[Model, tuple[str, ...], tuple[str, ...], tuple[str, ...]]],
) -> bool:
    """`update`, and only if it changed a row, each `insert` of (obj, names, conflict,
    update_names): all or nothing. False (nothing written) when the WHERE matched nothing.

    On Postgres one statement (data-modifying WITH clauses), so outside `atomic` it is one
    round trip and its own transaction; elsewhere the same statements in one transaction.
    """
    if connection.vendor != "postgresql":
        with transaction.atomic():
            if not update(model, values, where):
                return False
            for obj, names, conflict, update_names in inserts:
                insert(obj, names, conflict=conflict, update_names=update_names)
        return True
    shapes = tuple(
        (type(obj), names, conflict, update_names) for obj, names, conflict, update_names in inserts
    )
    sql = _update_then_insert_sql(model, tuple(values), tuple(where), shapes)
    params = _prep(model, values) + _prep(model, where)
    for obj, names, *_ in inserts:
        params += _prep(type(obj), _attnames(obj, names))
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        matched, *pks = cursor.fetchone()
    if not matched:
        return False
    for (obj, *_), pk in zip(inserts, pks, strict=True):
        obj.pk = pk
        obj._state.adding = False
    return True
