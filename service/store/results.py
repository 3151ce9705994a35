"""Stored leaderboard rows: what a succeeded job's results add (`insert_results`, the one write,
also run by the migration that fills the tables from older jobs' files), and the reads of the
leaderboard and comparisons: a page sorted and filtered in SQL, the columns of a task view
from its catalog, one job's row. Plain data in and out: what a row holds is decided by
service/standings.py, which reads the typed results."""

from __future__ import annotations

import json
from collections import namedtuple
from dataclasses import dataclass, field
from datetime import datetime
from operator import itemgetter
from typing import Any

from sqlalchemy import (
    ARRAY,
    JSON,
    String,
    Table,
    any_,
    bindparam,
    delete,
    false,
    func,
    insert,
    select,
    text,
    true,
    tuple_,
    update,
)
from sqlalchemy.engine import Connection

from service.store.db import Database
from service.store.models import BoardCountRow, ResultColumnRow, ResultValueRow, TaskResultRow

COLLATION = text("SELECT datcollate FROM pg_database WHERE datname = current_database()")
T, V, C, B = TaskResultRow.__table__, ResultValueRow.__table__, ResultColumnRow.__table__, BoardCountRow.__table__
PER = {"fingerprint": ("setting_key", "current", "rows"), "lineage": ("lineage_key", "lineage_current", "lineage_rows")}
NAME_SORTS = ("checkpoint", "setting", "finished_at", "job")  # sorts that are no value column
DIMENSIONS = ("lineage", "schedule", "rope", "backend", "thinking")  # filters whose rows are counted as kept
# the last tie-break of every sort: newest first (a checkpoint evaluated night after night with equal
# scores shows its latest night first); the index walks stop at the sort's own columns, the rows they tie
# on sorted by these (a sort of the ties, not of the view)
NEWEST = (T.c.finished_at.desc(), T.c.id.desc())
_Dimensions = namedtuple("_Dimensions", DIMENSIONS)  # a row's fixed filters' values, as `_tally` reads them
COUNT_BOUND = 1000  # a count of other filters' rows stops here: `total` is then "at least" (`total_exact` False)


@dataclass
class Column:
    """A column's meaning (service.schemas.LeaderboardColumn's fields)."""

    name: str
    higher_is_better: bool | None
    unit: str
    kind: str
    series: str | None = None
    axis: str | None = None
    key: str | None = None


@dataclass
class ResultRecord:
    """One leaderboard row of one job and task view, as stored."""

    task: str
    checkpoint: str
    fingerprint: str
    lineage: str | None
    schedule: str | None
    rope: str
    backend: str
    thinking: str | None
    data_revision: str | None
    options: dict[str, Any]
    setting: str
    setting_key: str
    lineage_key: str
    finished_at: datetime
    trained_context: int | None
    beyond_context: list[int]
    headline: str | None
    rank: float | None  # the headline's value, negated where higher is better: ascending is best first
    values: dict[str, float | None]
    columns: list[Column]
    job_id: str = ""
    errors: dict[str, float | None] = field(default_factory=dict)  # each value's standard error (migration 0011)


@dataclass
class BoardQuery:
    """A page of a task view's leaderboard: one row per setting (`per` fingerprint) or per
    lineage, filtered, sorted by `sort` (None: the headline), `descending` None: best first."""

    task: str
    per: str = "fingerprint"
    checkpoint: str | None = None
    checkpoint_prefix: str | None = None
    lineage: str | None = None
    schedule: str | None = None
    rope: str | None = None
    backend: str | None = None
    thinking: str | None = None
    finished_after: datetime | None = None
    finished_before: datetime | None = None
    sort: str | None = None
    descending: bool | None = None
    limit: int = 100
    offset: int = 0

    def filtered(self) -> bool:
        return any(v is not None for v in (self.checkpoint, self.checkpoint_prefix, self.lineage, self.schedule,
                                            self.rope, self.backend, self.thinking, self.finished_after,
                                            self.finished_before))


@dataclass
class BoardPage:
    total: int
    total_exact: bool
    headline: str | None
    columns: dict[str, Column]  # every column of the matching rows
    rows: list[ResultRecord] = field(default_factory=list)


