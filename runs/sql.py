"""Hand-built statements for the hot paths, and nothing else: the engine (runs/engine/), the
run's timeline (runs/models/timeline.py) and the gateway's sessions; tests/test_layering.py
holds the list of callers. Everything else uses the ORM.
Why and how: docs/design/modules.md."""

import functools
from collections.abc import Sequence
from typing import Any, TypeVar, cast

from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.db.models import Field, Model
from psycopg.types.json import Jsonb

M = TypeVar("M", bound=Model)


def _column(model: type[Model], name: str) -> str:
    field = model._meta.get_field(name)
    assert isinstance(field, Field) and field.column  # a concrete column
    return connection.ops.quote_name(field.column)


class JSONText:
    """A JSON field's value with its JSON text made already (a step's hash made it): on
    Postgres that text is what is sent (jsonb stores the value, not how it was spelt, so
    the row is the same as from Django's own encoding); elsewhere the value is adapted as
    the ORM adapts it (SQLite stores Django's spelling of it)."""

    __slots__ = ("text", "value")

    def __init__(self, value: Any, text: str):
        self.value, self.text = value, text


def _prep(model: type[Model], values: dict[str, Any]) -> list:
    # `connection` is a proxy that looks the thread's connection up on every attribute.
    conn = connections[DEFAULT_DB_ALIAS]
    fields = _fields(model, tuple(values))
    out = []
    for f, v in zip(fields, values.values(), strict=True):
        if type(v) is JSONText:
            if conn.vendor == "postgresql":
                out.append(Jsonb(v.text, dumps=str))  # the text as it is
                continue
            v = v.value
        out.append(f.get_db_prep_save(v, conn))
    return out


@functools.cache
def _fields(model: type[Model], names: tuple) -> tuple:
    return tuple(model._meta.get_field(name) for name in names)


@functools.cache
def _filled_on_insert(model: type[Model], names: tuple) -> tuple:
    """The fields among `names` whose value the field itself fills in when the object does
    not carry one (`fills_on_insert`: a step's run_created, runs/models.py)."""
    return tuple(f for f in _fields(model, names) if getattr(f, "fills_on_insert", False))


def _attnames(obj: Model, names: tuple[str, ...]) -> dict[str, Any]:
    """The values to write; a field whose JSON text the object carries (`json_text`, name to
    text: Run._next_step) as a JSONText."""
    fields = obj._meta
    for field in _filled_on_insert(type(obj), names):
        field.pre_save(obj, True)
    values = {n: getattr(obj, cast(Field, fields.get_field(n)).attname) for n in names}
    for name, text in getattr(obj, "json_text", {}).items():
        if name in values:
            values[name] = JSONText(values[name], text)
    return values


@functools.cache
def _update_sql(model: type[Model], set_names: tuple, where_shape: tuple) -> str:
    sets = ", ".join(f"{_column(model, n)} = %s" for n in set_names)
    where = " AND ".join(
        f"{_column(model, n)} {'IS NULL' if is_null else '= %s'}" for n, is_null in where_shape
    )
    return f"UPDATE {connection.ops.quote_name(model._meta.db_table)} SET {sets} WHERE {where}"


def _where(model: type[Model], where: dict[str, Any]) -> tuple[tuple, list]:
    """The WHERE's shape ((name, is None) pairs: None matches NULL) and its parameters."""
    shape = tuple((name, value is None) for name, value in where.items())
    return shape, _prep(model, {n: v for n, v in where.items() if v is not None})


def update(model: type[Model], values: dict[str, Any], where: dict[str, Any]) -> int:
    """UPDATE model SET values WHERE every `where` field equals its value (None: IS NULL);
    rows changed.

    Plain values only (no F expressions); `auto_now` fields are not filled in.
    """
    shape, where_params = _where(model, where)
    sql = _update_sql(model, tuple(values), shape)
    with connection.cursor() as cursor:
        cursor.execute(sql, _prep(model, values) + where_params)
        return cursor.rowcount


