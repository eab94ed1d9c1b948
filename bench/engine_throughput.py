"""Engine throughput: M concurrent runs x K steps on one real Celery worker, vs LangGraph.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentops_benchmark \
    REDIS_URL=redis://127.0.0.1:6379/12 \
        uv run --group bench python bench/engine_throughput.py --runs 10 --ks 5,20,100 \
            --concurrency 10 --repeat 3 --cases noop,effect --payload 200

A "step" is one agent iteration: one model turn that asks for a tool, plus that tool call
(K steps = K such iterations, then a final turn that ends the run). The model is scripted
(instant) and the tools are instant and registered below, so what is measured is the engine
itself: lease, hash-chained timeline steps, checkpoint, publish after commit over Redis,
re-enqueue per time slice. Two cases (--cases): `noop`, a tool without side effects, whose
result is written with the model step that asked for it (one write per iteration), and
`effect`, a tool with side effects (irreversible, low blast radius, never gated), which goes
through the ledger: its intent is committed before it runs and its outcome after. Both sides
carry the same payload (--payload characters): each model turn says that much text beside its
tool call, and each tool result echoes that many characters back.

Ours: a real `celery -A bench.engine_throughput worker --pool threads -c N` subprocess (this
module is its app: it registers the bench agent and tool), Redis broker, Postgres. Started
here, stopped by its PID at the end. The LangGraph baseline (optional `bench` dependency
group) is a 2-node ReAct loop (model node with an instant fake model, tool node) with the
sync PostgresSaver on a connection pool, the same M runs as M threads, same K. Each of our
rounds is followed by LangGraph's at the same K, and the ratio is reported per pair: a
shared machine's speed drifts more between minutes than the two sides differ.

Before the rounds, one warm-up round of M runs x 3 steps on each side (not counted), so that
the first measured round does not pay for opening connections and starting threads.

Figures per K (median of --repeat rounds): steps/s (all steps of all runs / wall time from
enqueue to the last run finished), per-step time p50/p99 (deltas between a run's consecutive
model steps for ours, between consecutive model-node calls for LangGraph), commits per step
(pg_stat_database of this database), WAL bytes per step of this database only, table growth
per step (pg_total_relation_size of the tables each side writes), CPU ms per step of the
process doing the work (our worker; the LangGraph threads' own process) and of all Postgres
processes. The load average and this process's CPU are printed before and after.

WAL of this database only: Postgres keeps no WAL counter per database (pg_stat_wal is the
cluster's), so the round's WAL is read back with pg_walinspect (contrib, Postgres 15+; the
bench creates the extension, which needs a superuser): the records between the round's
first and last LSN that touch a relation of this database (`rel <tablespace>/<this db's
oid>/…` in their block references), plus those of the same transactions without a block
(their commit records). Other databases' writes on a shared server then do not count. The
cluster-wide LSN difference is printed beside it ("cluster WAL"); without pg_walinspect only
that one is shown, and it is only meaningful with nothing else writing to the server.

Use --profile to run the engine in-process under cProfile instead (N threads calling
runs.engine.advance): prints where the time goes.
"""

import argparse
import itertools
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")
# Measure what production runs: DEBUG on logs every query (CPU, and up to 9 000 queries of
# memory per thread's connection). The worker subprocess inherits this environment.
os.environ.setdefault("DEBUG", "false")
os.environ.setdefault("SECRET_KEY", "bench-only-not-a-secret")

import django  # noqa: E402

django.setup()

from django import forms  # noqa: E402
from django.conf import settings  # noqa: E402
from django.db import DatabaseError, connection, transaction  # noqa: E402

from agentkit.agents import Agent, GateRules, Limits, get_agent, register  # noqa: E402
from agentkit.llm.scripted import text, tool_use  # noqa: E402
from agentkit.tools import Blast, tool  # noqa: E402
from agentops.celery import app  # noqa: E402
from bench.common import cpu_seconds, machine, percentile  # noqa: E402

AGENT = "bench-loop"
EFFECT_AGENT = "bench-effect"
OUR_TABLES = ("runs_run", "runs_step", "runs_checkpoint", "runs_sideeffect")
LG_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")