def insert_results(conn: Connection, job_id: str, records: list[ResultRecord]) -> None:
    """Store a job's rows. A row takes the flag of its key from the row holding it when it finished
    as late or later (as a job does at its end); a job recorded late (the migration, oldest first,
    or a retry) takes a key only if it finished last."""
    for rec in records:
        flags, taken = {}, []
        for key, flag, count in PER.values():
            held = conn.execute(select(T.c.id, T.c.finished_at).where(
                T.c.task == rec.task, T.c[key] == getattr(rec, key), T.c[flag] == true())).all()
            flags[flag] = all(h.finished_at <= rec.finished_at for h in held)  # ties: the newer row
            if flags[flag]:
                taken.append((flag, count, [h.id for h in held]))
        result_id = conn.execute(insert(T).values(
            job_id=job_id, task=rec.task, checkpoint=rec.checkpoint, fingerprint=rec.fingerprint,
            lineage=rec.lineage, schedule=rec.schedule, rope=rec.rope, backend=rec.backend, thinking=rec.thinking,
            data_revision=rec.data_revision, options=rec.options, setting=rec.setting, setting_key=rec.setting_key,
            lineage_key=rec.lineage_key, finished_at=rec.finished_at, trained_context=rec.trained_context,
            beyond_context=rec.beyond_context, headline=rec.headline, unranked=rec.rank is None, rank=rec.rank,
            **flags)).inserted_primary_key[0]
        _catalog(conn, rec.task, rec.columns)
        if rec.values:
            better = {c.name: c.higher_is_better for c in rec.columns}
            if set(rec.values) - set(better):
                better = dict(conn.execute(select(C.c.name, C.c.higher_is_better).where(
                    C.c.task == rec.task, C.c.name.in_(list(rec.values)))).all()) | better
            conn.execute(insert(V), _value_rows(result_id, rec, flags["current"], better))
        kept: dict[tuple[str, ...], int] = {}
        for flag, count, old in taken:
            _tally_stored(conn, kept, flag, old, -1)
            for old_id in old:
                conn.execute(update(T).where(T.c.id == old_id).values({flag: False}))
                _count(conn, rec.task, old_id, count, -1)
            if flag == "current" and old:
                conn.execute(update(V).where(V.c.result_id.in_(old)).values(current=False))
            _tally(kept, rec.task, flag, rec, rec.values, +1)
            if rec.values:
                conn.execute(update(C).where(C.c.task == rec.task, C.c.name.in_(list(rec.values)))
                             .values({count: C.c[count] + 1}))
        _move(conn, kept)


