"""span_router: a span-aware HTTP router in front of `spanc serve` replicas
(issue 27, point 4).

    .venv/bin/python3 deploy/router/span_router.py --port 8000 \\
        --spanc bazel-bin/tools/spanc/spanc --model MODEL.gguf \\
        --replica http://127.0.0.1:8001,tcp://127.0.0.1:5557,tcp://127.0.0.1:5558 \\
        --replica http://127.0.0.1:8002,tcp://127.0.0.1:5567,tcp://127.0.0.1:5568

each replica started as `spanc serve --port 8001 --kv-events
tcp://127.0.0.1:5557 --kv-events-replay tcp://127.0.0.1:5558`.

Why a router of its own. The routers people run credit prefix chains:
Dynamo 1.6.1's KvIndexer.find_matches walks a request's block hashes from
the root and stops at the first one a worker lacks, and sglang-router's
cache_aware matches the request text's prefix. A span (a document of a
plus, reused by spanc at any position) chains from its context, not from
the span before it, so it ends those matches; and neither Dynamo's
frontend nor sglang-router forwards /v1/query, so a span query cannot pass
through them at all (behind them spanc serves the flattened chats:
//test/e2e:dynamo_router_test, sglang_router_test). Dynamo's Python
bindings expose its indexer and router, but only behind its frontend,
which never sees a span query. So this router fronts the replicas itself
and takes what the others take from them: vLLM-format KV events
(--kv-events, replayed from 0 so it can start or restart after them) and
the load it put on each.

Per request (deploy/router/request_plan.py): the request's blocks as spanc
lays them out (spanc's tokenizer, chat template, span rules and hash),
from a replica's POST /v1/query/plan (a loopback round trip, 20-50 ms
here), or from `spanc compile --emit=plan` (--planner spanc, or when no
replica answers: a process per request, 0.2-0.8 s here), cached by the
request's bytes; span_scorer.ClusterIndex scores every replica: prompt
tokens it holds (--policy span: every block, wherever it sits; prefix:
the prefix chain only, Dynamo's view) minus --load-weight times the
tokens it still has to compute for the requests in flight on it (prompt
minus what was credited when each was sent). round-robin and least-loaded
plan nothing. A request that cannot be planned goes to the least loaded.

Forwarded: POST /v1/query, /v1/query/execute, /v1/chat/completions,
/v1/completions (streams passed through as they come, re-chunked), GET
/v1/models, /health (200 while a replica is up). Its own: GET
/router/stats (JSON: per replica up, in flight, requests, events, blocks
held; recent decisions with their scores) and /metrics (Prometheus text,
spanc_router_*). Each answer names its replica in `X-Spanc-Replica`.

Faults: a replica that refuses a connection, or fails --health-failures
health checks in a row (GET /health every --health-interval), is down:
its blocks are forgotten and no request goes to it until a health check
passes. A request not yet sent to a replica that is down goes to the next
best; one in flight on a replica that fails gets a 502 JSON error (a
stream already started gets an error event, then its end).

Bounds: loopback by default (--host; the events carry prompt tokens, so
their endpoints are loopback or ipc:// anyway), bodies up to --max-body
(413), a client's request head and body within --client-timeout (408),
--max-connections handled at once (503 beyond), a replica's answer within
--replica-timeout between bytes.

Needs pyzmq and msgpack (tools/python-requirements.txt: .venv).
"""

import argparse
import os
import signal
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def replica_spec(text):
    parts = text.split(",")
    if not parts[0].startswith("http://") or len(parts) > 3:
        raise argparse.ArgumentTypeError(
            "expected URL[,EVENTS[,REPLAY]], e.g. http://127.0.0.1:8001,"
            "tcp://127.0.0.1:5557,tcp://127.0.0.1:5558; got %r" % text)
    return (parts[0].rstrip("/"), parts[1] if len(parts) > 1 else None,
            parts[2] if len(parts) > 2 else None)


def positive(kind):
    def parse(text):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError("must be > 0: %s" % text)
        return value
    return parse


class Formatter(argparse.RawDescriptionHelpFormatter,
                argparse.ArgumentDefaultsHelpFormatter):
    """The description as written; defaults shown where there is one."""

    def _get_help_string(self, action):
        if action.default in (None, []):
            return action.help
        return super()._get_help_string(action)