def pad(size: int) -> str:
    """The payload both sides carry: what a model says beside a call, what a tool returns."""
    return ("Checking the figures before the next call. " * (size // 43 + 1))[:size]


@tool(reversible=True, blast=Blast.NONE, name="bench_noop", inline=True)
def bench_noop(n: int, size: int = 0) -> dict:
    """Instantly returns its argument and `size` characters (benchmark only; inline: on the
    worker's own thread)."""
    return {"n": n, "echo": pad(size)}


@tool(reversible=False, blast=Blast.LOW, name="bench_write")
def bench_write(n: int, size: int = 0) -> dict:
    """Stands for a write elsewhere (benchmark only): instant, but declared irreversible, so
    the engine records its intent before and its outcome after, as for a real one."""
    return {"n": n, "echo": pad(size)}


CASES = {"noop": (AGENT, "bench_noop"), "effect": (EFFECT_AGENT, "bench_write")}


class BenchInput(forms.Form):
    k = forms.IntegerField(min_value=1, max_value=1000)
    payload = forms.IntegerField(min_value=0, max_value=100_000, required=False)


def _scripted(tool_name: str):
    def script(data: dict) -> list:
        size = int(data.get("payload") or 0)
        # Distinct arguments each turn, or the engine's no-progress check would stop the run.
        return [
            [text(pad(size)), tool_use(tool_name, n=i, size=size)] for i in range(int(data["k"]))
        ] + [[text("Done.")]]

    return script


def register_bench_agents() -> None:
    for slug, tool_name in CASES.values():
        if get_agent(slug):
            continue
        register(
            Agent(
                slug=slug,
                title=f"Benchmark loop ({tool_name})",
                description=f"Calls {tool_name} K times (benchmark only).",
                model="claude-sonnet-4-6",
                system_prompt=f"Call {tool_name} until told to stop.",
                tools=(tool_name,),
                input_form=BenchInput,
                prompt=lambda d, t=tool_name: f"Call {t} {d['k']} times.",
                script=_scripted(tool_name),
                limits=Limits(1001, Decimal("1000"), 3600, 3),
                max_limits=Limits(1001, Decimal("1000"), 3600, 3),
                gates=GateRules(never_gate=(tool_name,)),
            )
        )


register_bench_agents()
__all__ = ["app"]


# --- measuring ---------------------------------------------------------------------------------
WALINSPECT: bool | None = None  # whether pg_walinspect could be used (decided once)


def has_walinspect() -> bool:
    global WALINSPECT
    if WALINSPECT is None:
        try:
            with transaction.atomic(), connection.cursor() as cur:
                cur.execute("create extension if not exists pg_walinspect")
            WALINSPECT = True
        except Exception as exc:  # not installed, or not a superuser
            print(f"pg_walinspect unavailable ({exc}); WAL is the cluster's only")
            WALINSPECT = False
    return WALINSPECT


def database_wal_bytes(start_lsn: str, end_lsn: str) -> float:
    """WAL bytes between the two LSNs that belong to this database (see the docstring); nan
    if the server has already recycled those WAL segments."""
    try:
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute(
                """
                with recs as (
                    select xid, record_length,
                           block_ref ~ ('rel [0-9]+/' || (select oid from pg_database
                                        where datname = current_database()) || '/') as ours
                    from pg_get_wal_records_info(%s::pg_lsn, %s::pg_lsn)
                ), our_xids as (select distinct xid from recs where ours and xid <> '0')
                select coalesce(sum(record_length), 0) from recs
                where ours or xid in (select xid from our_xids)
                """,
                [start_lsn, end_lsn],
            )
            return float(cur.fetchone()[0])
    except DatabaseError as exc:  # e.g. "requested WAL segment … has already been removed"
        print(f"  (WAL of this database not readable: {exc})")
        return float("nan")


def pg_counters(tables: tuple[str, ...]) -> dict:
    with connection.cursor() as cur:
        cur.execute("select pg_stat_clear_snapshot()")
        # Flushed, so pg_walinspect may read up to it.
        cur.execute("select pg_current_wal_flush_lsn()::text")
        (lsn,) = cur.fetchone()
        cur.execute("select xact_commit from pg_stat_database where datname = current_database()")
        (commits,) = cur.fetchone()
        size = 0
        for table in tables:
            # A partitioned table (the timeline, runs/migrations/0028) holds nothing itself:
            # its partitions do. pg_partition_tree is the table alone when it has none.
            cur.execute(
                "select coalesce(sum(pg_total_relation_size(relid)), 0) "
                "from pg_partition_tree(to_regclass(%s))",
                [table],
            )
            size += cur.fetchone()[0]
    return {"lsn": lsn, "commits": commits, "size": size}


def pg_delta(before: dict, after: dict) -> dict:
    with connection.cursor() as cur:
        cur.execute("select pg_wal_lsn_diff(%s, %s)", [after["lsn"], before["lsn"]])
        (wal,) = cur.fetchone()
    return {
        "cluster_wal": float(wal),
        "wal": database_wal_bytes(before["lsn"], after["lsn"]) if has_walinspect() else float(wal),
        "commits": after["commits"] - before["commits"],
        "size": after["size"] - before["size"],
    }


def postgres_cpu_seconds() -> float:
    """CPU time of every postgres process on this machine (the server is local)."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() in ("postgres", "postmaster"):
                    total += cpu_seconds(int(entry.name))
            except OSError:
                continue
    return total


def settle_stats() -> None:
    # Backends flush their commit counters to pg_stat_database at most once a second.
    time.sleep(1.5)


# --- ours: a real worker -----------------------------------------------------------------------
def start_worker(concurrency: int, extra_env: dict | None = None) -> subprocess.Popen:
    from celery.app.control import Control  # noqa: F401  (import check before we spawn)

    app.control.purge()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "bench.engine_throughput",
            "worker",
            "--pool",
            "threads",
            "-c",
            str(concurrency),
            "--loglevel",
            "WARNING",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-n",
            f"bench-{os.getpid()}@%h",
        ],
        cwd=ROOT,
        env={**os.environ, **(extra_env or {})},
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"worker exited early with {proc.returncode}")
        if app.control.ping(destination=[f"bench-{os.getpid()}@{os.uname().nodename}"], timeout=1):
            return proc
        time.sleep(0.5)
    stop_worker(proc)
    raise SystemExit("worker did not answer a ping within 60 s")


def stop_worker(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def worker_rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def launch_runs(
    m: int, k: int, provider: str = "scripted", case: str = "noop", payload: int = 0
) -> list:
    from runs import engine

    agent = get_agent(CASES[case][0])
    limits = Limits(k + 1, Decimal("1000"), 3600, 3)
    # One transaction: every run is enqueued at the same commit, so they start together.
    with transaction.atomic():
        runs = [
            engine.launch(
                agent=agent, input={"k": k, "payload": payload}, limits=limits, provider=provider
            )
            for _ in range(m)
        ]
    return [r.pk for r in runs]


def finished(run_ids) -> dict:
    """{run id: status} of those of run_ids that finished. By primary key only and filtered
    here: with the status in the WHERE, Postgres combined the status index (every finished
    run of the database) with the keys, ~10 ms of its CPU per poll taken from what is measured."""
    from runs.models import Run

    rows = Run.objects.filter(pk__in=run_ids).values_list("pk", "status")
    return {pk: status for pk, status in rows if status in Run.TERMINAL_STATUSES}


def wait_finished(run_ids: list, timeout: float) -> None:
    left = set(run_ids)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left -= finished(left).keys()
        if not left:
            return
        # Figures come from the runs' own timestamps: polling more often only takes CPU.
        time.sleep(0.1)
    raise SystemExit(f"runs not finished within {timeout:.0f} s")


def our_figures(run_ids: list, k: int, started: float) -> dict:
    from runs.models import Run, Step

    runs = list(Run.objects.filter(pk__in=run_ids))
    bad = [r for r in runs if r.status != Run.Status.SUCCEEDED]
    if bad:
        raise SystemExit(f"{len(bad)} runs did not succeed: {bad[0].status} {bad[0].status_detail}")
    end = max(r.finished_at for r in runs).timestamp()
    deltas: list[float] = []
    for run_id in run_ids:
        times = list(
            Step.objects.filter(run_id=run_id, kind=Step.Kind.LLM)
            .order_by("seq")
            .values_list("created_at", flat=True)
        )
        deltas += [(b - a).total_seconds() * 1000 for a, b in itertools.pairwise(times)]
    steps = len(run_ids) * k
    return {
        "steps": steps,
        "rows": Step.objects.filter(run_id__in=run_ids).count(),
        "seconds": end - started,
        "p50": percentile(deltas, 0.5),
        "p99": percentile(deltas, 0.99),
    }


def run_ours(m: int, k: int, worker_pid: int, case: str, payload: int) -> dict:
    before = pg_counters(OUR_TABLES)
    cpu_before = cpu_seconds(worker_pid), postgres_cpu_seconds()
    started = time.time()
    run_ids = launch_runs(m, k, case=case, payload=payload)
    wait_finished(run_ids, timeout=600)
    cpu_after = cpu_seconds(worker_pid), postgres_cpu_seconds()
    figures = our_figures(run_ids, k, started)
    figures["cpu"] = cpu_after[0] - cpu_before[0]
    figures["pg_cpu"] = cpu_after[1] - cpu_before[1]
    settle_stats()
    figures.update(pg_delta(before, pg_counters(OUR_TABLES)))
    return figures


# --- LangGraph + PostgresSaver baseline ----------------------------------------------------------
def build_langgraph():
    """The same loop: the model node says `payload` characters beside its call of `tool`, the
    tool node runs our tool function and stores its JSON result (as ours does)."""
    import json

    from langchain_core.messages import AIMessage, ToolMessage
    from langgraph.graph import END, START, MessagesState, StateGraph

    tools_by_name = {"bench_noop": bench_noop, "bench_write": bench_write}

    class State(MessagesState):
        k: int
        tool: str
        payload: int
        turn: int
        model_times: list[float]

    def model(state: State) -> dict:
        turn = state.get("turn", 0)
        now = time.time()
        if turn < state["k"]:
            size = state["payload"]
            call = {"name": state["tool"], "args": {"n": turn, "size": size}, "id": f"call_{turn}"}
            message = AIMessage(content=pad(size), tool_calls=[call])
        else:
            message = AIMessage(content="Done.")
        return {
            "messages": [message],
            "turn": turn + 1,
            "model_times": [*state.get("model_times", []), now],
        }

    def tools(state: State) -> dict:
        last = state["messages"][-1]
        return {
            "messages": [
                ToolMessage(
                    content=json.dumps(tools_by_name[c["name"]](**c["args"])),
                    tool_call_id=c["id"],
                )
                for c in last.tool_calls
            ]
        }

    def route(state: State) -> str:
        return "tools" if state["messages"][-1].tool_calls else END

    graph = StateGraph(State)
    graph.add_node("model", model)
    graph.add_node("tools", tools)
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", route, ["tools", END])
    graph.add_edge("tools", "model")
    return graph


class LangGraph:
    def __init__(self, threads: int):
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg.rows import dict_row
        from psycopg_pool import ConnectionPool

        db = settings.DATABASES["default"]
        conninfo = (
            f"host={db['HOST']} port={db['PORT'] or 5432} dbname={db['NAME']} "
            f"user={db['USER']} password={db['PASSWORD']}"
        )
        self.pool = ConnectionPool(
            conninfo,
            min_size=1,
            max_size=max(2, threads),
            kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
            open=True,
        )
        saver = PostgresSaver(self.pool)
        saver.setup()
        self.graph = build_langgraph().compile(checkpointer=saver)
        self.round = 0

    def close(self) -> None:
        self.pool.close()

    def run(self, m: int, k: int, case: str = "noop", payload: int = 0) -> dict:
        from langchain_core.messages import HumanMessage

        self.round += 1
        results: list[list[float]] = [[] for _ in range(m)]
        errors: list[BaseException] = []

        def one(i: int) -> None:
            try:
                config = {
                    "configurable": {
                        "thread_id": f"bench-{os.getpid()}-{self.round}-{case}-{k}-{i}"
                    },
                    "recursion_limit": 2 * k + 10,
                }
                tool_name = CASES[case][1]
                out = self.graph.invoke(
                    {
                        "messages": [HumanMessage(f"Call {tool_name} {k} times.")],
                        "k": k,
                        "tool": tool_name,
                        "payload": payload,
                    },
                    config,
                )
                results[i] = out["model_times"]
            except BaseException as exc:
                errors.append(exc)

        before = pg_counters(LG_TABLES)
        cpu_before = time.process_time(), postgres_cpu_seconds()
        started = time.time()
        threads = [threading.Thread(target=one, args=(i,)) for i in range(m)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=600)
        seconds = time.time() - started
        cpu_after = time.process_time(), postgres_cpu_seconds()
        if errors:
            raise errors[0]
        deltas = [(b - a) * 1000 for times in results for a, b in itertools.pairwise(times)]
        settle_stats()
        figures = {
            "steps": m * k,
            "rows": 0,
            "seconds": seconds,
            "p50": percentile(deltas, 0.5),
            "p99": percentile(deltas, 0.99),
            "cpu": cpu_after[0] - cpu_before[0],
            "pg_cpu": cpu_after[1] - cpu_before[1],
        }
        figures.update(pg_delta(before, pg_counters(LG_TABLES)))
        return figures


# --- report ---------------------------------------------------------------------------------
def summarise(rounds: list[dict]) -> dict:
    steps = rounds[0]["steps"]
    med = lambda key: statistics.median(r[key] for r in rounds)  # noqa: E731
    return {
        "steps/s": statistics.median(r["steps"] / r["seconds"] for r in rounds),
        "p50 ms": med("p50"),
        "p99 ms": med("p99"),
        "commits/step": statistics.median(r["commits"] / steps for r in rounds),
        "WAL B/step": statistics.median(r["wal"] / steps for r in rounds),
        "cluster WAL": statistics.median(r["cluster_wal"] / steps for r in rounds),
        "table B/step": statistics.median(r["size"] / steps for r in rounds),
        "CPU ms/step": statistics.median(r["cpu"] * 1000 / steps for r in rounds),
        "pg CPU ms/step": statistics.median(r["pg_cpu"] * 1000 / steps for r in rounds),
        "all steps/s": [round(r["steps"] / r["seconds"]) for r in rounds],
    }


def print_table(results: dict) -> None:
    cols = [
        "steps/s",
        "p50 ms",
        "p99 ms",
        "commits/step",
        "WAL B/step",
        "cluster WAL",
        "table B/step",
        "CPU ms/step",
        "pg CPU ms/step",
    ]
    print(f"\n{'':<18}{'K':>5}" + "".join(f"{c:>15}" for c in cols) + "   rounds (steps/s)")
    for (side, case, k), s in results.items():
        print(
            f"{side + ' ' + case:<18}{k:>5}"
            + "".join(f"{s[c]:>15.1f}" for c in cols)
            + f"   {s['all steps/s']}"
        )


def profile(m: int, k: int, threads: int) -> None:
    """The engine in-process (threads calling advance) under cProfile: where the time goes."""
    import cProfile
    import pstats

    from runs import engine

    app.conf.task_always_eager = False
    run_ids = []
    # Launch without the broker: advance is called here directly.
    with transaction.atomic():
        run_ids = [
            engine.launch(
                agent=get_agent(AGENT),
                input={"k": k},
                limits=Limits(k + 1, Decimal("1000"), 3600, 3),
                provider="scripted",
            ).pk
            for _ in range(m)
        ]
        transaction.get_connection().run_on_commit = []  # no enqueue: we drive them here
    queue = list(run_ids)
    lock = threading.Lock()

    def drive() -> None:
        while True:
            with lock:
                if not queue:
                    return
                run_id = queue.pop()
            while engine.advance(run_id, time_slice=3600) == "requeued":
                pass

    profiler = cProfile.Profile()
    started = time.time()
    profiler.enable()
    # cProfile sees the thread it was enabled in: with one thread, drive right here.
    workers = [threading.Thread(target=drive) for _ in range(threads - 1)]
    for w in workers:
        w.start()
    drive()
    for w in workers:
        w.join()
    profiler.disable()
    seconds = time.time() - started
    print(
        f"profile: {m * k} steps in {seconds:.2f} s = {m * k / seconds:.0f} steps/s (cProfile on)"
    )
    stats = pstats.Stats(profiler)
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats("runs/|agentops/|channels|asgiref", 40)
    stats.print_callers("builtins.compile|update_wrapper")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=10, help="M concurrent runs")
    parser.add_argument("--ks", default="5,20,100", help="K steps per run, comma-separated")
    parser.add_argument("--concurrency", type=int, default=10, help="worker threads")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cases", default="noop,effect", help=f"of {', '.join(CASES)}")
    parser.add_argument("--payload", type=int, default=200, help="characters per turn and result")
    parser.add_argument("--skip-langgraph", action="store_true")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    if not (settings.IS_POSTGRES and settings.REDIS_URL):
        raise SystemExit("set DATABASE_URL (Postgres) and REDIS_URL; see the docstring")
    ks = [int(k) for k in args.ks.split(",")]
    cases = [c for c in args.cases.split(",") if c]
    if unknown := set(cases) - set(CASES):
        raise SystemExit(f"unknown cases {unknown}; known: {', '.join(CASES)}")
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    if args.profile:
        profile(args.runs, ks[-1], args.concurrency)
        return

    print(
        f"M={args.runs} runs, K={ks}, cases={cases}, payload={args.payload}, worker threads="
        f"{args.concurrency}, repeat={args.repeat}; before: {machine()}"
    )
    has_walinspect()
    raw: dict = {}
    proc = start_worker(args.concurrency)
    lg = None if args.skip_langgraph else LangGraph(args.runs)
    try:
        print(f"worker pid {proc.pid}, RSS {worker_rss_kb(proc.pid)} kB")
        # Warm-up, not measured, as wide as a round: both sides start their rounds with the
        # imports done and the threads and pooled connections a round of M runs uses (with
        # 2 warm-up runs, the first round paid for opening M - 2 database connections on
        # each side and, on ours, for starting worker threads).
        for case in cases:
            wait_finished(launch_runs(args.runs, 3, case=case), timeout=120)
            if lg:
                lg.run(args.runs, 3, case)
        time.sleep(3)
        # Each of our rounds is followed by LangGraph's at the same K, so both see the same
        # machine (a shared machine's speed drifts by 2x over minutes); the ratio is taken
        # per pair of rounds.
        for _ in range(args.repeat):
            for case in cases:
                for k in ks:
                    r = run_ours(args.runs, k, proc.pid, case, args.payload)
                    raw.setdefault(("agentops", case, k), []).append(r)
                    line = f"  {case} K={k}: agentops {r['steps'] / r['seconds']:.0f} steps/s"
                    if lg:
                        b = lg.run(args.runs, k, case, args.payload)
                        raw.setdefault(("langgraph", case, k), []).append(b)
                        line += f", langgraph {b['steps'] / b['seconds']:.0f} steps/s"
                    print(line, flush=True)
        print(f"worker RSS {worker_rss_kb(proc.pid)} kB")
        print(f"after: {machine(worker=proc.pid)}")
    finally:
        stop_worker(proc)
        if lg:
            lg.close()
    print_table({key: summarise(rounds) for key, rounds in raw.items()})
    if lg:
        print("\nagentops / langgraph, per pair of rounds (median):")
        for case in cases:
            for k in ks:
                pairs = zip(raw[("agentops", case, k)], raw[("langgraph", case, k)], strict=True)
                ratios = [
                    (a["steps"] / a["seconds"]) / (b["steps"] / b["seconds"]) for a, b in pairs
                ]
                print(
                    f"  {case} K={k}: {statistics.median(ratios):.2f}x  "
                    f"{[round(x, 2) for x in ratios]}"
                )
    print(f"load after: {os.getloadavg()} (shared 2-core machine, other jobs running)")


if __name__ == "__main__":
    main()