def insert_results_many(conn: Connection, jobs: list[tuple[str, list[ResultRecord]]]) -> None:
    """The rows of many jobs, as `insert_results` of each in turn leaves them, in a few statements
    per batch instead of several per row (the bench seeds a year of nightly runs so; what
    `tests/service/test_standings.py` checks against the one-at-a-time path): the holders of the
    batch's keys read once, the flags decided in memory in the same order, the rows and values
    inserted in bulk, the displaced holders unflagged and the catalog's counts moved once."""
    recs = [(job_id, rec) for job_id, records in jobs for rec in records]
    if not recs:
        return
    tasks = sorted({rec.task for _, rec in recs})
    # holders: per (flag, task, key) the ids of the rows holding the flag (an int: stored; a
    # str: this batch's row at that position) with their finishing times
    holders: dict[tuple[str, str, str], list[tuple[int | str, datetime]]] = {}
    for key, flag, _ in PER.values():
        wanted = sorted({getattr(rec, key) for _, rec in recs})
        step = len(wanted) if conn.dialect.name == "postgresql" else 500  # PostgreSQL: each list one array
        for i in range(0, len(wanted), step):
            for h in conn.execute(select(T.c.id, T.c.task, T.c[key], T.c.finished_at).where(
                    _among(conn, T.c.task, tasks), _among(conn, T.c[key], wanted[i:i + step]), T.c[flag] == true())):
                holders.setdefault((flag, h.task, h[2]), []).append((h.id, h.finished_at))
    flags: list[dict[str, bool]] = []
    dropped: dict[str, list[int]] = {flag: [] for _, flag, _ in PER.values()}
    delta: dict[tuple[str, str], dict[str, int]] = {}
    kept: dict[tuple[str, ...], int] = {}

    def move(task: str, names: Any, count: str, step: int) -> None:
        for name in names:
            cell = delta.setdefault((task, name), {})
            cell[count] = cell.get(count, 0) + step

    for n, (_, rec) in enumerate(recs):
        flags.append({})
        for key, flag, _ in PER.values():
            held = holders.setdefault((flag, rec.task, getattr(rec, key)), [])
            flags[n][flag] = all(at <= rec.finished_at for _, at in held)  # ties: the newer row
            if not flags[n][flag]:
                continue
            for old, _ in held:
                if isinstance(old, str):  # this batch's: it is inserted without the flag
                    flags[int(old)][flag] = False
                else:
                    dropped[flag].append(old)
            held[:] = [(str(n), rec.finished_at)]
    # the counts the batch's rows move: those that hold a flag at the end (one that took it and
    # lost it to a later row of the batch moves nothing: counted once, not added and taken back)
    # (rows alike in their view, dimensions and columns moved together: a nightly history's
    # batch has far fewer such groups than rows)
    alike: dict[tuple[Any, ...], int] = {}
    for n, (_, rec) in enumerate(recs):
        for _, flag, count in PER.values():
            if flags[n][flag]:
                group = (rec.task, flag, count, _Dimensions(*(getattr(rec, d) for d in DIMENSIONS)), tuple(rec.values))
                alike[group] = alike.get(group, 0) + 1
    for (task, flag, count, dimensions, columns), rows in alike.items():
        move(task, columns, count, rows)
        _tally(kept, task, flag, dimensions, columns, rows)
    # the stored holders' columns, for their counts
    for _, flag, count in PER.values():
        ids = dropped[flag]
        _tally_stored(conn, kept, flag, ids, -1)
        for i in range(0, len(ids), 500):
            rows = conn.execute(select(T.c.task, V.c.column).join(V, V.c.result_id == T.c.id)
                                .where(T.c.id.in_(ids[i:i + 500]))).all()
            for task, column in rows:
                move(task, [column], count, -1)
            conn.execute(update(T).where(T.c.id.in_(ids[i:i + 500])).values({flag: False}))
            if flag == "current":
                conn.execute(update(V).where(V.c.result_id.in_(ids[i:i + 500])).values(current=False))
    rows = [dict(
        job_id=job_id, task=rec.task, checkpoint=rec.checkpoint, fingerprint=rec.fingerprint,
        lineage=rec.lineage, schedule=rec.schedule, rope=rec.rope, backend=rec.backend, thinking=rec.thinking,
        data_revision=rec.data_revision, options=rec.options, setting=rec.setting, setting_key=rec.setting_key,
        lineage_key=rec.lineage_key, finished_at=rec.finished_at, trained_context=rec.trained_context,
        beyond_context=rec.beyond_context, headline=rec.headline, unranked=rec.rank is None, rank=rec.rank,
        **flags[n]) for n, (job_id, rec) in enumerate(recs)]
    if conn.dialect.name == "postgresql":
        # ids taken from the table's sequence first, then every row copied in (COPY: one statement
        # for the batch, not one per row)
        result_ids = sorted(conn.execute(text(
            "SELECT nextval(pg_get_serial_sequence('task_results', 'id')) FROM generate_series(1, :n)"),
            {"n": len(rows)}).scalars())
        for rid, row in zip(result_ids, rows, strict=True):
            row["id"] = rid
        copy_rows(conn, T, rows)
    else:
        # inserted in bulk (an insert that returned each id in order goes row by row on SQLite), then
        # their ids read back by job and task view, which name one row of a batch (one not yet recorded)
        conn.execute(insert(T), rows)
        job_ids = sorted({job_id for job_id, _ in recs})
        stored: dict[tuple[str, str], int] = {}
        for i in range(0, len(job_ids), 500):
            stored |= {(r.job_id, r.task): r.id for r in conn.execute(
                select(T.c.id, T.c.job_id, T.c.task).where(T.c.job_id.in_(job_ids[i:i + 500])))}
        result_ids = [stored[(job_id, rec.task)] for job_id, rec in recs]
    newest: dict[tuple[str, str], Column] = {}  # each column's meaning: the last row's word, as one at a time
    for _, rec in recs:
        for c in rec.columns:
            newest[(rec.task, c.name)] = c
    known = {(r.task, r.name): r for r in conn.execute(select(C).where(C.c.task.in_(tasks)))}
    fresh = []
    for (task, name), c in newest.items():
        info = {"higher_is_better": c.higher_is_better, "unit": c.unit, "kind": c.kind, "series": c.series,
                "axis": c.axis, "key": c.key}
        old = known.get((task, name))
        if old is None:
            fresh.append(dict(task=task, name=name, rows=0, lineage_rows=0, **info))
        elif any(getattr(old, k) != v for k, v in info.items()):
            conn.execute(update(C).where(C.c.task == task, C.c.name == name).values(**info))
            _turn(conn, task, name, old.higher_is_better, c.higher_is_better)
    if fresh:
        conn.execute(insert(C), fresh)
    # the values, ranked by their column's word once the batch is in (as one at a time leaves them)
    words = {k: r.higher_is_better for k, r in known.items()} | {k: c.higher_is_better for k, c in newest.items()}
    values = [v for rid, (_, rec), f in zip(result_ids, recs, flags, strict=True)
              for v in _value_rows(rid, rec, f["current"], {c: words.get((rec.task, c)) for c in rec.values})]
    if values:
        copy_rows(conn, V, values)
    _move(conn, kept)
    for (task, name), steps in delta.items():
        steps = {k: v for k, v in steps.items() if v}
        if steps:
            conn.execute(update(C).where(C.c.task == task, C.c.name == name)
                         .values({k: C.c[k] + v for k, v in steps.items()}))