@functools.cache
def _insert_sql(
    model: type[Model],
    names: tuple,
    conflict: tuple,
    update_names: tuple,
    returning: bool,
    rows_from: str = "",
) -> str:
    """INSERT of `names`: one row of parameters, or with `rows_from` (a WITH clause's name)
    a row per row of it, parameters cast to their columns' types (INSERT .. SELECT does not
    take the types from the target columns the way VALUES does)."""
    table = connection.ops.quote_name(model._meta.db_table)
    if rows_from:
        source = f"SELECT {', '.join(_cast(model, n) for n in names)} FROM {rows_from}"
    else:
        source = f"VALUES ({', '.join(['%s'] * len(names))})"
    sql = f"INSERT INTO {table} ({', '.join(_column(model, n) for n in names)}) {source}"
    if conflict:
        sets = ", ".join(
            f"{_column(model, n)} = EXCLUDED.{_column(model, n)}" for n in update_names
        )
        action = f"DO UPDATE SET {sets}" if update_names else "DO NOTHING"
        sql += f" ON CONFLICT ({', '.join(_column(model, n) for n in conflict)}) {action}"
    if returning:
        sql += f" RETURNING {_column(model, model._meta.pk.name)}"
    return sql


@functools.cache
def _cast(model: type[Model], name: str) -> str:
    return f"CAST(%s AS {model._meta.get_field(name).db_type(connection)})"


def insert(obj: Model, names: tuple[str, ...], *, conflict=(), update_names=()) -> bool:
    """INSERT obj's `names` fields; sets an auto pk from RETURNING. With `conflict`, an
    upsert of `update_names`, or without them an insert only if no row has the same
    `conflict` values. False: nothing was written (and obj is not saved).

    Field defaults must already be on obj (they are, once the model is instantiated).
    """
    model = type(obj)
    pk = model._meta.pk
    returning = pk.name not in names and connection.features.can_return_columns_from_insert
    sql = _insert_sql(model, names, tuple(conflict), tuple(update_names), returning)
    with connection.cursor() as cursor:
        cursor.execute(sql, _prep(model, _attnames(obj, names)))
        if returning:
            row = cursor.fetchone()
            if row is None:
                return False
            obj.pk = row[0]
        elif not cursor.rowcount:
            return False
    obj._state.adding = False
    return True


# An insert for update_then_insert / insert_all: (obj, names, conflict, update_names).
Insert = tuple[Model, tuple[str, ...], tuple[str, ...], tuple[str, ...]]
# Another row's update for update_then_insert: (model, values, where), as `update` takes them.
Update = tuple[type[Model], dict[str, Any], dict[str, Any]]


@functools.cache
def _with_inserts_sql(update: tuple | None, inserts: tuple, also: tuple = ()) -> str:
    """WITH [u AS (UPDATE .. RETURNING 1),] i0 AS (INSERT ..), .., a0 AS (UPDATE ..), ..:
    each insert's rows come from u when there is an update (so none when it matched nothing),
    and each `also` update applies only if u matched; selects u's row count (or 1) and each
    insert's new pk."""
    parts, rows_from = [], ""
    if update is not None:
        parts.append(f"u AS ({_update_sql(*update)} RETURNING 1)")
        rows_from = "u"
    for i, (target, names, conflict, update_names) in enumerate(inserts):
        parts.append(
            f"i{i} AS ({_insert_sql(target, names, conflict, update_names, True, rows_from)})"
        )
    for j, shape in enumerate(also):
        parts.append(f"a{j} AS ({_update_sql(*shape)} AND EXISTS (SELECT 1 FROM u))")
    pks = "".join(
        f", (SELECT {_column(t, t._meta.pk.name)} FROM i{i})" for i, (t, *_) in enumerate(inserts)
    )
    matched = "(SELECT count(*) FROM u)" if update is not None else "1"
    return f"WITH {', '.join(parts)} SELECT {matched}{pks}"


def _write(
    update: tuple | None, params: list, inserts: list[Insert], also: Sequence[Update] = ()
) -> bool:
    """Postgres: the update (its SQL shape), the inserts and the other updates as one
    statement; sets the new pks."""
    shapes = tuple((type(obj), *rest) for obj, *rest in inserts)
    for obj, names, *_ in inserts:
        params += _prep(type(obj), _attnames(obj, names))
    also_shapes = []
    for model, values, where in also:
        where_shape, where_params = _where(model, where)
        also_shapes.append((model, tuple(values), where_shape))
        params += _prep(model, values) + where_params
    with connection.cursor() as cursor:
        cursor.execute(_with_inserts_sql(update, shapes, tuple(also_shapes)), params)
        matched, *pks = cursor.fetchone()
    if not matched:
        return False
    for (obj, *_), pk in zip(inserts, pks, strict=True):
        obj.pk = pk
        obj._state.adding = False
    return True


def _insert_each(inserts: list[Insert]) -> None:
    for obj, names, conflict, update_names in inserts:
        insert(obj, names, conflict=conflict, update_names=update_names)