def arguments(argv=None):
    parser = argparse.ArgumentParser(
        prog="span_router.py", description=__doc__,
        epilog="More in docs/SERVING.md (KV events and routers).",
        formatter_class=Formatter)
    add = parser.add_argument
    add("--replica", type=replica_spec, action="append", required=True,
        metavar="URL[,EVENTS[,REPLAY]]",
        help="a spanc serve replica: its HTTP base URL, its --kv-events "
        "endpoint and its --kv-events-replay endpoint (repeat per replica; "
        "without EVENTS the replica is scored by load only)")
    add("--host", default="127.0.0.1",
        help="address to listen on (loopback; another exposes prompts)")
    add("--port", type=int, default=8000, help="port (0: any free one)")
    add("--policy", default="span",
        choices=("span", "prefix", "round-robin", "least-loaded"),
        help="span: held blocks anywhere in the prompt; prefix: the held "
        "prefix chain only (Dynamo's view); round-robin; least-loaded")
    add("--planner", default="replica", choices=("replica", "spanc"),
        help="who lays requests out: a replica (POST /v1/query/plan), with "
        "spanc compile as the fallback when --model is given; or spanc "
        "compile only")
    add("--spanc", default="spanc",
        help="the spanc binary that plans requests (compile --emit=plan)")
    add("--model", help="the replicas' GGUF, for spanc compile (its "
        "tokenizer and chat template; required with --planner spanc)")
    add("--plan-arg", action="append", default=[], metavar="ARG",
        help="an extra argument for spanc compile, for replicas started "
        "with non-default span options (repeatable)")
    add("--block-size", type=positive(int),
        help="the replicas' KV block size (default: read from their "
        "/metrics; give it for replicas started with --api-key, whose "
        "/metrics the router cannot read)")
    add("--load-weight", type=float, default=1.0,
        help="tokens of credit one token still to compute costs")
    add("--plan-jobs", type=positive(int), default=2,
        help="spanc compile processes at once")
    add("--plan-timeout", type=positive(float), default=10.0,
        help="seconds a plan may take (then the request goes by load)")
    add("--max-body", type=positive(int), default=1 << 20,
        help="largest request body in bytes (413 beyond)")
    add("--client-timeout", type=positive(float), default=30.0,
        help="seconds for a client's request head and body, and for each "
        "write to it")
    add("--replica-timeout", type=positive(float), default=600.0,
        help="seconds a replica may take between bytes of its answer")
    add("--connect-timeout", type=positive(float), default=5.0,
        help="seconds to connect to a replica")
    add("--max-connections", type=positive(int), default=256,
        help="client connections handled at once (503 beyond)")
    add("--health-interval", type=positive(float), default=1.0,
        help="seconds between health checks of each replica")
    add("--health-failures", type=positive(int), default=2,
        help="failed health checks in a row that mark a replica down")
    add("--startup-timeout", type=positive(float), default=120.0,
        help="seconds to wait for a replica's /metrics at start (block "
        "size)")
    args = parser.parse_args(argv)
    if args.policy in ("span", "prefix") and args.planner == "spanc" and \
            not args.model:
        parser.error("--planner spanc needs --model")
    return args


def main(argv=None):
    args = arguments(argv)
    try:
        from router_core import Router, RouterError
        from router_http import make_server
    except ImportError as error:
        sys.exit("span_router: error: %s: run it with the tools venv's "
                 "python (.venv/bin/python3, tools/setup.sh), which has "
                 "pyzmq and msgpack" % error)
    try:
        router = Router(args)
    except RouterError as error:
        sys.exit("span_router: error: %s" % error)
    server = make_server(router, args)
    host, port = server.server_address[:2]
    print("span_router: %s policy over %d replicas on http://%s:%d" % (
        args.policy, len(router.replicas), host, port), file=sys.stderr,
        flush=True)
    stop = threading.Event()

    def shutdown(*_):
        if not stop.is_set():
            stop.set()
            threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, shutdown)
    signal.signal(signal.SIGINT, shutdown)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
        router.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