def _among(conn: Connection, column: Any, values: list[str]) -> Any:
    """`column IN values`: on PostgreSQL `= ANY` of one array parameter (a statement of one
    parameter, not one per value, for the driver to parse)."""
    if conn.dialect.name == "postgresql":
        return column == any_(bindparam(None, values, type_=ARRAY(String)))
    return column.in_(values)


def copy_rows(conn: Connection, table: Table, rows: list[dict[str, Any]]) -> None:
    """Rows inserted in bulk: on PostgreSQL by COPY (a statement for them all: the server's
    per-statement work and the driver's per-row parameters gone; JSON columns sent as their
    text, as SQLAlchemy's JSON type would), elsewhere by an executemany insert. Each row gives
    the same columns (the first row's)."""
    if not rows:
        return
    if conn.dialect.name != "postgresql":
        conn.execute(insert(table), rows)
        return
    names = list(rows[0])
    row_of = itemgetter(*names)
    as_json = [i for i, n in enumerate(names) if isinstance(table.c[n].type, JSON)]
    quote = conn.dialect.identifier_preparer.quote
    raw = conn.connection.driver_connection
    with raw.cursor() as cursor, cursor.copy(
            f"COPY {quote(table.name)} ({', '.join(quote(n) for n in names)}) FROM STDIN") as copy:
        for row in rows:
            values = row_of(row)
            if as_json:
                values = list(values)
                for i in as_json:
                    values[i] = json.dumps(values[i])
            copy.write_row(values)


def _catalog(conn: Connection, task: str, columns: list[Column]) -> None:
    """Each column in the task view's catalog, with the newest row's word on its meaning."""
    known = {r.name: r for r in conn.execute(select(C).where(C.c.task == task, C.c.name.in_([c.name for c in columns])))}
    for c in columns:
        info = {"higher_is_better": c.higher_is_better, "unit": c.unit, "kind": c.kind, "series": c.series,
                "axis": c.axis, "key": c.key}
        old = known.get(c.name)
        if old is None:
            conn.execute(insert(C).values(task=task, name=c.name, rows=0, lineage_rows=0, **info))
        elif any(getattr(old, k) != v for k, v in info.items()):
            conn.execute(update(C).where(C.c.task == task, C.c.name == c.name).values(**info))
            _turn(conn, task, c.name, old.higher_is_better, c.higher_is_better)


def _turn(conn: Connection, task: str, name: str, was: bool | None, now: bool | None) -> None:
    """A column whose direction changed: its stored values' ranks turned, best first again."""
    if (was is False) != (now is False):
        conn.execute(update(V).where(V.c.task == task, V.c.column == name).values(rank=-V.c.rank))


def _value_rows(result_id: int, rec: ResultRecord, current: bool, better: dict[str, bool | None]) -> list[dict]:
    """A row's values as stored, each with what sorts the board by it (see ResultValueRow)."""
    return [{"result_id": result_id, "column": c, "value": v, "task": rec.task, "current": current,
             "unranked": v is None, "rank": None if v is None else v if better.get(c) is False else -v,
             "checkpoint": rec.checkpoint, "setting": rec.setting,
             "stderr": rec.errors.get(c)} for c, v in rec.values.items()]