def update_then_insert(
    model: type[Model],
    values: dict[str, Any],
    where: dict[str, Any],
    inserts: list[Insert],
    also: Sequence[Update] = (),
) -> bool:
    """`update`, and only if it changed a row, each insert and each `also` update: all or
    nothing. False (nothing written) when the WHERE matched nothing.

    On Postgres one statement (data-modifying WITH clauses), so outside `atomic` it is one
    round trip and its own transaction; elsewhere the same statements in one transaction.
    """
    if connection.vendor != "postgresql":
        with transaction.atomic():
            if not update(model, values, where):
                return False
            _insert_each(inserts)
            for other in also:
                update(*other)
        return True
    where_shape, where_params = _where(model, where)
    shape = (model, tuple(values), where_shape)
    return _write(shape, _prep(model, values) + where_params, inserts, also)


def insert_all(inserts: list[Insert]) -> None:
    """Each insert, all or nothing: one statement on Postgres (a row may reference one
    inserted before it: foreign keys are checked at the end of the statement), one
    transaction elsewhere."""
    if connection.vendor != "postgresql":
        with transaction.atomic():
            _insert_each(inserts)
        return
    _write(None, [], inserts)


@functools.cache
def _select_sql(
    model: type[Model],
    names: tuple,
    where: tuple,
    order_by: tuple,
    limit: int | None,
    also: tuple = (),
) -> str:
    def condition(name: str, size: int | None) -> str:
        if size is None:
            return f"{_column(model, name)} = %s"
        return f"{_column(model, name)} IN ({', '.join(['%s'] * size)})"

    sql = (
        f"SELECT {', '.join([*(_column(model, n) for n in names), *also])} "
        f"FROM {connection.ops.quote_name(model._meta.db_table)} "
        f"WHERE {' AND '.join(condition(n, size) for n, size in where)}"
    )
    if order_by:
        sql += " ORDER BY " + ", ".join(
            f"{_column(model, n.lstrip('-'))}{' DESC' if n.startswith('-') else ''}"
            for n in order_by
        )
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    return sql


def select(
    model: type[Model],
    names: tuple[str, ...],
    where: dict[str, Any],
    *,
    order_by: tuple[str, ...] = (),
    limit: int | None = None,
    also: tuple[str, ...] = (),
) -> list[tuple]:
    """Rows of `names` fields WHERE each `where` field equals its value (a tuple: is one of
    them), values converted as the ORM converts them. `order_by`: names, "-name" descending.
    `also`: SQL expressions (constant text, no parameters) read after the fields, as true or
    false (each must be a condition, such as an EXISTS about the row).
    """
    shape: list[tuple[str, int | None]] = []
    params: list[Any] = []
    for name, value in where.items():
        if isinstance(value, tuple):
            shape.append((name, len(value)))
            params += [_prep(model, {name: v})[0] for v in value]
        else:
            shape.append((name, None))
            params += _prep(model, {name: value})
    sql = _select_sql(model, tuple(names), tuple(shape), tuple(order_by), limit, tuple(also))
    conn = connections[DEFAULT_DB_ALIAS]
    converters = []
    for field in _fields(model, tuple(names)):
        col = field.get_col(model._meta.db_table)
        converters.append((col, conn.ops.get_db_converters(col) + col.get_db_converters(conn)))
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    out = []
    for row in rows:
        values = []
        for value, (col, funcs) in zip(row, converters, strict=False):
            for func in funcs:
                value = func(value, col, conn)
            values.append(value)
        # SQLite has no boolean type: its conditions come back as 0 and 1.
        values += [bool(v) for v in row[len(converters) :]]
        out.append(tuple(values))
    return out


def get(model: type[Model], pk: Any) -> Model | None:
    """The instance with this primary key (every concrete field loaded), or None."""
    found = get_with(model, pk, ())
    return found[0] if found else None


def get_with(model: type[M], pk: Any, also: tuple[str, ...]) -> tuple[M, tuple[Any, ...]] | None:
    """The instance with this primary key, and the `also` conditions (select's) about its row,
    read in the same statement; None without such a row."""
    fields = model._meta.concrete_fields
    rows = select(model, tuple(f.name for f in fields), {model._meta.pk.name: pk}, also=also)
    if not rows:
        return None
    row = rows[0]
    instance = model.from_db(DEFAULT_DB_ALIAS, [f.attname for f in fields], row[: len(fields)])
    return instance, row[len(fields) :]