def _tally(kept: dict[tuple[str, ...], int], task: str, flag: str, row: Any, columns: Any, step: int) -> None:
    """A row (a record or a stored row) taking (+1) or losing (-1) a flag: the kept counts it moves,
    the whole view's and each fixed filter's it has a value of, the rows and each column."""
    columns = ("", *columns)
    get = kept.get
    for dimension in ("", *DIMENSIONS):
        value = getattr(row, dimension) if dimension else ""
        if value is None:
            continue
        for column in columns:
            key = (task, flag, dimension, value, column)
            kept[key] = get(key, 0) + step


def _tally_stored(conn: Connection, kept: dict[tuple[str, ...], int], flag: str, ids: list[int], step: int) -> None:
    for i in range(0, len(ids), 500):
        chunk = ids[i:i + 500]
        columns: dict[int, list[str]] = {}
        for rid, column in conn.execute(select(V.c.result_id, V.c.column).where(V.c.result_id.in_(chunk))):
            columns.setdefault(rid, []).append(column)
        for r in conn.execute(select(T.c.id, T.c.task, *(T.c[d] for d in DIMENSIONS)).where(T.c.id.in_(chunk))):
            _tally(kept, r.task, flag, r, columns.get(r.id, []), step)


def _move(conn: Connection, kept: dict[tuple[str, ...], int]) -> None:
    """The kept counts moved: a count not yet kept starts at its step."""
    keys = [k for k, step in kept.items() if step]
    if conn.dialect.name == "postgresql" and keys:  # one upsert of them all, its rows sent as arrays
        conn.execute(text(
            'INSERT INTO board_counts (task, flag, dimension, value, "column", rows) SELECT * FROM '
            "unnest(CAST(:task AS text[]), CAST(:flag AS text[]), CAST(:dimension AS text[]), "
            "CAST(:value AS text[]), CAST(:column AS text[]), CAST(:rows AS bigint[])) "
            'ON CONFLICT (task, flag, dimension, value, "column") DO UPDATE SET rows = board_counts.rows + excluded.rows'),
            {"task": [k[0] for k in keys], "flag": [k[1] for k in keys], "dimension": [k[2] for k in keys],
             "value": [k[3] for k in keys], "column": [k[4] for k in keys], "rows": [kept[k] for k in keys]})
        return
    cols = (B.c.task, B.c.flag, B.c.dimension, B.c.value, B.c.column)
    known: set[tuple[str, ...]] = set()
    for i in range(0, len(keys), 200):
        known |= {tuple(r) for r in conn.execute(select(*cols).where(tuple_(*cols).in_(keys[i:i + 200])))}
    names = ("task", "flag", "dimension", "value", "column")
    fresh = [dict(zip(names, k, strict=True), rows=kept[k]) for k in keys if k not in known]
    if fresh:
        conn.execute(insert(B), fresh)
    moved = [{f"k_{n}": v for n, v in zip(names, k, strict=True)} | {"k_step": kept[k]} for k in keys if k in known]
    if moved:
        conn.execute(update(B).where(*(c == bindparam(f"k_{n}") for c, n in zip(cols, names, strict=True)))
                     .values(rows=B.c.rows + bindparam("k_step")), moved)


def _count(conn: Connection, task: str, result_id: int, count: str, step: int) -> None:
    names = select(V.c.column).where(V.c.result_id == result_id).scalar_subquery()
    conn.execute(update(C).where(C.c.task == task, C.c.name.in_(names)).values({count: C.c[count] + step}))


def _record(row: Any, values: dict[str, float | None]) -> ResultRecord:
    m = row._mapping
    return ResultRecord(task=m["task"], checkpoint=m["checkpoint"], fingerprint=m["fingerprint"], lineage=m["lineage"],
                        schedule=m["schedule"], rope=m["rope"], backend=m["backend"], thinking=m["thinking"],
                        data_revision=m["data_revision"], options=m["options"], setting=m["setting"],
                        setting_key=m["setting_key"], lineage_key=m["lineage_key"], finished_at=m["finished_at"],
                        trained_context=m["trained_context"], beyond_context=m["beyond_context"] or [],
                        headline=m["headline"], rank=m["rank"], values=values, columns=[], job_id=m["job_id"])


def _column(row: Any) -> Column:
    return Column(name=row.name, higher_is_better=row.higher_is_better, unit=row.unit, kind=row.kind,
                  series=row.series, axis=row.axis, key=row.key)


class ResultAccess(Database):
    """The store's access to stored leaderboard rows."""

    def save_results(self, job_id: str, records: list[ResultRecord]) -> None:
        """A succeeded job's rows, in one transaction; a second call for the job replaces its rows."""
        with self.write_engine.begin() as conn:
            if conn.execute(select(T.c.id).where(T.c.job_id == job_id).limit(1)).first() is not None:
                self._forget_job(conn, job_id)
            insert_results(conn, job_id, records)

    def save_results_many(self, jobs: list[tuple[str, list[ResultRecord]]]) -> None:
        """Many succeeded jobs' rows in one transaction, the same rows `save_results` of each in
        turn stores (`insert_results_many`). For jobs not yet recorded: a job recorded again
        goes through `save_results`, which replaces its rows."""
        with self.write_engine.begin() as conn:
            ids = [job_id for job_id, _ in jobs]
            for i in range(0, len(ids), 500):
                again = conn.execute(select(T.c.job_id).where(T.c.job_id.in_(ids[i:i + 500])).limit(1)).first()
                if again is not None:
                    raise ValueError(f"job {again.job_id} is recorded already: record it again with save_results")
            insert_results_many(conn, jobs)

    @staticmethod
    def _forget_job(conn: Connection, job_id: str) -> None:
        rows = conn.execute(select(T.c.id, T.c.task, T.c.setting_key, T.c.lineage_key, T.c.current,
                                   T.c.lineage_current).where(T.c.job_id == job_id)).all()
        kept: dict[tuple[str, ...], int] = {}
        for r in rows:
            for _, flag, count in PER.values():
                if getattr(r, flag):
                    _count(conn, r.task, r.id, count, -1)
                    _tally_stored(conn, kept, flag, [r.id], -1)
        conn.execute(delete(V).where(V.c.result_id.in_([r.id for r in rows])))
        conn.execute(delete(T).where(T.c.job_id == job_id))
        for r in rows:
            for key, flag, count in PER.values():
                if getattr(r, flag):
                    newest = conn.execute(select(T.c.id).where(T.c.task == r.task, T.c[key] == getattr(r, key))
                                          .order_by(T.c.finished_at.desc(), T.c.id.desc()).limit(1)).scalar()
                    if newest is not None:
                        conn.execute(update(T).where(T.c.id == newest).values({flag: True}))
                        if flag == "current":
                            conn.execute(update(V).where(V.c.result_id == newest).values(current=True))
                        _count(conn, r.task, newest, count, +1)
                        _tally_stored(conn, kept, flag, [newest], +1)
        _move(conn, kept)

    def stored_result(self, job_id: str, task: str) -> ResultRecord | None:
        """A job's stored row of a task view (None: none stored), with its columns' meanings."""
        with self.read_engine.connect() as conn:
            row = conn.execute(select(T).where(T.c.job_id == job_id, T.c.task == task)).first()
            if row is None:
                return None
            read = conn.execute(select(V.c.column, V.c.value, V.c.stderr).where(V.c.result_id == row.id)).all()
            values = {c: v for c, v, _ in read}
            rec = _record(row, values)
            rec.errors = {c: e for c, _, e in read}
            rec.columns = [_column(c) for c in conn.execute(select(C).where(C.c.task == task, C.c.name.in_(values)))]
        return rec

    def job_standings(self, job_id: str, views: bool = False) -> list[ResultRecord]:
        """A job's stored rows, task by task, each with its columns' meanings: its results' own
        keys (`passkey`, `longbench`), and with `views` their views by point key as well
        (`longbench/qasper`). Three indexed reads, whatever the history's size."""
        where = [T.c.job_id == job_id] + ([] if views else [~T.c.task.contains("/", autoescape=True)])
        with self.read_engine.connect() as conn:
            rows = conn.execute(select(T).where(*where).order_by(T.c.task)).all()
            if not rows:
                return []
            values: dict[int, dict[str, float | None]] = {r.id: {} for r in rows}
            errors: dict[int, dict[str, float | None]] = {r.id: {} for r in rows}
            for rid, column, value, stderr in conn.execute(select(V.c.result_id, V.c.column, V.c.value, V.c.stderr)
                                                           .where(V.c.result_id.in_(list(values)))):
                values[rid][column] = value
                errors[rid][column] = stderr
            tasks = sorted({r.task for r in rows})
            catalog: dict[str, dict[str, Column]] = {t: {} for t in tasks}
            for c in conn.execute(select(C).where(C.c.task.in_(tasks))):
                catalog[c.task][c.name] = _column(c)
        out = []
        for r in rows:
            rec = _record(r, values[r.id])
            rec.errors = errors[r.id]
            rec.columns = [catalog[r.task][n] for n in values[r.id] if n in catalog[r.task]]
            out.append(rec)
        return out

    def board(self, q: BoardQuery) -> BoardPage:
        """One page of a task view's leaderboard: the matching rows' count, the headline (the
        newest matching row's), every column of the matching rows and the page's rows. Each part
        a read that stops at what the page shows, whatever the history's size: the count and the
        columns kept (`board_counts`) for the whole view and for one fixed filter (lineage,
        schedule, RoPE, backend, thinking), otherwise counted up to COUNT_BOUND (`total_exact`
        False beyond) and each catalog column's presence probed; the page an index walk in the
        asked order (a value column's through `ix_result_values_board`)."""
        _, flag, count = PER[q.per]
        kept = self._kept(q)
        with self.read_engine.connect() as conn:
            where = [T.c.task == q.task, T.c[flag] == true(), *self._filters(conn, q)]
            if kept is not None:
                total = conn.execute(select(B.c.rows).where(
                    B.c.task == q.task, B.c.flag == flag, B.c.dimension == kept[0], B.c.value == kept[1],
                    B.c.column == "")).scalar() or 0
                exact = True
            else:
                n = conn.execute(select(func.count()).select_from(
                    select(T.c.id).where(*where).limit(COUNT_BOUND + 1).subquery())).scalar() or 0
                total, exact = min(n, COUNT_BOUND), n <= COUNT_BOUND
            headline = conn.execute(select(T.c.headline).where(*where)
                                    .order_by(T.c.finished_at.desc(), T.c.id.desc()).limit(1)).scalar()
            if kept is not None and kept[0]:
                names = select(B.c.column).where(B.c.task == q.task, B.c.flag == flag, B.c.dimension == kept[0],
                                                 B.c.value == kept[1], B.c.column != "", B.c.rows > 0)
                catalog = conn.execute(select(C).where(C.c.task == q.task, C.c.name.in_(names)))
            elif q.filtered():
                present = select(V.c.result_id).join(T, T.c.id == V.c.result_id).where(
                    V.c.column == C.c.name, *where).exists()
                catalog = conn.execute(select(C).where(C.c.task == q.task, C.c[count] > 0, present))
            else:
                catalog = conn.execute(select(C).where(C.c.task == q.task, C.c[count] > 0))
            columns = {c.name: _column(c) for c in catalog}
            if q.sort is not None and q.sort not in NAME_SORTS and q.per == "fingerprint":
                ids = self._by_value(conn, q, where, columns)
            else:  # the ids first: what is sorted is narrow where the rows a filter matches are sorted
                order = self._order(q, headline, columns)
                ids = conn.execute(select(T.c.id).where(*where).order_by(*order).limit(q.limit)
                                   .offset(q.offset)).scalars().all()
            found = {r.id: r for r in conn.execute(select(T).where(T.c.id.in_(ids)))} if ids else {}
            rows = [found[i] for i in ids]
            values: dict[int, dict[str, float | None]] = {r.id: {} for r in rows}
            errors: dict[int, dict[str, float | None]] = {r.id: {} for r in rows}
            if rows:
                for rid, column, value, stderr in conn.execute(
                        select(V.c.result_id, V.c.column, V.c.value, V.c.stderr)
                        .where(V.c.result_id.in_(list(values)))):
                    values[rid][column] = value
                    errors[rid][column] = stderr
        records = [_record(r, values[r.id]) for r in rows]
        for rec, r in zip(records, rows, strict=True):
            rec.errors = errors[r.id]
        return BoardPage(total=total, total_exact=exact, headline=headline, columns=columns, rows=records)

    @staticmethod
    def _kept(q: BoardQuery) -> tuple[str, str] | None:
        """The kept count a query's rows are: the whole view's ('', ''), or one fixed filter's
        (dimension, value); None when other filters or several are asked."""
        fixed = [(d, getattr(q, d)) for d in DIMENSIONS if getattr(q, d) is not None]
        other = any(v is not None for v in (q.checkpoint, q.checkpoint_prefix, q.finished_after, q.finished_before))
        if other or len(fixed) > 1:
            return None
        return fixed[0] if fixed else ("", "")

    def _bytewise(self, conn: Connection) -> bool:
        """Whether text compares by code point (SQLite; PostgreSQL under the C collation): a name
        prefix is then also an index range."""
        if not hasattr(self, "_bytewise_text"):
            self._bytewise_text = conn.dialect.name == "sqlite" or conn.execute(COLLATION).scalar() in (
                "C", "POSIX", "C.UTF-8", "C.utf8")
        return self._bytewise_text

    def _by_value(self, conn: Connection, q: BoardQuery, where: list, columns: dict[str, Column]) -> list[int]:
        """The page's row ids sorted by a value column: its valued rows walked in the index's order
        (rank, checkpoint, setting; then newest first), then, past them, the rows without a value by name."""
        sort = q.sort
        better = columns[sort].higher_is_better if sort in columns else None
        down = q.descending if q.descending is not None else better is not False
        word = conn.execute(select(C.c.higher_is_better).where(C.c.task == q.task, C.c.name == sort)).scalar()
        rank = V.c.rank.asc() if down == (word is not False) else V.c.rank.desc()  # rank: -value unless lower is better
        valued = conn.execute(select(V.c.result_id).join(T, T.c.id == V.c.result_id).where(
            V.c.task == q.task, V.c.column == sort, V.c.current == true(), V.c.unranked == false(), *where)
            .order_by(rank, V.c.checkpoint, V.c.setting, *NEWEST).limit(q.offset + q.limit)).scalars().all()
        ids = list(valued[q.offset:])
        if len(valued) < q.offset + q.limit:
            has = select(V.c.result_id).where(V.c.result_id == T.c.id, V.c.column == sort, V.c.value.is_not(None))
            ids += conn.execute(select(T.c.id).where(*where, ~has.exists())
                                .order_by(T.c.checkpoint, T.c.setting, *NEWEST)
                                .offset(max(0, q.offset - len(valued))).limit(q.limit - len(ids))).scalars().all()
        return ids

    def _filters(self, conn: Connection, q: BoardQuery) -> list:
        where = []
        for name in ("checkpoint", "lineage", "schedule", "rope", "backend", "thinking"):
            if getattr(q, name) is not None:
                where.append(T.c[name] == getattr(q, name))
        if q.checkpoint_prefix is not None:
            prefix = q.checkpoint_prefix
            where.append(T.c.checkpoint.startswith(prefix, autoescape=True))
            if prefix and self._bytewise(conn):  # the same rows as an index range: names from prefix up to its next
                where.append(T.c.checkpoint >= prefix)
                after = ord(prefix[-1]) + 1
                after = 0xE000 if 0xD800 <= after < 0xE000 else after  # no surrogates
                if after <= 0x10FFFF:
                    where.append(T.c.checkpoint < prefix[:-1] + chr(after))
        if q.finished_after is not None:
            where.append(T.c.finished_at >= q.finished_after)
        if q.finished_before is not None:
            where.append(T.c.finished_at < q.finished_before)
        return where
    @staticmethod
    def _order(q: BoardQuery, headline: str | None, columns: dict[str, Column]) -> list:
        """Values best first unless asked otherwise, rows without one last; names and times
        as asked (times newest first by default); then checkpoint and setting, as before, and
        then newest first (a checkpoint's nights of equal scores: its latest on the first page)."""
        ties = [T.c.checkpoint, T.c.setting, *NEWEST]
        if q.sort in NAME_SORTS:
            col = T.c.job_id if q.sort == "job" else T.c[q.sort]
            down = q.descending if q.descending is not None else q.sort == "finished_at"
            return [col.desc() if down else col.asc(), *ties]
        sort = q.sort or headline
        better = columns[sort].higher_is_better if sort in columns else None
        if q.sort is None:
            if better is None:  # a measurement leads: newest first, as before
                return [T.c.finished_at.desc(), T.c.id.desc()]
            best_first = q.descending is None or q.descending == better
            return [T.c.unranked.asc(), T.c.rank.asc() if best_first else T.c.rank.desc(), *ties]
        value = select(V.c.value).where(V.c.result_id == T.c.id, V.c.column == sort).scalar_subquery()
        down = q.descending if q.descending is not None else better is not False
        return [value.is_(None).asc(), value.desc() if down else value.asc(), *ties]
